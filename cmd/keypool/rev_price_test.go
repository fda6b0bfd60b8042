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

// A budgeted client reserves "what it can cost at most, at the dearest
// price of its model among the upstreams the client reaches". clientPrice
// picks the dearest by input+output per million, which is not the dearest
// for a request whose prompt is long and whose max_tokens is short: here
// the first upstream (cheap output, dear input: 10+1) serves the request,
// while the reserve is taken at the second's price (dear output, cheap
// input: 1+20). A prompt of about 10,000 tokens with max_tokens 1 reserves
// about $0.01 and costs about $0.10, so a client with $0.05 a day is let
// through and spends twice its budget in one request. It should be refused
// with 429 before anything is sent, as its reserve at the first upstream's
// price does not fit.
func TestRevClientReserveAtTheDearestPriceForTheRequest(t *testing.T) {
	clock := newTestClock(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
	first := vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, Clock: clock.now, Keys: []vendorsim.Key{{Secret: "sk-first-1", ID: "f1"}}})
	second := vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, Clock: clock.now, Keys: []vendorsim.Key{{Secret: "sk-second-1", ID: "s1"}}})
	t.Cleanup(first.Close)
	t.Cleanup(second.Close)
	conf := fmt.Sprintf(`
proxy_tokens: [%q]
operator_tokens: [%q]
state: %s
clients:
  - {name: spender, token: kp-client-spender-00001, budget: {per_day: 0.05}}
upstreams:
  - name: first
    url: %s
    prices: {gpt-4o-mini: {input: 10, output: 1}}
    keys: [{id: f1, secret: sk-first-1}]
  - name: second
    url: %s
    prices: {gpt-4o-mini: {input: 1, output: 20}}
    keys: [{id: s1, secret: sk-second-1}]
`, proxyToken, operatorToken, t.TempDir(), first.URL(), second.URL())
	addr, _ := serveServer(t, clocked(t, conf, clock))
	prompt := strings.Repeat("word ", 8000) // about 10,000 tokens
	body := fmt.Sprintf(`{"model":"gpt-4o-mini","max_tokens":1,"messages":[{"role":"user","content":%q}]}`, prompt)
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer kp-client-spender-00001")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()

	spender := clientsOf(t, addr)["spender"]
	require.NotNil(t, spender.Spent)
	t.Logf("status %d, spent today $%.4f of $0.05", resp.StatusCode, spender.Spent.PerDay)
	assert.LessOrEqual(t, spender.Spent.PerDay, 0.05, "one request took the client past its daily budget (%d: %s)", resp.StatusCode, cut(string(b), 200))
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "a request whose reserve at the upstream that would serve it does not fit the budget")
}
