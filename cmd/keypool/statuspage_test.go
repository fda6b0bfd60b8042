package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/keypool-go/keypool/internal/vendorsim"
)

// pageProxy starts a proxy of two keys, one revoked, at a fake vendor, and
// returns its URL, the server and its log.
func pageProxy(t *testing.T) (string, *server, *syncBuffer, *vendorsim.Server) {
	t.Helper()
	sim := vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, Keys: []vendorsim.Key{
		{Secret: "sk-page-good", ID: "good"}, {Secret: "sk-page-gone", ID: "gone", Revoked: true}}})
	t.Cleanup(sim.Close)
	base, srv, logs := proxyLogged(t, simConfig(sim, t.TempDir(), `
      - {id: good, secret: sk-page-good}
      - {id: gone, secret: sk-page-gone}`), "second-token")
	return base, srv, logs, sim
}

// proxyLogged starts the proxy for the YAML configuration, with more proxy
// tokens, and returns its URL, the server and its log.
func proxyLogged(t *testing.T, conf string, tokens ...string) (string, *server, *syncBuffer) {
	t.Helper()
	var c config
	require.NoError(t, yaml.Unmarshal([]byte(conf), &c))
	for _, tok := range tokens {
		c.ProxyTokens = append(c.ProxyTokens, secretRef(tok))
	}
	return startLogged(t, &c, slog.LevelInfo, nil)
}

// benchGone sends requests until the revoked key has met one.
func benchGone(t *testing.T, base string, sim *vendorsim.Server) {
	t.Helper()
	for range 4 {
		if st, _ := sim.StatsOf("gone"); st.Unauthorized > 0 {
			return
		}
		resp, err := chat(t, base, false)
		require.NoError(t, err)
		resp.Body.Close()
	}
	t.Fatal("the revoked key was never tried")
}

// noRedirects is a client that shows redirects instead of following them.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// login posts the login form and returns the answer.
func login(t *testing.T, base, token string, header http.Header) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := noRedirects.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp
}

func sessionOf(resp *http.Response) *http.Cookie {
	for _, c := range resp.Cookies() {
		if c.Name == sessionCookie {
			return c
		}
	}
	return nil
}

// get sends a GET with the cookie, if any, and returns the status and body.
func get(t *testing.T, u string, cookie *http.Cookie, header http.Header) (int, string) {
	t.Helper()
	return sendWith(t, http.MethodGet, u, cookie, header)
}

// sendWith sends a request of method, without a body, with the cookie, if
// any, and returns the status and body.
func sendWith(t *testing.T, method, u string, cookie *http.Cookie, header http.Header) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	require.NoError(t, err)
	if cookie != nil {
		req.AddCookie(cookie)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestStatusPageLogin(t *testing.T) {
	base, _, logs, _ := pageProxy(t)

	resp := login(t, base, "wrong", nil)
	assert.Equal(t, http.StatusSeeOther, resp.StatusCode)
	assert.Equal(t, "/#login-failed", resp.Header.Get("Location"))
	assert.Nil(t, sessionOf(resp), "no session for a wrong token")

	resp = login(t, base, proxyToken, nil)
	assert.Equal(t, http.StatusSeeOther, resp.StatusCode)
	assert.Equal(t, "/", resp.Header.Get("Location"))
	c := sessionOf(resp)
	require.NotNil(t, c)
	assert.True(t, c.HttpOnly, "the script cannot read the session")
	assert.Equal(t, http.SameSiteStrictMode, c.SameSite)
	assert.NotContains(t, c.Value, proxyToken, "the cookie is not the token")
	assert.Positive(t, c.MaxAge)

	status, body := get(t, base+"/status", c, nil)
	assert.Equal(t, http.StatusOK, status, body)
	status, _ = get(t, base+"/metrics", c, nil)
	assert.Equal(t, http.StatusOK, status, "the JSON and metrics endpoints take the cookie")

	tampered := *c
	last := "A"
	if strings.HasSuffix(c.Value, last) { // one ID in 32 ends so: the forgery must differ
		last = "B"
	}
	tampered.Value = c.Value[:len(c.Value)-1] + last
	status, _ = get(t, base+"/status", &tampered, nil)
	assert.Equal(t, http.StatusUnauthorized, status, "a forged session")

	// The cookie never lets a request through to an upstream.
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(`{"model":"gpt-4o-mini"}`))
	req.AddCookie(c)
	fwd, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	fwd.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, fwd.StatusCode)

	// A second token logs in too, and is named as such.
	resp = login(t, base, "second-token", nil)
	require.NotNil(t, sessionOf(resp))
	assert.NotEqual(t, c.Value, sessionOf(resp).Value)
	assert.Contains(t, logs.String(), "status page login refused")
	assert.Contains(t, logs.String(), "by=proxy_tokens[1]")

	// Logging out clears the cookie.
	req, _ = http.NewRequest(http.MethodPost, base+"/logout", nil)
	out, err := noRedirects.Do(req)
	require.NoError(t, err)
	out.Body.Close()
	require.NotNil(t, sessionOf(out))
	assert.Negative(t, sessionOf(out).MaxAge)
}

func TestStatusPageLoginBounds(t *testing.T) {
	base, _, _, _ := pageProxy(t)
	big := strings.NewReader("token=" + strings.Repeat("x", maxLoginBody))
	resp, err := noRedirects.Post(base+"/login", "application/x-www-form-urlencoded", big)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)

	resp, err = noRedirects.Post(base+"/login?token="+proxyToken, "application/x-www-form-urlencoded", strings.NewReader(""))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Nil(t, sessionOf(resp), "a token in the URL, where logs keep it, does not log in")
}

func TestStatusPageRefusesCrossOrigin(t *testing.T) {
	base, _, _, sim := pageProxy(t)
	benchGone(t, base, sim)
	c := sessionOf(login(t, base, proxyToken, nil))
	require.NotNil(t, c)

	tests := []struct {
		name   string
		header http.Header
		status int
	}{
		{"another site's form", http.Header{"Origin": {"https://evil.example"}}, http.StatusForbidden},
		{"cross-site fetch", http.Header{"Sec-Fetch-Site": {"cross-site"}}, http.StatusForbidden},
		{"same-site but another origin", http.Header{"Sec-Fetch-Site": {"same-site"}}, http.StatusForbidden},
		{"the page itself", http.Header{"Sec-Fetch-Site": {"same-origin"}, "Origin": {base}}, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, base+"/keys/openai/gone/unbench", nil)
			req.AddCookie(c)
			for k, v := range tt.header {
				req.Header[k] = v
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, tt.status, resp.StatusCode)
		})
	}
	resp := login(t, base, proxyToken, http.Header{"Origin": {"https://evil.example"}})
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, "no login from another site's form")
	assert.Nil(t, sessionOf(resp))
}

func TestStatusPageServesNoSecret(t *testing.T) {
	base, _, _, _ := pageProxy(t)
	for _, path := range []string{"/", "/ui/app.js", "/ui/style.css"} {
		resp, err := http.Get(base + path)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, path)
		assert.Contains(t, resp.Header.Get("Content-Security-Policy"), "default-src 'none'", path)
		assert.Contains(t, resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'", path)
		assert.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))
		assert.NotContains(t, string(b), "sk-page", path)
		assert.NotContains(t, string(b), proxyToken, path)
		// SVG's namespace is a name, not an address the page loads.
		own := strings.ReplaceAll(string(b), `"http://www.w3.org/2000/svg"`, "")
		assert.NotContains(t, own, "http://", "%s loads nothing from elsewhere", path)
	}
	resp, err := http.Get(base + "/")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Contains(t, resp.Header.Get("Content-Type"), "text/html")
}

func TestStatusJSON(t *testing.T) {
	base, _, _, sim := pageProxy(t)
	benchGone(t, base, sim)
	status, body := get(t, base+"/status", nil, http.Header{"Authorization": {"Bearer " + proxyToken}})
	require.Equal(t, http.StatusOK, status, body)
	assert.NotContains(t, body, "0001-01-01", "no zero time")
	assert.NotContains(t, body, "sk-page")
	var report statusReport
	require.NoError(t, json.Unmarshal([]byte(body), &report))
	require.Len(t, report.Routes, 1)
	r := report.Routes[0]
	assert.True(t, r.BenchedUntil.IsZero())
	assert.NotContains(t, body, "benched_until", "a route not benched has no time")
	keys := map[string]keyView{}
	for _, k := range r.Keys {
		keys[k.ID] = k
	}
	assert.Equal(t, "benched", keys["gone"].State)
	assert.Equal(t, "auth", keys["gone"].Bench.Kind.String())
	assert.Equal(t, "revoked or not authorized", keys["gone"].Bench.Reason)
	assert.WithinDuration(t, time.Now().Add(12*time.Hour), keys["gone"].Bench.Until, time.Minute)
	assert.Equal(t, "serving", keys["good"].State)
	assert.True(t, keys["good"].Bench.Until.IsZero())
	require.NotEmpty(t, report.Events)
	assert.Equal(t, "bench", report.Events[0].Kind)
	assert.Equal(t, "gone", report.Events[0].Key)
}

func TestOwnEndpointsSayWhyTheyRefuse(t *testing.T) {
	base, _, _, _ := pageProxy(t)
	tests := []struct {
		name   string
		header http.Header
		want   string
	}{
		{"no token", nil, "none was sent"},
		{"a wrong token", http.Header{"Authorization": {"Bearer nope"}}, "the one sent is not one of proxy_tokens"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := get(t, base+"/status", nil, tt.header)
			assert.Equal(t, http.StatusUnauthorized, status)
			assert.Contains(t, body, tt.want)
		})
	}
}

func TestUnbenchEndpoint(t *testing.T) {
	base, srv, logs, sim := pageProxy(t)
	benchGone(t, base, sim)
	post := func(path string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, base+path, nil)
		req.Header.Set("Authorization", "Bearer "+proxyToken)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	status, body := post("/keys/openai/nope/unbench")
	assert.Equal(t, http.StatusNotFound, status)
	assert.Contains(t, body, `no key \"nope\" in a route \"openai\"`)
	status, _ = post("/keys/nope/gone/unbench")
	assert.Equal(t, http.StatusNotFound, status)

	status, body = post("/keys/openai/gone/unbench")
	require.Equal(t, http.StatusOK, status, body)
	assert.JSONEq(t, `{"route":"openai","key":"gone","unbenched":true}`, body)
	assert.Contains(t, logs.String(), "msg=unbenched route=openai key=gone by=proxy_tokens[0]")
	for _, r := range viewRoutes(srv.fallback.Status(), time.Now()) {
		for _, k := range r.Keys {
			assert.Equal(t, "serving", k.State, "key %s", k.ID)
		}
	}
	events := srv.events.latest(10, time.Now())
	require.NotEmpty(t, events)
	assert.Equal(t, "unbench", events[0].Kind)

	before, _ := sim.StatsOf("gone")
	for range 2 {
		resp, err := chat(t, base, false)
		require.NoError(t, err)
		resp.Body.Close()
	}
	after, _ := sim.StatsOf("gone")
	assert.Equal(t, before.Requests+1, after.Requests, "the key is tried again, once, and benched again")
}

func TestOwnEndpointNeverForwarded(t *testing.T) {
	up, upstream := countingUpstream(t)
	base, _ := startProxy(t, oneUpstream(t, up, "keys: [{id: a, secret: sk-a}]"))
	for _, path := range []string{"/v1/status", "/openai/v1/status", "/v1/keys/up/a/unbench"} {
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		req.Header.Set("Authorization", "Bearer "+proxyToken)
		req.Header.Set(ownEndpointHeader, "status")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusNotFound, resp.StatusCode, path)
		assert.Contains(t, string(b), "own endpoints are at its root", path)
	}
	assert.Zero(t, upstream.Load(), "nothing reached the upstream")
}

// clockedProxy starts the proxy for conf on clock — over TLS when tls is
// set — and returns its URL, the server and a client for it that shows
// redirects rather than follows them.
func clockedProxy(t *testing.T, conf string, clock *testClock, tls bool) (string, *server, *http.Client) {
	t.Helper()
	srv, err := newServer(clocked(t, conf, clock), slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	hs := httptest.NewUnstartedServer(srv.handler())
	if tls {
		hs.StartTLS()
	} else {
		hs.Start()
	}
	t.Cleanup(func() {
		hs.Close()
		srv.close()
	})
	client := hs.Client()
	client.CheckRedirect = noRedirects.CheckRedirect
	return hs.URL, srv, client
}

// logIn posts the login form with client and returns the session cookie,
// or nil.
func logIn(t *testing.T, client *http.Client, base, token string) *http.Cookie {
	t.Helper()
	resp, err := client.PostForm(base+"/login", url.Values{"token": {token}})
	require.NoError(t, err)
	resp.Body.Close()
	return sessionOf(resp)
}

// withCookie sends a request without a body with client and the cookie,
// and returns the answer, closed.
func withCookie(t *testing.T, client *http.Client, method, u string, c *http.Cookie) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	require.NoError(t, err)
	req.AddCookie(c)
	resp, err := client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp
}

// statusWith asks /status with client and the cookie, and returns the
// status.
func statusWith(t *testing.T, client *http.Client, base string, c *http.Cookie) int {
	t.Helper()
	return withCookie(t, client, http.MethodGet, base+"/status", c).StatusCode
}

// A session is the proxy's: it ends at logout, even for a browser that
// keeps the cookie, at its expiry, and with the process; its cookie is
// Secure over TLS, or with secure_cookies.
func TestStatusPageSessionsEnd(t *testing.T) {
	clock := newTestClock(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
	state := t.TempDir()
	conf := fmt.Sprintf("proxy_tokens: [%q]\noperator_tokens: [%q]\nstate: %s\nupstreams: [{url: 'http://127.0.0.1:1', keys: [{secret: sk-a}]}]\n",
		proxyToken, operatorToken, state)
	base, _, client := clockedProxy(t, conf, clock, false)

	kept := logIn(t, client, base, operatorToken)
	require.NotNil(t, kept)
	assert.False(t, kept.Secure, "over plain HTTP, without secure_cookies")
	assert.Equal(t, http.StatusOK, statusWith(t, client, base, kept))
	resp := withCookie(t, client, http.MethodPost, base+"/logout", kept)
	require.NotNil(t, sessionOf(resp))
	assert.Negative(t, sessionOf(resp).MaxAge, "the browser is told to drop the cookie")
	assert.Equal(t, http.StatusUnauthorized, statusWith(t, client, base, kept), "a cookie kept after logout opens nothing")

	c := logIn(t, client, base, operatorToken)
	require.NotNil(t, c)
	assert.NotEqual(t, kept.Value, c.Value, "a new login, a new session")
	clock.set(clock.now().Add(sessionLife - time.Second))
	assert.Equal(t, http.StatusOK, statusWith(t, client, base, c), "until its expiry")
	clock.set(clock.now().Add(time.Second))
	assert.Equal(t, http.StatusUnauthorized, statusWith(t, client, base, c), "not at it")

	live := logIn(t, client, base, operatorToken)
	require.NotNil(t, live)
	restarted, _, rclient := clockedProxy(t, strings.Replace(conf, state, t.TempDir(), 1), clock, false)
	assert.Equal(t, http.StatusUnauthorized, statusWith(t, rclient, restarted, live), "a session of another process")

	tlsBase, _, tlsClient := clockedProxy(t, strings.Replace(conf, state, t.TempDir(), 1), clock, true)
	secure := logIn(t, tlsClient, tlsBase, operatorToken)
	require.NotNil(t, secure)
	assert.True(t, secure.Secure, "over TLS")
	frontBase, _, frontClient := clockedProxy(t, "secure_cookies: true\n"+strings.Replace(conf, state, t.TempDir(), 1), clock, false)
	front := logIn(t, frontClient, frontBase, operatorToken)
	require.NotNil(t, front)
	assert.True(t, front.Secure, "behind a front that ends TLS, with secure_cookies")
}

func TestSessions(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	configured := map[string]bool{"first": true, "second": true}
	operator := func(token []byte) bool { return configured[string(token)] }
	var ss sessions
	first, expires := ss.open([]byte("first"), now)
	assert.Equal(t, now.Add(sessionLife), expires)
	again, _ := ss.open([]byte("first"), now)
	second, _ := ss.open([]byte("second"), now)
	assert.NotEqual(t, first, again, "each login has its own random ID")
	for _, id := range []string{first, second} {
		assert.NotContains(t, id, "first")
		assert.NotContains(t, id, "second")
	}
	token := func(id string, at time.Time) string {
		tok, ok := ss.token(id, at, operator)
		if !ok {
			return "none"
		}
		return string(tok)
	}
	assert.Equal(t, "first", token(first, now))
	assert.Equal(t, "second", token(second, now.Add(sessionLife-time.Second)))
	tampered := "X" // a last character other than the ID's own: one ID in 64 ends in X
	if strings.HasSuffix(first, tampered) {
		tampered = "Y"
	}
	for name, id := range map[string]string{
		"a tampered ID": first[:len(first)-1] + tampered, "none": "", "too long": first + strings.Repeat("A", maxSessionID),
	} {
		assert.Equal(t, "none", token(id, now), name)
	}
	assert.Equal(t, "none", token(second, now.Add(sessionLife)), "ended at its expiry")
	assert.Equal(t, "none", token(second, now), "and dropped: a clock set back does not bring it back")

	ss.close(first)
	assert.Equal(t, "none", token(first, now), "ended at logout")
	assert.Equal(t, "first", token(again, now), "the token's other session holds")
	delete(configured, "first")
	assert.Equal(t, "none", token(again, now), "ended when its token is no longer an operator's")
	configured["first"] = true
	assert.Equal(t, "none", token(again, now), "and dropped")

	var many sessions
	ids := make([]string, 0, maxSessions+1)
	for i := range maxSessions + 1 {
		id, _ := many.open([]byte("first"), now.Add(time.Duration(i)*time.Second))
		ids = append(ids, id)
	}
	assert.Len(t, many.byID, maxSessions, "bounded")
	_, ok := many.token(ids[0], now, operator)
	assert.False(t, ok, "the one that would end soonest made room")
	_, ok = many.token(ids[maxSessions], now, operator)
	assert.True(t, ok, "the newest holds")
}

// A route of one key that the vendor revoked: the 401 reaches the caller,
// the route is benched for 12 hours, and the proxy says so in its log; an
// unbench brings the route back without a restart.
func TestUnbenchBringsBackAOneKeyRoute(t *testing.T) {
	sim := vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, Keys: []vendorsim.Key{{Secret: "sk-only", ID: "only", Revoked: true}}})
	t.Cleanup(sim.Close)
	base, _, logs := proxyLogged(t, oneUpstream(t, sim.URL(), "keys: [{id: only, secret: sk-only}]"))
	statusOf := func() int {
		resp, err := chat(t, base, false)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	assert.Equal(t, http.StatusUnauthorized, statusOf())
	assert.Contains(t, logs.String(), `msg="route benched" route=up kind=auth`)
	assert.Equal(t, http.StatusTooManyRequests, statusOf(), "the route is benched")

	req, _ := http.NewRequest(http.MethodPost, base+"/keys/up/only/unbench", nil)
	req.Header.Set("Authorization", "Bearer "+proxyToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, http.StatusUnauthorized, statusOf(), "the request reaches the vendor again")
	st, _ := sim.StatsOf("only")
	assert.Equal(t, int64(2), st.Requests)
}

const operatorToken = "op-operator-token-for-tests"

// With operator_tokens, only they read the proxy's own endpoints, log in
// on the page and unbench; a proxy token only forwards, and an operator
// token does not forward.
func TestOperatorTokensApartFromProxyTokens(t *testing.T) {
	rec, upstream := recordingUpstream(t)
	var c config
	require.NoError(t, yaml.Unmarshal([]byte(oneUpstream(t, upstream.URL, "keys: [{id: a, secret: sk-a}]")), &c))
	c.OperatorTokens = []secretRef{operatorToken}
	base, _, logs := startLogged(t, &c, slog.LevelInfo, nil)
	bearer := func(token string) http.Header { return http.Header{"Authorization": {"Bearer " + token}} }
	send := func(method, path string, header http.Header) (int, string) {
		return sendWith(t, method, base+path, nil, header)
	}
	for _, own := range []struct{ method, path string }{
		{http.MethodGet, "/status"}, {http.MethodGet, "/metrics"}, {http.MethodPost, "/keys/up/a/unbench"},
	} {
		t.Run(own.path, func(t *testing.T) {
			status, body := send(own.method, own.path, bearer(proxyToken))
			assert.Equal(t, http.StatusUnauthorized, status, "a proxy token")
			assert.Contains(t, body, "this endpoint needs an operator token (a proxy token only forwards): the one sent is not one of operator_tokens")
			status, body = send(own.method, own.path, bearer(operatorToken))
			assert.Equal(t, http.StatusOK, status, "an operator token: %s", body)
		})
	}
	assert.Contains(t, logs.String(), "by=operator_tokens[0]", "the unbench names the operator's token")

	assert.Nil(t, sessionOf(login(t, base, proxyToken, nil)), "a proxy token does not log in")
	session := sessionOf(login(t, base, operatorToken, nil))
	require.NotNil(t, session, "an operator token does")
	status, _ := get(t, base+"/status", session, nil)
	assert.Equal(t, http.StatusOK, status)

	status, body := send(http.MethodPost, "/v1/chat/completions", bearer(operatorToken))
	assert.Equal(t, http.StatusUnauthorized, status, "an operator token does not forward")
	assert.Contains(t, body, "nor an operator token, which does not forward")
	assert.Empty(t, rec.requests())
	status, _ = send(http.MethodPost, "/v1/chat/completions", http.Header{"Authorization": {"Bearer " + proxyToken}, "X-Note": {"op " + operatorToken}})
	assert.Equal(t, http.StatusOK, status, "a proxy token forwards")
	require.Len(t, rec.requests(), 1)
	assert.NotContains(t, rec.requests()[0], operatorToken, "an operator token never goes upstream")
}

func TestWaitAfter(t *testing.T) {
	tests := []struct {
		failures int
		want     time.Duration
	}{
		{0, 0}, {1, 0}, {freeAttempts - 1, 0},
		{freeAttempts, time.Second}, {freeAttempts + 1, 2 * time.Second}, {freeAttempts + 2, 4 * time.Second},
		{freeAttempts + 9, 512 * time.Second}, {freeAttempts + 10, longestWait}, {freeAttempts + 63, longestWait}, {1 << 40, longestWait},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, waitAfter(tt.failures), "waitAfter(%d)", tt.failures)
	}
}

func TestClientAddr(t *testing.T) {
	for remote, want := range map[string]string{
		"192.0.2.7:5123":                    "192.0.2.7",
		"[::ffff:192.0.2.7]:5123":           "192.0.2.7",
		"[2001:db8:1:2:3:4:5:6]:443":        "2001:db8:1:2::/64",
		"[2001:db8:1:2:ffff:ffff:ffff:1]:1": "2001:db8:1:2::/64",
		"[fe80::1%eth0]:80":                 "fe80::/64",
		"@":                                 "@",
	} {
		assert.Equal(t, want, clientAddr(remote), "clientAddr(%q)", remote)
	}
}

func TestAttempts(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	const addr = "192.0.2.7:1000"
	var a attempts
	for i := range freeAttempts {
		assert.Zero(t, a.wait(addr, now), "before failure %d", i+1)
		a.failed(addr, now)
	}
	assert.Equal(t, time.Second, a.wait(addr, now), "after the free tries")
	assert.Equal(t, time.Second, a.wait("192.0.2.7:2000", now), "from another port of the address")
	assert.Zero(t, a.wait("192.0.2.8:1000", now), "another address is apart")
	now = now.Add(time.Second)
	assert.Zero(t, a.wait(addr, now), "once the wait is over")
	a.failed(addr, now)
	assert.Equal(t, 2*time.Second, a.wait(addr, now), "the next failure doubles it")
	a.succeeded(addr)
	assert.Zero(t, a.wait(addr, now), "a success starts afresh")

	for range freeAttempts + 1 {
		a.failed(addr, now)
	}
	now = now.Add(forgetAfter)
	a.failed(addr, now)
	assert.Zero(t, a.wait(addr, now), "a failure an hour after the last starts a new count")

	var full attempts
	for i := range maxAddrs {
		full.failed(fmt.Sprintf("10.0.%d.%d:1", i/256, i%256), now)
	}
	for i := range freeAttempts {
		full.failed(fmt.Sprintf("10.1.0.%d:1", i), now) // addresses beyond the bound
	}
	assert.Len(t, full.byAddr, maxAddrs, "bounded")
	assert.Equal(t, time.Second, full.wait("10.2.0.1:1", now), "beyond the bound, addresses share one count")
	later := now.Add(forgetAfter)
	full.failed("10.1.0.9:1", later)
	assert.Contains(t, full.byAddr, "10.1.0.9", "counts forgotten make room")
	assert.LessOrEqual(t, len(full.byAddr), maxAddrs)
}

// A login, or an operator token sent to an own endpoint, from an address
// that failed too often is refused unread — the right token too — until
// its wait is over, on the proxy's clock.
func TestStatusPageLoginAttemptsWait(t *testing.T) {
	clock := newTestClock(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
	conf := fmt.Sprintf("proxy_tokens: [%q]\noperator_tokens: [%q]\nstate: %s\nupstreams: [{url: 'http://127.0.0.1:1', keys: [{secret: sk-a}]}]\n",
		proxyToken, operatorToken, t.TempDir())
	base, _, client := clockedProxy(t, conf, clock, false)
	try := func(token string) string {
		resp, err := client.PostForm(base+"/login", url.Values{"token": {token}})
		require.NoError(t, err)
		resp.Body.Close()
		return resp.Header.Get("Location")
	}
	for range freeAttempts {
		assert.Equal(t, "/#login-failed", try("guess"))
	}
	assert.Equal(t, "/#login-wait", try(operatorToken), "the right token, during the wait, is not read")
	bearer := http.Header{"Authorization": {"Bearer " + operatorToken}}
	req, err := http.NewRequest(http.MethodGet, base+"/status", nil)
	require.NoError(t, err)
	req.Header = bearer
	resp, err := client.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "nor a token sent to an own endpoint: %s", b)
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))
	assert.Contains(t, string(b), "too many wrong tokens from this address")
	assert.NotContains(t, string(b), operatorToken)

	clock.set(clock.now().Add(time.Second))
	assert.Equal(t, "/#login-failed", try("guess"), "tried once the wait is over")
	clock.set(clock.now().Add(time.Second))
	assert.Equal(t, "/#login-wait", try(operatorToken), "the wait doubled")
	clock.set(clock.now().Add(time.Second))
	assert.Equal(t, "/", try(operatorToken), "logged in")
	assert.Equal(t, "/#login-failed", try("guess"), "and started afresh")
	status, _ := get(t, base+"/status", nil, bearer)
	assert.Equal(t, http.StatusOK, status)
}

// A page of another site that a DNS rebinding points at the proxy's
// address sends the other site's name as its Host: the own endpoints
// answer only for an IP address, localhost, the listen address's name and
// hosts; forwarded requests, which need a proxy token, and /healthz, which
// holds nothing, answer whatever the name.
func TestOwnEndpointsAnswerOnlyForTheProxysNames(t *testing.T) {
	rec, upstream := recordingUpstream(t)
	var c config
	require.NoError(t, yaml.Unmarshal([]byte("listen: keypool-box.lan:8787\nhosts: [keypool.internal]\n"+oneUpstream(t, upstream.URL, "keys: [{id: a, secret: sk-a}]")), &c))
	c.OperatorTokens = []secretRef{operatorToken}
	base, _, logs := startLogged(t, &c, slog.LevelInfo, nil)
	port := base[strings.LastIndexByte(base, ':'):]
	send := func(method, path, host string, token string) (int, string) {
		req, err := http.NewRequest(method, base+path, nil)
		require.NoError(t, err)
		req.Host = host
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := noRedirects.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	own := []struct{ method, path string }{
		{http.MethodGet, "/"}, {http.MethodGet, "/ui/app.js"}, {http.MethodGet, "/status"}, {http.MethodGet, "/metrics"},
		{http.MethodPost, "/login"}, {http.MethodPost, "/logout"}, {http.MethodPost, "/keys/up/a/unbench"},
	}
	for _, host := range []string{"evil.example", "evil.example" + port, "keypool.internal.evil.example", "localhost.evil.example" + port} {
		for _, e := range own {
			status, body := send(e.method, e.path, host, operatorToken)
			assert.Equal(t, http.StatusMisdirectedRequest, status, "%s %s for %q", e.method, e.path, host)
			assert.Contains(t, body, "add the name to hosts in its configuration")
			assert.NotContains(t, body, "sk-a")
		}
	}
	assert.Contains(t, logs.String(), "own endpoint refused: a host that is not the proxy's")
	for _, host := range []string{"127.0.0.1" + port, "[::1]" + port, "192.0.2.7", "localhost" + port, "LocalHost.", "keypool.internal", "KEYPOOL.Internal.:8787", "keypool-box.lan" + port} {
		status, body := send(http.MethodGet, "/status", host, operatorToken)
		assert.Equal(t, http.StatusOK, status, "for %q: %s", host, body)
	}
	status, _ := send(http.MethodGet, "/healthz", "evil.example", "")
	assert.Equal(t, http.StatusOK, status, "/healthz")
	status, _ = send(http.MethodGet, "/v1/models", "evil.example", proxyToken)
	assert.Equal(t, http.StatusOK, status, "a forwarded request")
	assert.Len(t, rec.requests(), 1)
}
