package keypool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Route is one vendor a Fallback sends requests to: a pool, where the pool's
// requests go, and the vendor's names for models.
type Route struct {
	// Name labels the route in events and status; it defaults to the host of
	// URL.
	Name string
	// Pool holds the vendor's keys.
	Pool *Pool
	// URL is where the route sends requests: its scheme and host replace a
	// request's, and a request's path is appended to its path.
	URL *url.URL
	// Models maps a model named in requests to this vendor's name for it, in
	// the JSON body's "model" and in a Gemini-style path; models it does not
	// name go unchanged.
	Models map[string]string
	// Base is the RoundTripper the route's pool sends through; nil is
	// http.DefaultTransport.
	Base http.RoundTripper
}

// Fallback is an http.RoundTripper over an ordered list of routes — several
// vendors' pools, typically free tiers first and a paid vendor last. A
// request goes to the first route that can take it; when a route's pool has
// no key free, or the route answers with a failure of its own (a throttle, a
// spent quota, a revoked key, a server error that its pool could not route
// around), the request goes to the next route, rewritten for it, and the
// route rests until the moment it is back — its pool's RetryAt, or the
// reset the answer names — not for a fixed minute. A request is sent at most
// once per route, with its body replayed intact; a successful answer,
// streams included, passes through untouched. When every route rests, the
// call fails with a *NoAvailableKeyError whose RetryAt is the soonest
// return.
//
// A Fallback is safe for concurrent use.
type Fallback struct {
	routes  []*fallbackRoute
	names   string // the routes' names, for errors: "groq/openrouter"
	clock   func() time.Time
	onRoute func(RouteEvent)
}

var _ http.RoundTripper = (*Fallback)(nil)

type fallbackRoute struct {
	Route
	rt        http.RoundTripper
	restUntil atomic.Int64 // Unix nanoseconds
}

// RouteEvent tells OnRoute how a request was routed: the route that
// answered ("" when none could), and the routes passed over before it.
type RouteEvent struct {
	Route   string
	Skipped []RouteSkip
	// Rest, when the answer that reached the caller was the answering
	// route's own failure, says why that route now rests and until when;
	// it is zero otherwise.
	Rest RouteSkip
}

// RouteSkip is a route passed over, why, and when it is back.
type RouteSkip struct {
	Route string
	// Reason is "resting" for a route still resting from an earlier
	// request, "no key" when its pool had none free, or the kind of the
	// failure it answered with ("rate", "quota", "auth", "transient").
	Reason string
	Until  time.Time
}

// A FallbackOption configures a Fallback.
type FallbackOption func(*Fallback)

// OnRoute sets a function told how each request was routed. It is called
// from the request's goroutine and should return quickly.
func OnRoute(f func(RouteEvent)) FallbackOption {
	return func(fb *Fallback) {
		if f != nil {
			fb.onRoute = f
		}
	}
}

// WithFallbackClock sets the clock routes rest by; the default is time.Now.
func WithFallbackClock(now func() time.Time) FallbackOption {
	return func(fb *Fallback) {
		if now != nil {
			fb.clock = now
		}
	}
}

// NewFallback returns a Fallback over routes, tried in order. It returns an
// error for no routes, a route without a pool or an http(s) URL, or two
// routes of one name.
func NewFallback(routes []Route, opts ...FallbackOption) (*Fallback, error) {
	if len(routes) == 0 {
		return nil, errors.New("keypool: fallback: no routes")
	}
	fb := &Fallback{clock: time.Now}
	for _, o := range opts {
		if o != nil {
			o(fb)
		}
	}
	names := map[string]bool{}
	for i, r := range routes {
		if r.Pool == nil {
			return nil, fmt.Errorf("keypool: fallback: route %d has no pool", i)
		}
		if r.URL == nil || (r.URL.Scheme != "http" && r.URL.Scheme != "https") || r.URL.Host == "" {
			return nil, fmt.Errorf("keypool: fallback: route %d needs an http or https URL", i)
		}
		if r.Name == "" {
			r.Name = r.URL.Host
		}
		if names[r.Name] {
			return nil, fmt.Errorf("keypool: fallback: two routes named %q", r.Name)
		}
		names[r.Name] = true
		fb.routes = append(fb.routes, &fallbackRoute{Route: r, rt: r.Pool.Transport(r.Base)})
		if fb.names != "" {
			fb.names += "/"
		}
		fb.names += r.Name
	}
	return fb, nil
}

// RoundTrip implements http.RoundTripper.
func (fb *Fallback) RoundTrip(req *http.Request) (*http.Response, error) {
	body := &replay{orig: req.Body, getBody: req.GetBody}
	if body.orig != nil && body.orig != http.NoBody {
		if _, err := body.read(bodyLength(req)); err != nil {
			body.discard()
			return nil, fmt.Errorf("keypool: reading request body: %w", err)
		}
	}
	var ev RouteEvent
	var soonest time.Time
	skip := func(r *fallbackRoute, reason string, until time.Time) {
		ev.Skipped = append(ev.Skipped, RouteSkip{Route: r.Name, Reason: reason, Until: until})
		if soonest.IsZero() || until.Before(soonest) {
			soonest = until
		}
	}
	sent := false
	for _, r := range fb.routes {
		now := fb.clock()
		if until := r.restUntil.Load(); until > now.UnixNano() {
			skip(r, "resting", time.Unix(0, until).UTC())
			continue
		}
		if sent && !body.replayable() {
			break // the body went to an earlier route and cannot be sent again
		}
		out, err := r.request(req, body)
		if err != nil {
			return nil, err
		}
		sent = true
		resp, err := r.rt.RoundTrip(out)
		var na *NoAvailableKeyError
		if errors.As(err, &na) {
			r.rest(na.RetryAt)
			skip(r, "no key", na.RetryAt)
			continue
		}
		if err != nil {
			return nil, err
		}
		var head []byte
		if resp.StatusCode >= 400 {
			head, resp.Body = peek(resp.Body, maxFailureBody)
		}
		v := classify(resp.StatusCode, resp.Header, head, now)
		if v.kind != KindNone {
			// The route's own failure: its pool could not route around it.
			d, _ := r.Pool.cfg.bench.benchFor(v, 0, now)
			r.rest(now.Add(d))
			if body.replayable() && r != fb.routes[len(fb.routes)-1] {
				skip(r, v.kind.String(), now.Add(d))
				drain(resp.Body)
				continue
			}
			ev.Rest = RouteSkip{Route: r.Name, Reason: v.kind.String(), Until: now.Add(d)}
		}
		resp.Request = req
		ev.Route = r.Name
		fb.report(ev)
		return resp, nil
	}
	body.discard()
	fb.report(ev)
	wait := time.Duration(0)
	if !soonest.IsZero() {
		wait = max(soonest.Sub(fb.clock()), 0)
	}
	return nil, &NoAvailableKeyError{Provider: fb.names, RetryAt: soonest, wait: wait}
}

func (fb *Fallback) report(ev RouteEvent) {
	if fb.onRoute != nil {
		fb.onRoute(ev)
	}
}

// rest sets the route aside until until, unless it already rests longer.
func (r *fallbackRoute) rest(until time.Time) {
	n := until.UnixNano()
	for {
		cur := r.restUntil.Load()
		if cur >= n || r.restUntil.CompareAndSwap(cur, n) {
			return
		}
	}
}

// request builds the request for the route: its URL, and its model names in
// the path and the body.
func (r *fallbackRoute) request(req *http.Request, body *replay) (*http.Request, error) {
	out := req.Clone(req.Context())
	u := *r.URL
	p := req.URL.Path
	if m := modelFromPath(p); m != "" {
		if to, ok := r.Models[m]; ok {
			p = strings.Replace(p, "/"+m, "/"+to, 1)
		}
	}
	u.Path = path.Join("/", r.URL.Path, p)
	if strings.HasSuffix(p, "/") && !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
	}
	u.RawPath = ""
	u.RawQuery = req.URL.RawQuery
	out.URL, out.Host = &u, ""
	switch {
	case body.orig == nil || body.orig == http.NoBody:
		return out, nil
	case body.isWhole:
		b := mapModel(body.whole, r.Models)
		out.Body = io.NopCloser(bytes.NewReader(b))
		out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
		out.ContentLength = int64(len(b))
		if out.Header.Get("Content-Length") != "" {
			out.Header.Set("Content-Length", strconv.Itoa(len(b)))
		}
		return out, nil
	}
	rc, err := body.next()
	if err != nil {
		return nil, err
	}
	out.Body, out.GetBody = rc, body.getBodyFunc()
	return out, nil
}

// mapModel returns body with its top-level "model" renamed by models, or
// body itself when models does not name it.
func mapModel(body []byte, models map[string]string) []byte {
	if len(models) == 0 {
		return body
	}
	start, end, ok := modelSpan(body)
	if !ok {
		return body
	}
	to, ok := models[string(body[start:end])]
	if !ok {
		return body
	}
	quoted, _ := json.Marshal(to) // a string always marshals
	out := make([]byte, 0, len(body)-(end-start)+len(quoted))
	out = append(out, body[:start-1]...)
	out = append(out, quoted...)
	return append(out, body[end+1:]...)
}

// modelSpan returns where the value of the last top-level "model" string
// lies in body, between its quotes.
func modelSpan(body []byte) (start, end int, ok bool) {
	var lex jsonLexer
	model := false
	for i := 0; i < len(body); {
		var tok jsonToken
		tok, i = lex.next(body, i)
		switch {
		case tok == tokKey:
			model = lex.depth == 1 && string(lex.keyBytes()) == "model"
		case tok == tokString && model && lex.depth == 1 && lex.done:
			start, end, ok = lex.start, lex.end, true
			model = false
		}
	}
	return start, end, ok
}

// RouteStatus is what a Fallback knows of one route.
type RouteStatus struct {
	Name string
	URL  string
	// RestingUntil is when the route is back; zero when it is not resting.
	RestingUntil time.Time
	Keys         []KeyStats
}

// Status returns each route's state, in order.
func (fb *Fallback) Status() []RouteStatus {
	now := fb.clock().UnixNano()
	out := make([]RouteStatus, 0, len(fb.routes))
	for _, r := range fb.routes {
		st := RouteStatus{Name: r.Name, URL: r.URL.Redacted(), Keys: r.Pool.Stats()}
		if until := r.restUntil.Load(); until > now {
			st.RestingUntil = time.Unix(0, until).UTC()
		}
		out = append(out, st)
	}
	return out
}

// Unbench lifts the benches of the key with the given ID in the named
// route's pool (Pool.Unbench) and ends the route's rest, so that the next
// request tries the route again: an operator's manual reset, for a key that
// was fixed. It returns an error for an unknown route or key, or a failing
// store.
func (fb *Fallback) Unbench(route, keyID string) error {
	for _, r := range fb.routes {
		if r.Name != route {
			continue
		}
		if err := r.Pool.Unbench(keyID); err != nil {
			return err
		}
		r.restUntil.Store(0)
		return nil
	}
	return fmt.Errorf("keypool: fallback: no route named %q", route)
}

// CloseIdleConnections closes the idle connections of every route's base.
func (fb *Fallback) CloseIdleConnections() {
	for _, r := range fb.routes {
		if c, ok := r.rt.(interface{ CloseIdleConnections() }); ok {
			c.CloseIdleConnections()
		}
	}
}
