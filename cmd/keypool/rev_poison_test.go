package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A request the vendor cannot process — it answers 500 to that request
// alone, and serves every other, as vendors do for some malformed inputs —
// must not take the keys from the other clients. Today one such request,
// from a client held to rpm 1, fails over across every key, benches each
// for the model for a minute (transient), and the route answers every
// client 429 for that minute: one request a minute keeps the whole team
// off the model. The poisoned request itself gets a 429 naming no key,
// not the vendor's 500.
func TestRevPoisonRequestDoesNotBenchTheKeysForOthers(t *testing.T) {
	var served atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		if strings.Contains(string(b), "poison") {
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, `{"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error"}}`)
			return
		}
		served.Add(1)
		io.WriteString(w, `{"id":"c1","object":"chat.completion","model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":1,"total_tokens":11}}`)
	}))
	t.Cleanup(up.Close)
	conf := fmt.Sprintf(`
proxy_tokens: [%q, "kp-proxy-token-other-0001"]
operator_tokens: [%q]
state: %s
clients:
  - {name: hostile, token: kp-client-hostile-00001, limits: {rpm: 1}}
upstreams:
  - name: openai
    url: %s
    keys: [{id: k1, secret: sk-openai-1}, {id: k2, secret: sk-openai-2}, {id: k3, secret: sk-openai-3}]
`, proxyToken, operatorToken, t.TempDir(), up.URL)
	addr, _ := serveServer(t, clocked(t, conf, newTestClock(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))))
	send := func(token, content string) (int, string) {
		req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions",
			strings.NewReader(fmt.Sprintf(`{"model":"gpt-4o-mini","max_tokens":8,"messages":[{"role":"user","content":%q}]}`, content)))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	status, body := send("kp-client-hostile-00001", "poison")
	t.Logf("poison: %d %s", status, cut(body, 200))
	status, body = send("kp-proxy-token-other-0001", "hello")
	assert.Equal(t, http.StatusOK, status, "another client's plain request: %s", cut(body, 300))
}
