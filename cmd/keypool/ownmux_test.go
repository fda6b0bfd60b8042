package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestOwnMuxRoutes(t *testing.T) {
	named := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, name) })
	}
	m := newOwnMux(named("forward"))
	m.Handle("GET /{$}", named("page"))
	m.Handle("GET /status", named("status"))
	m.HandleFunc("GET /healthz", named("healthz").ServeHTTP)
	m.Handle("POST /keys/{route}/{key}/unbench", named("unbench"))
	tests := []struct{ method, path, want string }{
		{"GET", "/", "page"},
		{"POST", "/", "forward"}, // the root's pattern is GET only
		{"GET", "/status", "status"},
		{"PUT", "/status", "forward"},
		{"GET", "/healthz", "healthz"},
		{"POST", "/keys/openai/k1/unbench", "unbench"},
		{"GET", "/keys/openai/k1/unbench", "forward"},
		{"POST", "/v1/chat/completions", "forward"},
		{"GET", "/v1/models", "forward"},
		{"GET", "/statusx", "forward"},
		{"GET", "/v1/status", "forward"},
		{"GET", "//status", "forward"}, // not clean: the forwarding handler refuses it
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			w := httptest.NewRecorder()
			m.ServeHTTP(w, httptest.NewRequest(tt.method, tt.path, nil))
			assert.Equal(t, tt.want, w.Body.String())
		})
	}
	assert.True(t, m.own("/keys/"), "a pattern with wildcards claims the paths under its literal start")
	assert.False(t, m.own("/v1/chat/completions"))
}

// TestOwnMuxForwardsWithoutAllocating holds that a forwarded request costs
// the routing no allocation: the mux's matching is skipped.
func TestOwnMuxForwardsWithoutAllocating(t *testing.T) {
	m := newOwnMux(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	m.Handle("GET /status", http.NotFoundHandler())
	m.Handle("POST /keys/{route}/{key}/unbench", http.NotFoundHandler())
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	w := httptest.NewRecorder()
	assert.Zero(t, testing.AllocsPerRun(100, func() { m.ServeHTTP(w, r) }))
}
