package main

import (
	"net/http"
	"strings"
)

// ownMux routes the proxy's own endpoints and knows their paths, so that
// a request for any other path — every request the proxy forwards — goes
// to the forwarding handler without the mux's matching, which cleans and
// copies the path and allocates on each request.
type ownMux struct {
	mux     *http.ServeMux
	forward http.Handler
	exact   map[string]bool // the paths of patterns without wildcards
	under   []string        // the literal starts of patterns with wildcards
}

func newOwnMux(forward http.Handler) *ownMux {
	m := &ownMux{mux: http.NewServeMux(), forward: forward, exact: map[string]bool{}}
	m.mux.Handle("/", forward) // an own path asked with another method
	return m
}

// Handle registers one of the proxy's own endpoints, as
// http.ServeMux.Handle does.
func (m *ownMux) Handle(pattern string, h http.Handler) {
	m.mux.Handle(pattern, h)
	path := pattern
	if _, p, ok := strings.Cut(pattern, " "); ok {
		path = p // "GET /status"
	}
	switch i := strings.IndexByte(path, '{'); {
	case i < 0:
		m.exact[path] = true
	case path[i:] == "{$}":
		m.exact[path[:i]] = true // "/{$}": the root alone
	default:
		m.under = append(m.under, path[:i])
	}
}

func (m *ownMux) HandleFunc(pattern string, f func(http.ResponseWriter, *http.Request)) {
	m.Handle(pattern, http.HandlerFunc(f))
}

// ServeHTTP sends a request for an own endpoint's path through the mux,
// and any other straight to the forwarding handler.
func (m *ownMux) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if m.own(r.URL.Path) {
		m.mux.ServeHTTP(w, r)
		return
	}
	m.forward.ServeHTTP(w, r)
}

func (m *ownMux) own(path string) bool {
	if m.exact[path] {
		return true
	}
	for _, prefix := range m.under {
		if strings.HasPrefix(path, prefix) {
			return true
		}
	}
	return false
}
