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

// A model's max_output is what it writes in one completion. A request for
// n completions may be billed n times that, but the output bound caps the
// n-times-multiplied MaxOutput at one completion's max_output
// (Price.outputBound), so the reserve and the settle's clamp count one
// completion: a client with $0.05 a day asking for n: 8 of max_tokens
// 1000 of a model whose max_output is 1000 ($0.138 at most) is served and
// its spend counted at one completion's output.
func TestClientBudgetCountsNCompletionsUnderMaxOutput(t *testing.T) {
	for _, tc := range []struct{ name, body string }{
		{"max_tokens at max_output", `{"model":"gpt-4o-mini","n":8,"max_tokens":1000,"messages":[{"role":"user","content":"hi"}]}`},
		{"no max_tokens", `{"model":"gpt-4o-mini","n":8,"messages":[{"role":"user","content":"hi"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var billed float64
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var req struct {
					N int `json:"n"`
				}
				b, _ := io.ReadAll(r.Body)
				_ = json.Unmarshal(b, &req)
				n := max(req.N, 1)
				out := int64(n) * 1000 // each completion writes the model's max_output
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
    prices: {gpt-4o-mini: {input: 1000, output: 16, max_output: 1000}}
    keys: [{id: a1, secret: sk-alpha-1}]
`, proxyToken, operatorToken, t.TempDir(), up.URL)
			addr, _ := serveServer(t, clocked(t, conf, newTestClock(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))))
			req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(tc.body))
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
		})
	}
}
