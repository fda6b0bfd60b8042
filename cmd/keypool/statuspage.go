package main

import (
	"context"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"slices"
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
//	GET  /history                        JSON of the last hour of every key, minute by minute (history.go)
//	GET  /metrics                        Prometheus
//	POST /keys/{route}/{key}/unbench     lifts a key's benches and its route's
//	POST /keys/{route}/{key}/reset-spend forgets what a key and its account spent
//	POST /reload                         re-reads the configuration file (reload.go)
//
// /status, /history, /metrics, unbench, reset-spend and reload take an operator token (as
// the forwarded requests take a proxy token) or the page's session cookie,
// and the page logs in with an operator token; without operator_tokens, a
// proxy token serves as one. An operator token never lets a request
// through to an upstream, nor does the cookie. The state-changing ones
// refuse a cross-origin browser request. All of them answer only under the
// proxy's names (named), the session is the proxy's (sessions.go), and
// tries at a token are limited by client address (logins.go).

//go:embed web
var webFiles embed.FS

// ownEndpointHeader marks a request that keypool's own commands send to a
// proxy's endpoint: the proxy never forwards a request that carries it,
// so a base URL with a path before the endpoint's name (…/v1/status) gets
// an error instead of reaching an upstream with a key.
const ownEndpointHeader = "Keypool-Endpoint"

const (
	sessionCookie = "keypool_session"
	// maxLoginBody bounds the body of POST /login.
	maxLoginBody = 4 << 10
	// statusEvents is how many recent events /status shows.
	statusEvents = 50
)

// handleOwn registers the proxy's own endpoints on mux, except /healthz.
func (s *server) handleOwn(mux *ownMux) {
	cop := http.NewCrossOriginProtection()
	handle := func(pattern string, h http.Handler) { mux.Handle(pattern, s.named(h)) }
	handle("GET /{$}", page("web/index.html"))
	handle("GET /ui/app.js", page("web/app.js"))
	handle("GET /ui/style.css", page("web/style.css"))
	handle("POST /login", cop.Handler(http.HandlerFunc(s.login)))
	handle("POST /logout", cop.Handler(http.HandlerFunc(s.logout)))
	handle("GET /status", s.own(s.writeWithin(http.HandlerFunc(s.statusJSON))))
	handle("GET /history", s.own(s.writeWithin(http.HandlerFunc(s.historyJSON))))
	handle("GET /metrics", s.own(s.writeWithin(s.metrics)))
	for _, a := range keyActions {
		handle("POST /keys/{route}/{key}/"+a.name, cop.Handler(s.own(s.operate(a))))
	}
	handle("POST /reload", cop.Handler(s.own(http.HandlerFunc(s.reloadNow))))
}

// named answers 421 to a request for an own endpoint under a name that is
// not the proxy's — an IP address, localhost, the listen address's host or
// one of hosts — and passes the rest to next: a page of another site that
// a DNS rebinding points at the proxy's address sends its own name, and
// gets nothing, not even a try at a login.
func (s *server) named(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.ownHost(r.Host) {
			next.ServeHTTP(w, r)
			return
		}
		s.log.Warn("own endpoint refused: a host that is not the proxy's", "host", quotePath(r.Host), "path", quotePath(r.URL.Path), "from", r.RemoteAddr)
		writeError(w, http.StatusMisdirectedRequest, "invalid_request_error",
			"keypool: the proxy's own endpoints do not answer for the host "+quotePath(r.Host)+
				"; if it is reached so, add the name to hosts in its configuration (a guard against DNS rebinding)", nil)
	})
}

// ownHost reports whether a Host header names the proxy, as named says.
func (s *server) ownHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	return isIP(host) || host != "" && slices.Contains(s.settings.hosts, canonicalHost(host))
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

// caller says who made a request that own let through: "operator_tokens[0]",
// or "operator_tokens[0] (status page)" (proxy_tokens without operator
// tokens).
func caller(r *http.Request) string {
	who, _ := r.Context().Value(callerKey{}).(string)
	return who
}

// own lets through a request with an operator token or a status page
// session, and answers 401 to others, saying whether the token was
// missing or wrong.
func (s *server) own(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, field := s.settings.operators()
		sent := presented(r)
		if len(sent) > 0 {
			if wait := s.attempts.wait(r.RemoteAddr, s.now()); wait > 0 {
				s.tooManyTries(w, r, wait)
				return
			}
		}
		i := s.operatorOf(sent)
		switch {
		case i >= 0:
			s.attempts.succeeded(r.RemoteAddr)
		case len(sent) > 0:
			s.attempts.failed(r.RemoteAddr, s.now())
		}
		who := fmt.Sprintf("%s[%d]", field, i)
		if i < 0 {
			if c, err := r.Cookie(sessionCookie); err == nil {
				if token, ok := s.sessions.token(c.Value, s.now(), func(t []byte) bool { return s.operatorIndex(t) >= 0 }); ok {
					i = s.operatorIndex(token)
					who = fmt.Sprintf("%s[%d] (status page)", field, i)
				}
			}
		}
		needs := "keypool: this proxy needs its proxy token"
		if field == "operator_tokens" {
			needs = "keypool: this endpoint needs an operator token (a proxy token only forwards)"
		}
		switch {
		case i < 0 && len(sent) > 0:
			w.Header().Set("WWW-Authenticate", "Bearer")
			writeError(w, http.StatusUnauthorized, "authentication_error", needs+": the one sent is not one of "+field+" in its configuration", nil)
		case i < 0:
			w.Header().Set("WWW-Authenticate", "Bearer")
			writeError(w, http.StatusUnauthorized, "authentication_error",
				needs+": none was sent; send it as Authorization: Bearer TOKEN, or log in on the status page at /", nil)
		default:
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, who)))
		}
	})
}

// tooManyTries answers a request with a token from an address that has
// failed too often, whose next try may come after wait.
func (s *server) tooManyTries(w http.ResponseWriter, r *http.Request, wait time.Duration) {
	secs := int64(math.Ceil(wait.Seconds()))
	s.log.Warn("operator token refused unread: too many failures from this address", "from", r.RemoteAddr, "path", quotePath(r.URL.Path), "wait", wait.Round(time.Second).String())
	w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	writeError(w, http.StatusTooManyRequests, "rate_limit_error",
		fmt.Sprintf("keypool: too many wrong tokens from this address: try again in %d s", secs), nil)
}

// presented returns what a request presents as a token, in this order: a
// bearer token, an API-key header, a key parameter, as guard reads a proxy
// token; none when it presents none.
func presented(r *http.Request) []string {
	var sent []string
	for _, p := range []string{
		strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "),
		r.Header.Get("X-Api-Key"),
		r.Header.Get("X-Goog-Api-Key"),
		r.URL.Query().Get("key"),
	} {
		if p != "" {
			sent = append(sent, p)
		}
	}
	return sent
}

// operatorOf returns the index of the first operator token among sent, or
// -1.
func (s *server) operatorOf(sent []string) int {
	for _, p := range sent {
		if i := s.operatorIndex([]byte(p)); i >= 0 {
			return i
		}
	}
	return -1
}

// operatorIndex returns the index of token among the operator tokens (the
// proxy tokens, without them), or -1; it compares in constant time.
func (s *server) operatorIndex(token []byte) int {
	tokens, _ := s.settings.operators()
	found := -1
	for i, t := range tokens {
		if subtle.ConstantTimeCompare(token, t) == 1 && found < 0 {
			found = i
		}
	}
	return found
}

// login checks the form field token and, when it is an operator token,
// sets the session cookie; either way it sends the browser back to the
// page.
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
	if wait := s.attempts.wait(r.RemoteAddr, s.now()); wait > 0 {
		s.log.Warn("status page login refused: too many failures from this address", "from", r.RemoteAddr, "wait", wait.Round(time.Second).String())
		http.Redirect(w, r, "/#login-wait", http.StatusSeeOther)
		return
	}
	i := s.operatorIndex([]byte(r.PostForm.Get("token")))
	if i < 0 {
		s.attempts.failed(r.RemoteAddr, s.now())
		s.log.Warn("status page login refused", "from", r.RemoteAddr)
		http.Redirect(w, r, "/#login-failed", http.StatusSeeOther)
		return
	}
	s.attempts.succeeded(r.RemoteAddr)
	tokens, field := s.settings.operators()
	id, expires := s.sessions.open(tokens[i], s.now())
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: id, Path: "/",
		Expires: expires, MaxAge: int(sessionLife / time.Second),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: s.secureCookie(r),
	})
	s.log.Info("status page login", "by", fmt.Sprintf("%s[%d]", field, i), "from", r.RemoteAddr)
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// logout ends the session and clears its cookie.
func (s *server) logout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(sessionCookie); err == nil {
		s.sessions.close(c.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: s.secureCookie(r)})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// secureCookie reports whether the session cookie of an answer to r is
// Secure, sent back over HTTPS only: when r came over TLS, or always with
// secure_cookies, for a proxy behind a front that ends TLS.
func (s *server) secureCookie(r *http.Request) bool {
	return r.TLS != nil || s.settings.secureCookies
}

// report returns the proxy's status at now.
func (s *server) report(now time.Time) statusReport {
	store := s.viewStoreHealth()
	return statusReport{Now: now.UTC(), Store: &store, Routes: viewRoutes(s.fallback.Status(), now), Events: s.events.latest(statusEvents, now), Clients: s.reportClients(now)}
}

func (s *server) statusJSON(w http.ResponseWriter, _ *http.Request) {
	report := s.report(s.now())
	report.Reload = s.reloads.view()
	writeJSON(w, http.StatusOK, report)
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
		who := caller(r)
		if err := a.act(s.pools[s.routeIndex(route)], r.Context(), key, who); err != nil {
			writeError(w, http.StatusInternalServerError, "api_error", err.Error(), nil)
			return
		}
		s.log.Info(a.logged, "route", route, "key", key, "by", who, "from", r.RemoteAddr)
		s.events.operated(a.name, route, key, who)
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
