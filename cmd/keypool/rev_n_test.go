package main

import (
	"encoding/json"
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

// OpenAI's "n" asks for n completions of up to max_tokens each, and bills
// their output together. A budget's reserve takes max_tokens alone as the
// output bound (keypool.ReadRequest knows no "n"), and a settle clamps the
// reported output to it (usageReport.clamp): a client with $0.05 a day
// asks for n: 8 of max_tokens 1000 — $0.016 of output at the reserve,
// $0.128 billed — and is served, its spend recorded at a fraction of what
// the vendor billed. The reserve should count n (and Gemini's
// candidateCount), so the request is refused before it is sent; and a
// settle should not clamp away output the vendor reports.
func TestRevClientBudgetCountsNCompletions(t *testing.T) {
	var billed float64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			N         int   `json:"n"`
			MaxTokens int64 `json:"max_tokens"`
		}
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &req)
		n := max(req.N, 1)
		out := int64(n) * req.MaxTokens
		billed += float64(10*1000+out*16) / 1e6
		w.Header().Set("Content-Type", "application/json")
		var choices []string
		for i := range n {
			choices = append(choices, fmt.Sprintf(`{"index":%d,"message":{"role":"assistant","content":"..."},"finish_reason":"length"}`, i))
		}
		fmt.Fprintf(w, `{"id":"c1","object":"chat.completion","model":"gpt-4o-mini","choices":[%s],"usage":{"prompt_tokens":10,"completion_tokens":%d,"total_tokens":%d}}`,
			strings.Join(choices, ","), out, 10+out)
	}))
	t.Cleanup(up.Close)
	conf := fmt.Sprintf(`
proxy_tokens: [%q]
operator_tokens: [%q]
state: %s
clients:
  - {name: spender, token: kp-client-spender-00001, budget: {per_day: 0.05}}
upstreams:
  - name: alpha
    url: %s
    prices: {gpt-4o-mini: {input: 1000, output: 16}}
    keys: [{id: a1, secret: sk-alpha-1}]
`, proxyToken, operatorToken, t.TempDir(), up.URL)
	addr, _ := serveServer(t, clocked(t, conf, newTestClock(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))))
	body := `{"model":"gpt-4o-mini","n":8,"max_tokens":1000,"messages":[{"role":"user","content":"hi"}]}`
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer kp-client-spender-00001")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	spender := clientsOf(t, addr)["spender"]
	require.NotNil(t, spender.Spent)
	t.Logf("status %d; the vendor billed $%.4f; the store counts $%.4f of the client's $0.05", resp.StatusCode, billed, spender.Spent.PerDay)
	assert.LessOrEqual(t, billed, 0.05, "the vendor billed past the client's daily budget in one request")
	assert.InDelta(t, billed, spender.Spent.PerDay, 1e-6, "what the store counts against the budget is what the vendor billed")
}
