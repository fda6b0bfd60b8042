package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool/internal/vendorsim"
)

// converse sends one chat request of a conversation named by the body's
// prompt_cache_key through the proxy at base, and returns its status.
func converse(t *testing.T, base, conversation string, header ...string) int {
	t.Helper()
	body := fmt.Sprintf(`{"model":"gpt-4o-mini","prompt_cache_key":%q,"messages":[{"role":"user","content":"hello"}]}`, conversation)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+proxyToken)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	return resp.StatusCode
}

// TestProxyKeepsConversationsOnKeys: through serve, twenty requests of one
// conversation reach one key of four, and twenty of different
// conversations reach at least three; a route's affinity.header names the
// conversation too.
func TestProxyKeepsConversationsOnKeys(t *testing.T) {
	var keys []vendorsim.Key
	var conf strings.Builder
	for i := range 4 {
		keys = append(keys, vendorsim.Key{Secret: fmt.Sprintf("sk-aff-%d", i), ID: fmt.Sprint("k", i)})
		fmt.Fprintf(&conf, "      - {id: k%d, secret: sk-aff-%d}\n", i, i)
	}
	sim := vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, Keys: keys})
	t.Cleanup(sim.Close)
	base, _ := startProxy(t, simConfig(sim, t.TempDir(), conf.String())+"    affinity: {header: X-Conversation, idle: 30m}\n")
	served := func() map[string]int64 {
		n := map[string]int64{}
		for _, ks := range sim.Stats() {
			n[ks.ID] = ks.Served
		}
		return n
	}
	reached := func(before map[string]int64) int {
		var keys int
		for id, n := range served() {
			if n > before[id] {
				keys++
			}
		}
		return keys
	}

	before := served()
	for range 20 {
		require.Equal(t, http.StatusOK, converse(t, base, "one conversation"))
	}
	assert.Equal(t, 1, reached(before), "one conversation, one key")

	before = served()
	for i := range 20 {
		require.Equal(t, http.StatusOK, converse(t, base, fmt.Sprint("conversation ", i)))
	}
	assert.GreaterOrEqual(t, reached(before), 3, "different conversations spread over the keys")

	before = served()
	for i := range 8 {
		require.Equal(t, http.StatusOK, converse(t, base, fmt.Sprint("turn ", i), "X-Conversation", "team-a"))
	}
	assert.Equal(t, 1, reached(before), "the route's header names the conversation")
}

// TestProxyFollowsResponses: through serve, an OpenAI Responses chain —
// each turn naming the last answer's ID as previous_response_id, streamed
// or not — reaches the key whose organisation made it, turn after turn;
// the vendor refuses a turn on any other key.
func TestProxyFollowsResponses(t *testing.T) {
	vendor := &vendorsim.Responses{}
	srv := httptest.NewServer(vendor)
	t.Cleanup(srv.Close)
	base, _ := startProxy(t, oneUpstream(t, srv.URL,
		"keys: [{id: a, secret: sk-resp-a}, {id: b, secret: sk-resp-b}, {id: c, secret: sk-resp-c}]"))
	idOf := regexp.MustCompile(`"id":"(resp_[0-9a-f]+)"`)
	var prev string
	for i := range 12 {
		body := fmt.Sprintf(`{"model":"gpt-5","input":"turn %d","stream":%t`, i, i%2 == 1)
		if prev != "" {
			body += fmt.Sprintf(`,"previous_response_id":%q`, prev)
		}
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/v1/responses", strings.NewReader(body+"}"))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+proxyToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		answer, _ := io.ReadAll(resp.Body)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, http.StatusOK, resp.StatusCode, "turn %d: %s", i, answer)
		m := idOf.FindSubmatch(answer)
		require.NotNil(t, m, "turn %d's answer names its response", i)
		prev = string(m[1])
	}
	served := vendor.Served(0)
	require.Len(t, served, 12)
	for _, k := range served {
		assert.Equal(t, served[0], k, "one chain, one key")
	}
}

// TestProxyInFlight: with in_flight: 2 a key never holds more than two
// requests at once, and every request of a burst of 24 over two keys is
// served within the route's wait.
func TestProxyInFlight(t *testing.T) {
	var mu sync.Mutex
	now, most := map[string]int{}, map[string]int{}
	vendor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Authorization")
		mu.Lock()
		now[key]++
		most[key] = max(most[key], now[key])
		mu.Unlock()
		time.Sleep(20 * time.Millisecond) // the answer takes a moment: requests overlap
		mu.Lock()
		now[key]--
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}`)
	}))
	t.Cleanup(vendor.Close)
	base, _ := startProxy(t, oneUpstream(t, vendor.URL,
		"wait: 30s, limits: {in_flight: 2}, keys: [{id: a, secret: sk-flight-a}, {id: b, secret: sk-flight-b}]"))
	var wg sync.WaitGroup
	statuses := make([]int, 24)
	for i := range statuses {
		wg.Go(func() { statuses[i] = converse(t, base, fmt.Sprint("c", i)) })
	}
	wg.Wait()
	for i, s := range statuses {
		assert.Equal(t, http.StatusOK, s, "request %d", i)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, most, 2, "both keys served")
	for key, n := range most {
		assert.LessOrEqual(t, n, 2, "%s held at once", key[len(key)-1:])
		assert.Equal(t, 2, n, "the cap is also reached: the burst overlapped")
	}
}

// TestCheckPriorityInFlightAffinity: check names each mistake of the
// fields that order keys, cap what they hold and keep conversations.
func TestCheckPriorityInFlightAffinity(t *testing.T) {
	path := writeConfig(t, `
proxy_tokens: [kp-token-of-the-check-test-that-is-long]
upstreams:
  - name: openai
    url: https://api.openai.com
    limits: {in_flight: -1}
    model_limits: {gpt-4o: {in_flight: 3}}
    key_cap: {in_flight: 2}
    affinity: {conversations: -5, header: "bad header"}
    keys:
      - {secret: sk-check-one, priority: -1}
      - {secret: sk-check-two, account: org, limits: {in_flight: 2}}
  - name: anthropic
    url: https://api.anthropic.com
    affinity: {idle: soon}
    keys: [{secret: sk-check-three}]
`, nil)
	status, _, stderr := runCommand(t, nil, "check", "-config", path)
	assert.Equal(t, exitUsage, status)
	for _, want := range []string{
		"upstreams[0].limits.in_flight: -1 is negative",
		`upstreams[0].model_limits.gpt-4o.in_flight: model "gpt-4o": InFlight bounds a key or an account, not a model`,
		"upstreams[0].key_cap.in_flight: InFlight bounds a key in WithLimits or Key.Limits, not its cap of windows",
		`upstreams[0].affinity.header: "bad header" is not a header name`,
		"upstreams[0].affinity.conversations: -5 is negative",
		"upstreams[0].keys[0].priority: -1 is negative",
		`upstreams[1].affinity.idle: "soon" is not a duration such as 1h`,
	} {
		assert.Contains(t, stderr, want)
	}
	assert.NotContains(t, stderr, "keys[1]", "a key of an account may cap what it holds")
}
