package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool/internal/vendorsim"
)

// The key's side of the same: a key with a budget whose streams report no
// usage (OpenAI without stream_options.include_usage) keeps each one's
// reserve held as in flight until the day ends (meteredBody.settleFor:
// "the estimate stands"). Once they fill its budget the proxy answers
// every client 429 with Retry-After 1 and a retry_at a second away, all
// day, while no request is in flight: clients retry every second for
// hours. The docs promise the next day for a spent budget, and a second
// only "when requests in flight hold the budget".
func TestRevUsagelessStreamsDoNotHoldTheKeysBudgetAsInFlight(t *testing.T) {
	clock := newTestClock(time.Date(2026, 3, 10, 23, 0, 0, 0, time.UTC))
	sim := vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, Clock: clock.now, Keys: []vendorsim.Key{{Secret: "sk-alpha-1", ID: "a1"}}})
	t.Cleanup(sim.Close)
	conf := fmt.Sprintf(`
proxy_tokens: [%q]
operator_tokens: [%q]
state: %s
upstreams:
  - name: alpha
    url: %s
    prices: {gpt-4o-mini: {input: 1000, output: 2000}}
    keys: [{id: a1, secret: sk-alpha-1, budget: {per_day: 0.5}}]
`, proxyToken, operatorToken, t.TempDir(), sim.URL())
	addr, _ := serveServer(t, clocked(t, conf, clock))
	send := func() (int, string, string) {
		body := `{"model":"gpt-4o-mini","stream":true,"max_tokens":64,"messages":[{"role":"user","content":"Say hello."}]}`
		req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+proxyToken)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Retry-After"), string(b)
	}
	served := 0
	for range 20 {
		if status, _, _ := send(); status != http.StatusOK {
			break
		}
		served++
	}
	require.Positive(t, served)
	time.Sleep(200 * time.Millisecond)
	status, retryAfter, body := send() // nothing is in flight now
	t.Logf("served %d; then %d Retry-After %s: %s", served, status, retryAfter, cut(body, 300))
	assert.Equal(t, http.StatusTooManyRequests, status)
	assert.Equal(t, "3600", retryAfter, "no request is in flight: the key's budget is spent until midnight UTC")
}
