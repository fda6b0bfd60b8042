package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A client held to models: [gpt-4o-mini] names it at the start of a body
// longer than the 1 MiB the proxy reads for the client's rules
// (maxClientScan), and names gpt-4o again after it. readForClient sees
// only the first; a vendor's JSON parser (Go's, Python's) takes the last
// key, so the request reaches the vendor for a model the client may not
// use. The body is well under max_request_body (32 MiB). The proxy should
// refuse it (403, or a 413/400 saying it cannot check the body), and send
// nothing.
func TestRevClientModelsHoldPastTheScannedHead(t *testing.T) {
	var mu sync.Mutex
	var models []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model string `json:"model"`
		}
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &req)
		mu.Lock()
		models = append(models, req.Model)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"c1","object":"chat.completion","model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":1,"total_tokens":11}}`, req.Model)
	}))
	t.Cleanup(up.Close)
	conf := fmt.Sprintf(`
proxy_tokens: [%q]
operator_tokens: [%q]
state: %s
clients:
  - {name: narrow, token: kp-client-narrow-000001, models: [gpt-4o-mini]}
upstreams:
  - name: alpha
    url: %s
    keys: [{id: a1, secret: sk-alpha-1}]
`, proxyToken, operatorToken, t.TempDir(), up.URL)
	addr, _ := serveServer(t, clocked(t, conf, newTestClock(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))))
	filler := strings.Repeat("x", maxClientScan+1024)
	body := fmt.Sprintf(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":%q}],"model":"gpt-4o"}`, filler)
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer kp-client-narrow-000001")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	mu.Lock()
	defer mu.Unlock()
	assert.NotContains(t, models, "gpt-4o", "the vendor was asked for a model the client may not use (%d: %s)", resp.StatusCode, cut(string(answer), 200))
	assert.NotEqual(t, http.StatusOK, resp.StatusCode)
}
