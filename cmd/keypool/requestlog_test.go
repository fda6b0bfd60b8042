package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool"
	"github.com/keypool-go/keypool/internal/vendorsim"
)

// loggedProxy starts the proxy for conf with a log at level, its watcher
// ticking every poll, and returns its URL, the server and the log.
func loggedProxy(t *testing.T, conf string, level slog.Level) (string, *server, *syncBuffer) {
	t.Helper()
	c, err := parseConfig([]byte(conf), "keypool.yaml")
	require.NoError(t, err)
	return startLogged(t, c, level, nil)
}

// startLogged starts the proxy for c, over store or, when it is nil, the
// state c names, with a log at level and its watcher ticking every poll,
// and returns its URL, the server and the log.
func startLogged(t *testing.T, c *config, level slog.Level, store *stuckStore) (string, *server, *syncBuffer) {
	t.Helper()
	s, err := c.resolve(func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	var st keypool.Store = store
	var closer io.Closer = store
	if store == nil {
		st, closer, err = openState(s, slog.New(slog.DiscardHandler))
		require.NoError(t, err)
	}
	logs := &syncBuffer{}
	srv, err := newServerWith(s, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: level})), st, closer)
	require.NoError(t, err)
	hs := httptest.NewServer(srv.handler())
	t.Cleanup(func() {
		hs.Close()
		srv.close()
	})
	return hs.URL, srv, logs
}

// logLines returns the lines of logs whose message is msg.
func logLines(logs *syncBuffer, msg string) []string {
	var out []string
	for _, l := range lines(logs.String()) {
		if strings.Contains(l, " msg="+msg+" ") || strings.Contains(l, ` msg="`+msg+`" `) {
			out = append(out, l)
		}
	}
	return out
}

// send sends a request to the proxy at base with the proxy token, or none,
// and returns the status.
func send(t *testing.T, method, url, token string) int {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(chatBody))
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func TestServeLogsALinePerRequest(t *testing.T) {
	sim := vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, Keys: []vendorsim.Key{
		{Secret: "sk-log-gone", ID: "gone", Revoked: true}, {Secret: "sk-log-good", ID: "good"}}})
	t.Cleanup(sim.Close)
	base, _, logs := loggedProxy(t, simConfig(sim, t.TempDir(), `
      - {id: gone, secret: sk-log-gone}
      - {id: good, secret: sk-log-good}`)+"    limits: {rpd: 3}\n", slog.LevelInfo)

	assert.Equal(t, http.StatusOK, send(t, http.MethodPost, base+"/v1/chat/completions", proxyToken)) // gone, then good
	assert.Equal(t, http.StatusOK, send(t, http.MethodPost, base+"/v1/chat/completions", proxyToken))
	assert.Equal(t, http.StatusOK, send(t, http.MethodPost, base+"/v1/chat/completions", proxyToken))
	assert.Equal(t, http.StatusTooManyRequests, send(t, http.MethodPost, base+"/v1/chat/completions", proxyToken), "good's day is full, gone is benched")
	assert.Equal(t, http.StatusUnauthorized, send(t, http.MethodPost, base+"/v1/chat/completions", ""))
	assert.Equal(t, http.StatusOK, send(t, http.MethodGet, base+"/status", proxyToken))

	got := logLines(logs, "request")
	require.Len(t, got, 5, "a line for each forwarded request, none for /status at info:\n%s", logs.String())
	want := []string{
		`method=POST path=/v1/chat/completions client=proxy_tokens[0] route=openai key=good model=gpt-4o-mini status=200 outcome=none attempts=2 duration=`,
		`method=POST path=/v1/chat/completions client=proxy_tokens[0] route=openai key=good model=gpt-4o-mini status=200 outcome=none attempts=1 duration=`,
		`method=POST path=/v1/chat/completions client=proxy_tokens[0] route=openai key=good model=gpt-4o-mini status=200 outcome=none attempts=1 duration=`,
		`method=POST path=/v1/chat/completions client=proxy_tokens[0] route="" key="" model="" status=429 outcome=no_key attempts=0 duration=`,
		`method=POST path=/v1/chat/completions route="" key="" model="" status=401 outcome=unauthorized attempts=0 duration=`,
	}
	for i, w := range want {
		assert.Contains(t, got[i], "level=INFO msg=request "+w, "request %d", i)
		assert.Regexp(t, `duration=\d+(\.\d+)?(µs|ms|s)$`, got[i])
	}
	bench := logLines(logs, "benched")
	require.Len(t, bench, 1, logs.String())
	assert.Regexp(t, `route=openai key=gone model="" kind=auth for=12h0m0s until=\S+$`, bench[0])
	assert.NotContains(t, logs.String(), "sk-log-", "no secret in the log")
}

func TestServeLogsOwnEndpointsAtDebugAndNothingAtWarn(t *testing.T) {
	sim := vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, Keys: []vendorsim.Key{{Secret: "sk-log-a", ID: "a"}}})
	t.Cleanup(sim.Close)
	conf := simConfig(sim, t.TempDir(), "      - {id: a, secret: sk-log-a}")
	base, _, logs := loggedProxy(t, conf, slog.LevelDebug)
	send(t, http.MethodGet, base+"/status", proxyToken)
	got := logLines(logs, "request")
	require.Len(t, got, 1)
	assert.Contains(t, got[0], `level=DEBUG msg=request method=GET path=/status route="" key="" model="" status=200`)

	conf = simConfig(sim, t.TempDir(), "      - {id: a, secret: sk-log-a}")
	base, _, logs = loggedProxy(t, conf, slog.LevelWarn)
	assert.Equal(t, http.StatusOK, send(t, http.MethodPost, base+"/v1/chat/completions", proxyToken))
	assert.Empty(t, logs.String(), "log_level: warn logs no request")
}

// throttlesBriefOnce is an upstream that answers the key sk-brief's first
// request 429 with Retry-After: 1, and every other request 200.
func throttlesBriefOnce(t *testing.T) *httptest.Server {
	var first atomic.Bool
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Bearer sk-brief" && !first.Swap(true) {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		_, _ = io.WriteString(w, `{"choices":[]}`)
	}))
	t.Cleanup(upstream.Close)
	return upstream
}

func TestServeLogsBenchesAndReturns(t *testing.T) {
	t.Parallel() // it waits in real time: on a process, a server or a bench
	upstream := throttlesBriefOnce(t)
	base, _, logs := loggedProxy(t, oneUpstream(t, upstream.URL, "keys: [{secret: sk-brief}, {secret: sk-other}]"), slog.LevelInfo)
	assert.Equal(t, http.StatusOK, send(t, http.MethodPost, base+"/v1/chat/completions", proxyToken))
	require.Eventually(t, func() bool { return len(logLines(logs, "back in rotation")) > 0 }, 5*time.Second, 20*time.Millisecond,
		"the key's return is logged when its bench ends:\n%s", logs.String())
	bench := logLines(logs, "benched")
	require.Len(t, bench, 1, logs.String())
	assert.Regexp(t, `msg=benched route=up key=upstreams\[0\]\.keys\[0\] model=gpt-4o-mini kind=rate for=1s until=`, bench[0])
	back := logLines(logs, "back in rotation")
	require.Len(t, back, 1, "once")
	assert.Regexp(t, `msg="back in rotation" route=up key=upstreams\[0\]\.keys\[0\] model=gpt-4o-mini kind=rate benched_until=`, back[0])
	got := logLines(logs, "request")
	require.Len(t, got, 1)
	assert.Contains(t, got[0], "key=upstreams[0].keys[1] model=gpt-4o-mini status=200 outcome=none attempts=2")
}

// A route of one key that the vendor throttles is benched, and its return
// logged when its bench ends, with no request needed.
func TestServeLogsARoutesReturn(t *testing.T) {
	upstream := throttlesBriefOnce(t)
	base, _, logs := loggedProxy(t, oneUpstream(t, upstream.URL, "keys: [{secret: sk-brief}]"), slog.LevelInfo)
	assert.Equal(t, http.StatusTooManyRequests, send(t, http.MethodPost, base+"/v1/chat/completions", proxyToken))
	require.Eventually(t, func() bool { return len(logLines(logs, "route back in rotation")) > 0 }, 5*time.Second, 20*time.Millisecond,
		"the route's return is logged when its bench ends:\n%s", logs.String())
	assert.Regexp(t, `msg="route back in rotation" route=up kind=rate benched_until=`, logLines(logs, "route back in rotation")[0])
	assert.Len(t, logLines(logs, "route back in rotation"), 1, "once")
}

func TestServeLogsNoReturnOfAnUnbenchedKey(t *testing.T) {
	t.Parallel() // it waits in real time: on a process, a server or a bench
	upstream := throttlesBriefOnce(t)
	base, _, logs := loggedProxy(t, oneUpstream(t, upstream.URL, "keys: [{id: brief, secret: sk-brief}, {secret: sk-other}]"), slog.LevelInfo)
	assert.Equal(t, http.StatusOK, send(t, http.MethodPost, base+"/v1/chat/completions", proxyToken))
	require.Len(t, logLines(logs, "benched"), 1)
	assert.Equal(t, http.StatusOK, send(t, http.MethodPost, base+"/keys/up/brief/unbench", proxyToken))
	time.Sleep(1500 * time.Millisecond) // past the bench's end
	assert.Len(t, logLines(logs, "unbenched"), 1)
	assert.Empty(t, logLines(logs, "back in rotation"), "an unbenched key is back at once, by hand:\n%s", logs.String())
}

func TestServeFirstLineSaysWhereTheStateIs(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "{}") }))
	t.Cleanup(upstream.Close)
	dir := t.TempDir()
	path := filepath.Join(dir, "keypool.yaml")
	require.NoError(t, os.WriteFile(path, fmt.Appendf(nil, "listen: 127.0.0.1:0\nlog_level: warn\nproxy_tokens: [%q]\nupstreams: [{url: %s, keys: [{secret: sk-a}]}]\n", proxyToken, upstream.URL), 0o600))
	t.Chdir(dir)
	ctx, stop := context.WithCancel(t.Context())
	var stderr syncBuffer
	done := make(chan int)
	go func() { done <- run(ctx, []string{"serve", "-config", path}, io.Discard, &stderr) }()
	var addr string
	require.Eventually(t, func() bool {
		m := regexp.MustCompile(`msg=serving addr=(\S+)`).FindStringSubmatch(stderr.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	}, 10*time.Second, 10*time.Millisecond, "serving is logged whatever the level: %s", stderr.String())
	assert.Equal(t, http.StatusOK, send(t, http.MethodPost, "http://"+addr+"/v1/chat/completions", proxyToken))
	stop()
	require.Equal(t, 0, <-done, stderr.String())
	got := lines(stderr.String())
	wd, _ := os.Getwd()
	assert.Equal(t, fmt.Sprintf(`level=INFO msg=starting config=%s state=%s store=badger note="state is not set: the default is keypool-state in the directory serve runs in"`,
		path, filepath.Join(wd, "keypool-state")), trimTime(got[0]))
	assert.DirExists(t, filepath.Join(wd, "keypool-state"))
	assert.NotContains(t, stderr.String(), "msg=request", "log_level: warn")
	assert.Contains(t, got[len(got)-1], "msg=stopped")
}

func TestStateAttrsHideRedisPassword(t *testing.T) {
	attrs := stateAttrs("k.yaml", &settings{state: "redis://user:hunter2@redis.internal:6379/0"})
	assert.Equal(t, []any{"config", "k.yaml", "state", "redis://user:xxxxx@redis.internal:6379/0", "store", "redis"}, attrs)
	srv := &server{settings: &settings{state: "redis://:hunter2@h/0"}, redact: newRedactor(nil)}
	assert.NotContains(t, srv.reason(fmt.Errorf("dial redis://:hunter2@h/0: refused")), "hunter2")
}

// trimTime removes the time attribute from a log line.
func trimTime(line string) string {
	return regexp.MustCompile(`^time=\S+ `).ReplaceAllString(line, "")
}

// An attempt writes into the record of a request whose line is logged; a
// request without one (log_level warn) costs nothing and writes nowhere.
func TestAttemptsWriteIntoTheRequestsRecord(t *testing.T) {
	attempted(context.Background(), keypool.Attempt{Provider: "r", KeyID: "k"}) // no record: nothing to write, no panic
	rec := &requestRecord{}
	ctx := context.WithValue(context.Background(), recordKey{}, rec)
	attempted(ctx, keypool.Attempt{Provider: "r", KeyID: "k1", Model: "m", Status: 429, Kind: keypool.KindRate})
	attempted(ctx, keypool.Attempt{Provider: "r", KeyID: "k2", Model: "m", Failover: 1, Failed: true})
	assert.Equal(t, 2, rec.attempts)
	assert.Equal(t, []string{"r", "k2", "m", "error"}, []string{rec.route, rec.key, rec.model, rec.outcome}, "the last attempt names the line")
}
