package vendorsim_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool/internal/vendorsim"
)

var t0 = time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)

// clock is a settable clock for the sim.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: t0} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// start starts a sim and closes it with the test.
func start(t *testing.T, cfg vendorsim.Config) *vendorsim.Server {
	t.Helper()
	s := vendorsim.Start(cfg)
	t.Cleanup(s.Close)
	return s
}

// answer is one answer read whole.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// decode decodes the answer's body as JSON.
func (a answer) decode(t *testing.T) map[string]any {
	t.Helper()
	var v map[string]any
	require.NoError(t, json.Unmarshal(a.body, &v), "body %s", a.body)
	return v
}

// send sends a request and reads its answer; auth is applied to the request
// (nil for none).
func send(t *testing.T, method, url string, body string, auth func(*http.Request)) answer {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if auth != nil {
		auth(req)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return answer{status: resp.StatusCode, header: resp.Header, body: b}
}

func bearer(k string) func(*http.Request) {
	return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+k) }
}

func xAPIKey(k string) func(*http.Request) {
	return func(r *http.Request) { r.Header.Set("x-api-key", k) }
}

func googKey(k string) func(*http.Request) {
	return func(r *http.Request) { r.Header.Set("x-goog-api-key", k) }
}

const chatBody = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hello"}]}`

// chat posts an OpenAI chat request with key as a bearer token.
func chat(t *testing.T, s *vendorsim.Server, key, body string) answer {
	t.Helper()
	return send(t, http.MethodPost, s.URL()+"/v1/chat/completions", body, bearer(key))
}

// event is one server-sent event.
type event struct {
	name string
	data string
}

// parseSSE splits an event stream into its events, accepting LF or CRLF line
// ends, and fails the test on a line that is neither a field nor blank.
func parseSSE(t *testing.T, stream []byte) []event {
	t.Helper()
	text := strings.ReplaceAll(string(stream), "\r\n", "\n")
	require.True(t, strings.HasSuffix(text, "\n\n"), "the stream ends with a blank line: %q", text)
	var out []event
	for _, block := range strings.Split(strings.TrimSuffix(text, "\n\n"), "\n\n") {
		var ev event
		for _, line := range strings.Split(block, "\n") {
			field, value, ok := strings.Cut(line, ": ")
			require.True(t, ok, "line %q", line)
			switch field {
			case "event":
				ev.name = value
			case "data":
				require.Empty(t, ev.data, "one data line per event")
				ev.data = value
			default:
				t.Fatalf("unexpected field %q", field)
			}
		}
		out = append(out, ev)
	}
	return out
}

// jsonOf decodes one event's data.
func jsonOf(t *testing.T, data string) map[string]any {
	t.Helper()
	var v map[string]any
	require.NoError(t, json.NewDecoder(bytes.NewReader([]byte(data))).Decode(&v), "data %s", data)
	return v
}

// num reads a JSON number at a path of object keys.
func num(t *testing.T, v any, path ...string) float64 {
	t.Helper()
	x := dig(t, v, path...)
	f, ok := x.(float64)
	require.True(t, ok, "%v at %v is not a number", x, path)
	return f
}

// str reads a JSON string at a path of object keys.
func str(t *testing.T, v any, path ...string) string {
	t.Helper()
	x := dig(t, v, path...)
	s, ok := x.(string)
	require.True(t, ok, "%v at %v is not a string", x, path)
	return s
}

func dig(t *testing.T, v any, path ...string) any {
	t.Helper()
	for _, p := range path {
		m, ok := v.(map[string]any)
		require.True(t, ok, "%v is not an object (looking for %q)", v, p)
		v, ok = m[p]
		require.True(t, ok, "no %q in %v", p, m)
	}
	return v
}
