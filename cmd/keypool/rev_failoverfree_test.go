package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// NotifySettle tells a client's call "at zero when a key refused it",
// and nothing for a success that reports no usage. A budgeted client's
// request that one key refuses (429) and the next serves as a stream
// without usage (OpenAI without stream_options.include_usage) is thus
// settled at zero — the refused key's notice — and costs the client
// nothing, while the vendor bills it: under failover a client streams
// for free, past its budget.
func TestRevFailoverThenUsagelessStreamIsNotFree(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Bearer sk-busy-1" {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "20")
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, `{"error":{"message":"Rate limit reached for requests","type":"requests","code":"rate_limit_exceeded"}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(up.Close)
	conf := fmt.Sprintf(`
proxy_tokens: [%q]
operator_tokens: [%q]
state: %s
clients:
  - {name: spender, token: kp-client-spender-00001, budget: {per_day: 10}}
upstreams:
  - name: alpha
    url: %s
    prices: {gpt-4o-mini: {input: 1000, output: 2000}}
    keys: [{id: busy, secret: sk-busy-1}, {id: free, secret: sk-free-1}]
`, proxyToken, operatorToken, t.TempDir(), up.URL)
	addr, _ := serveServer(t, clocked(t, conf, newTestClock(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))))
	body := `{"model":"gpt-4o-mini","stream":true,"max_tokens":1000,"messages":[{"role":"user","content":"Say hello."}]}`
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer kp-client-spender-00001")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	spender := clientsOf(t, addr)["spender"]
	require.NotNil(t, spender.Spent)
	t.Logf("the store counts $%.4f for a stream served after a failover", spender.Spent.PerDay)
	assert.Positive(t, spender.Spent.PerDay, "a served stream cost the client nothing")
}
