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

// OpenAI reports no usage in a stream unless the request asks for it
// (stream_options.include_usage), and most clients do not. The pool then
// never settles the request (NotifySettle is not called) and
// settleClient neither settles nor releases the client's reservation: it
// stays held, as if the request were still in flight, until the day
// ends. Once such streams fill a client's budget, every request after
// gets 429 with Retry-After 1 — "requests in flight hold the budget" —
// all day, although none is in flight (and the message says "its
// per-minute limit (rpm, tpm)", which the client does not have). A request that is over should count as spent (its
// reserve, when nothing better is known), and the refusal name the next
// day, as the docs say of a spent budget.
func TestRevUsagelessStreamsDoNotHoldTheClientsBudgetAsInFlight(t *testing.T) {
	clock := newTestClock(time.Date(2026, 3, 10, 23, 0, 0, 0, time.UTC))
	sim := vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, Clock: clock.now, Keys: []vendorsim.Key{{Secret: "sk-alpha-1", ID: "a1"}}})
	t.Cleanup(sim.Close)
	conf := fmt.Sprintf(`
proxy_tokens: [%q]
operator_tokens: [%q]
state: %s
clients:
  - {name: spender, token: kp-client-spender-00001, budget: {per_day: 0.5}}
upstreams:
  - name: alpha
    url: %s
    prices: {gpt-4o-mini: {input: 1000, output: 2000}}
    keys: [{id: a1, secret: sk-alpha-1}]
`, proxyToken, operatorToken, t.TempDir(), sim.URL())
	addr, _ := serveServer(t, clocked(t, conf, clock))
	send := func() (int, string, string) {
		body := `{"model":"gpt-4o-mini","stream":true,"max_tokens":64,"messages":[{"role":"user","content":"Say hello."}]}`
		req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer kp-client-spender-00001")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body) // the stream, read to its end
		return resp.StatusCode, resp.Header.Get("Retry-After"), string(b)
	}
	served := 0
	var status int
	var retryAfter, body string
	for range 20 {
		if status, retryAfter, body = send(); status != http.StatusOK {
			break
		}
		served++
	}
	require.Positive(t, served)
	require.Equal(t, http.StatusTooManyRequests, status, body)
	time.Sleep(200 * time.Millisecond)
	status, retryAfter, body = send() // nothing is in flight now
	t.Logf("served %d; then %d Retry-After %s: %s", served, status, retryAfter, cut(body, 300))
	assert.Equal(t, "3600", retryAfter, "no request is in flight: the budget is spent until midnight UTC, not held for a second")
}
