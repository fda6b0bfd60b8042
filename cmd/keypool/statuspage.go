package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The proxy's own endpoints, beside the requests it forwards:
//
//	GET  /                               the status page (no data in it: it asks /status)
//	GET  /ui/app.js, /ui/style.css       the page's script and style
//	POST /login                          form field token: sets the page's session cookie
//	POST /logout                         clears it
//	GET  /status                         JSON of every route, key and recent event
//	GET  /metrics                        Prometheus
//	POST /keys/{route}/{key}/unbench     lifts a key's benches and its route's
//	POST /keys/{route}/{key}/reset-spend forgets what a key and its account spent
//
// /status, /metrics, unbench and reset-spend take the proxy token (as the forwarded
// requests do) or the page's session cookie; the cookie never lets a
// request through to an upstream. The state-changing ones refuse a
// cross-origin browser request.

//go:embed web
var webFiles embed.FS

// ownEndpointHeader marks a request that keypool's own commands send to a
// proxy's endpoint: the proxy never forwards a request that carries it,
// so a base URL with a path before the endpoint's name (…/v1/status) gets
// an error instead of reaching an upstream with a key.
const ownEndpointHeader = "Keypool-Endpoint"

const (
	sessionCookie = "keypool_session"
	// sessionLife is how long a status page login lasts.
	sessionLife = 7 * 24 * time.Hour
	// maxLoginBody bounds the body of POST /login.
	maxLoginBody = 4 << 10
	// statusEvents is how many recent events /status shows.
	statusEvents = 50
)

// handleOwn registers the proxy's own endpoints on mux, except /healthz.
func (s *server) handleOwn(mux *ownMux) {
	cop := http.NewCrossOriginProtection()
	mux.Handle("GET /{$}", page("web/index.html"))
	mux.Handle("GET /ui/app.js", page("web/app.js"))
	mux.Handle("GET /ui/style.css", page("web/style.css"))
	mux.Handle("POST /login", cop.Handler(http.HandlerFunc(s.login)))
	mux.Handle("POST /logout", cop.Handler(http.HandlerFunc(logout)))
	mux.Handle("GET /status", s.own(s.writeWithin(http.HandlerFunc(s.statusJSON))))
	mux.Handle("GET /metrics", s.own(s.writeWithin(s.metrics)))
	for _, a := range keyActions {
		mux.Handle("POST /keys/{route}/{key}/"+a.name, cop.Handler(s.own(s.operate(a))))
	}
}

// forwardable refuses a request that carries ownEndpointHeader with 404: it
// was meant for one of the proxy's own endpoints, under a path the proxy
// forwards.
func forwardable(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		recordOf(r.Context()).set(func(rec *requestRecord) { rec.forwarded = true })
		if r.Header.Get(ownEndpointHeader) == "" {
			next.ServeHTTP(w, r)
			return
		}
		refused(r, "refused")
		writeError(w, http.StatusNotFound, "not_found_error",
			"keypool: the proxy's own endpoints are at its root (/status), not under "+quotePath(r.URL.Path), nil)
	})
}

// quotePath quotes a request path for a message, bounded.
func quotePath(p string) string {
	if len(p) > 100 {
		p = p[:100] + "…"
	}
	return strconv.Quote(p)
}

// page serves an embedded file of the status page with headers that keep
// it to itself: no script, style or connection from elsewhere, no framing,
// no referrer.
func page(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		http.ServeFileFS(w, r, webFiles, name)
	})
}

// callerKey is the context key of who called an own endpoint.
type callerKey struct{}

// caller says who made a request that own let through: "proxy_tokens[0]",
// or "proxy_tokens[0] (status page)".
func caller(r *http.Request) string {
	who, _ := r.Context().Value(callerKey{}).(string)
	return who
}

// own lets through a request with a proxy token or a status page session,
// and answers 401 to others, saying whether the token was missing or wrong.
func (s *server) own(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i, presented := s.tokenOf(r)
		who := fmt.Sprintf("proxy_tokens[%d]", i)
		if i < 0 {
			if c, err := r.Cookie(sessionCookie); err == nil {
				if i = s.sessionToken(c.Value, time.Now()); i >= 0 {
					who = fmt.Sprintf("proxy_tokens[%d] (status page)", i)
				}
			}
		}
		switch {
		case i < 0 && presented:
			w.Header().Set("WWW-Authenticate", "Bearer")
			writeError(w, http.StatusUnauthorized, "authentication_error",
				"keypool: this proxy needs its proxy token: the one sent is not one of proxy_tokens in its configuration", nil)
		case i < 0:
			w.Header().Set("WWW-Authenticate", "Bearer")
			writeError(w, http.StatusUnauthorized, "authentication_error",
				"keypool: this proxy needs its proxy token: none was sent; send it as Authorization: Bearer TOKEN, or log in on the status page at /", nil)
		default:
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, who)))
		}
	})
}

// tokenOf returns the index of the proxy token a request presents — as a
// bearer token, an API-key header or a key parameter, as guard reads them
// — or -1, and whether it presented anything.
func (s *server) tokenOf(r *http.Request) (index int, presented bool) {
	for _, p := range []string{
		strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "),
		r.Header.Get("X-Api-Key"),
		r.Header.Get("X-Goog-Api-Key"),
		r.URL.Query().Get("key"),
	} {
		if p == "" {
			continue
		}
		presented = true
		if i := s.tokenIndex([]byte(p)); i >= 0 {
			return i, true
		}
	}
	return -1, presented
}

// tokenIndex returns the index of token among the proxy tokens, or -1; it
// compares in constant time.
func (s *server) tokenIndex(token []byte) int {
	found := -1
	for i, t := range s.settings.tokens {
		if subtle.ConstantTimeCompare(token, t) == 1 && found < 0 {
			found = i
		}
	}
	return found
}

// session returns the session cookie's value for a login with token that
// lasts until expires: the expiry and an HMAC of it keyed by the token.
// The cookie is not the token and does not reveal it; a session holds
// across restarts and replicas of the proxy, and ends when it expires or
// its token leaves the configuration.
func session(token []byte, expires time.Time) string {
	exp := strconv.FormatInt(expires.Unix(), 10)
	mac := hmac.New(sha256.New, token)
	mac.Write([]byte("keypool status page session\x00" + exp))
	return exp + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// sessionToken returns the index of the proxy token whose session value is
// v, unexpired at now, or -1. It compares in constant time.
func (s *server) sessionToken(v string, now time.Time) int {
	exp, _, ok := strings.Cut(v, ".")
	if !ok || len(v) > 128 {
		return -1
	}
	unix, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || !now.Before(time.Unix(unix, 0)) || time.Unix(unix, 0).After(now.Add(sessionLife)) {
		return -1
	}
	found := -1
	for i, t := range s.settings.tokens {
		if hmac.Equal([]byte(v), []byte(session(t, time.Unix(unix, 0)))) && found < 0 {
			found = i
		}
	}
	return found
}

// login checks the form field token and, when it is a proxy token, sets
// the session cookie; either way it sends the browser back to the page.
func (s *server) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxLoginBody)
	if err := r.ParseForm(); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			http.Error(w, "keypool: login form too large", http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "keypool: unreadable login form", http.StatusBadRequest)
		return
	}
	i := s.tokenIndex([]byte(r.PostForm.Get("token")))
	if i < 0 {
		s.log.Warn("status page login refused", "from", r.RemoteAddr)
		http.Redirect(w, r, "/#login-failed", http.StatusSeeOther)
		return
	}
	expires := time.Now().Add(sessionLife)
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: session(s.settings.tokens[i], expires), Path: "/",
		Expires: expires, MaxAge: int(sessionLife / time.Second),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
	s.log.Info("status page login", "by", fmt.Sprintf("proxy_tokens[%d]", i), "from", r.RemoteAddr)
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// logout clears the session cookie.
func logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// report returns the proxy's status at now.
func (s *server) report(now time.Time) statusReport {
	store := s.viewStoreHealth()
	return statusReport{Now: now.UTC(), Store: &store, Routes: viewRoutes(s.fallback.Status(), now), Events: s.events.latest(statusEvents, now)}
}

func (s *server) statusJSON(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.report(s.now()))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// operate does an operator's action on the key the request's path names,
// answers {"route", "key", a.flag: true} and logs who did: 404 for a key no
// route has, 500 for a failing action.
func (s *server) operate(a keyAction) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		route, key := r.PathValue("route"), r.PathValue("key")
		if !s.hasKey(route, key) {
			writeError(w, http.StatusNotFound, "not_found_error",
				fmt.Sprintf("keypool: no key %s in a route %s; keypool status -url lists them", quotePath(key), quotePath(route)), nil)
			return
		}
		if err := a.act(s.pools[s.routeIndex(route)], r.Context(), key); err != nil {
			writeError(w, http.StatusInternalServerError, "api_error", err.Error(), nil)
			return
		}
		who := caller(r)
		s.log.Info(a.logged, "route", route, "key", key, "by", who, "from", r.RemoteAddr)
		s.events.operated(a.name, route, key, who)
		if a.name == "unbench" {
			s.returns.unbench(route, key)
		}
		writeJSON(w, http.StatusOK, map[string]any{"route": route, "key": key, a.flag: true})
	}
}

// routeIndex returns the position of a route among the proxy's routes, its
// pool's among s.pools; hasKey has said the route is there.
func (s *server) routeIndex(route string) int {
	for i, r := range s.settings.routes {
		if r.name == route {
			return i
		}
	}
	return -1
}

// hasKey reports whether route names a route of the proxy with a key of
// that ID.
func (s *server) hasKey(route, key string) bool {
	for _, r := range viewRoutes(s.fallback.Status(), time.Now()) {
		if r.Name != route {
			continue
		}
		for _, k := range r.Keys {
			if k.ID == key {
				return true
			}
		}
	}
	return false
}
