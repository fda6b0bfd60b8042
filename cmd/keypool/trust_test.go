package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// quotingVendor answers as OpenAI does a request naming an argument it
// does not know — a 400 that quotes the argument — and any other request
// with a chat completion; served counts the requests it got.
func quotingVendor(t *testing.T, served *atomic.Int64) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		var req map[string]any
		_ = json.NewDecoder(r.Body).Decode(&req)
		for k := range req {
			switch k {
			case "model", "messages", "stream":
			default:
				w.WriteHeader(http.StatusBadRequest)
				fmt.Fprintf(w, `{"error":{"message":"Unrecognized request argument supplied: %s","type":"invalid_request_error","param":null,"code":null}}`, k)
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"c","object":"chat.completion","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestProxyHostileRequestBenchesNothing: one client's request whose words
// each vendor's 400 quotes back as a spent balance or a refused key gets
// that 400, and benches no key and no route: the next client's ordinary
// request is served by the first route.
func TestProxyHostileRequestBenchesNothing(t *testing.T) {
	var servedA, servedB atomic.Int64
	base, _ := startProxy(t, fmt.Sprintf(`
proxy_tokens: [%q]
state: %s
upstreams:
  - {name: first, url: %s, keys: [{id: a1, secret: sk-a1}, {id: a2, secret: sk-a2}]}
  - {name: second, url: %s, keys: [{id: b1, secret: sk-b1}, {id: b2, secret: sk-b2}]}
`, proxyToken, t.TempDir(), quotingVendor(t, &servedA), quotingVendor(t, &servedB)))

	for _, word := range []string{"insufficient_quota", "credit balance is too low", "api key not valid"} {
		body := fmt.Sprintf(`{"model":"gpt-4o-mini","messages":[],%q:1}`, word)
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+proxyToken)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s", b)
		assert.Contains(t, string(b), word, "the vendor's answer goes back")
	}
	assert.LessOrEqual(t, servedA.Load()+servedB.Load(), int64(3*4), "at most two keys a route a request")

	var report statusReport
	require.NoError(t, callProxy(t.Context(), http.MethodGet, base, "status", credential{value: proxyToken, from: "-token"}, &report))
	var failovers int
	for _, e := range report.Events {
		assert.NotContains(t, e.Text, "benched", "event %+v", e)
		if e.Kind == "failover" {
			failovers += e.Count
			assert.Contains(t, e.Text, "no bench")
		}
	}
	assert.Equal(t, 3, failovers, "each hostile request tried the second route")
	routes := report.Routes
	require.Len(t, routes, 2)
	for _, r := range routes {
		assert.Zero(t, r.BenchedUntil, "route %s", r.Name)
		for _, k := range r.Keys {
			assert.Equal(t, "serving", k.State, "key %s of %s", k.ID, r.Name)
			assert.Zero(t, k.Bench, "key %s of %s", k.ID, r.Name)
		}
	}
	before := servedA.Load()
	resp, err := chat(t, base, false)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, before+1, servedA.Load(), "the first route serves the next client")
}
