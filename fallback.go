package keypool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"slices"
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
// route is benched until the moment it is back — its pool's RetryAt, or the
// reset the answer names — not for a fixed minute. A failure said only in
// words the request could have written (a 400 or 403 whose prose alone
// names it) benches no route: the request goes to the next route, and if
// that one fails it too, or none can take it, the answer goes back. A request is sent at most
// once per route, with its body replayed intact; a successful answer,
// streams included, passes through untouched. When every route is benched,
// the call fails with a *NoAvailableKeyError whose RetryAt is the soonest
// return.
//
// A Fallback is safe for concurrent use.
type Fallback struct {
	routes  []*fallbackRoute
	names   string // the routes' names, for errors: "groq/openrouter"
	clock   func() time.Time
	onRoute func(RouteEvent)
	alarm   *alarm // rings OnBenchEnd; nil without it
}

var _ http.RoundTripper = (*Fallback)(nil)

type fallbackRoute struct {
	Route
	rt           http.RoundTripper
	benchedUntil atomic.Int64 // Unix nanoseconds
	benchKind    atomic.Int64 // the Kind of the bench that ends at benchedUntil
	// unbenched is the pool's count of Unbench calls when the route was
	// benched: a key unbenched since ends the route's bench too.
	unbenched atomic.Uint64
}

// RouteEvent tells OnRoute how a request was routed: the route that
// answered ("" when none could), and the routes passed over before it.
type RouteEvent struct {
	Route   string
	Skipped []RouteSkip
	// Benched, when the answer that reached the caller was the answering
	// route's own failure, is the bench that failure gave the route: its
	// kind and when it ends. It is zero otherwise.
	Benched RouteSkip
}

// RouteSkip is a route passed over: why, and when it is back. Kind is the
// kind of the route's bench — KindRate when its pool had no key free (as a
// *NoAvailableKeyError is), else the kind of the failure it answered with.
// Earlier reports that an earlier request benched the route, so this one
// was not sent to it. A zero Until is a route passed over without a bench:
// its failure was said in words the request could have written (a 400 or
// 403 whose prose alone names it), which bench no route, or — with
// Disabled set — every key it could use is out of rotation.
type RouteSkip struct {
	Route   string
	Kind    Kind
	Earlier bool
	Until   time.Time
	// Disabled counts the route's keys passed over as out of rotation
	// (Pool.Disable).
	Disabled int
}

// NewFallback returns a Fallback over routes, tried in order. Its options
// are WithClock (the clock routes are benched by) and OnRoute. It returns an
// error for no routes, a route without a pool or an http(s) URL, two routes
// of one name, or an option that does not apply to a Fallback.
func NewFallback(routes []Route, opts ...Option) (*Fallback, error) {
	if len(routes) == 0 {
		return nil, errors.New("keypool: fallback: no routes")
	}
	cfg, err := newConfig(opts, forFallback)
	if err != nil {
		return nil, fmt.Errorf("keypool: fallback: %w", err)
	}
	fb := &Fallback{clock: cfg.clock, onRoute: cfg.onRoute, alarm: newAlarm(cfg.clock, cfg.onBenchEnd)}
	names := map[string]bool{}
	for i, r := range routes {
		if r.Pool == nil || r.Pool.store == nil {
			return nil, fmt.Errorf("keypool: fallback: route %d has no pool made by New", i)
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
	body, err := readReplay(req)
	if err != nil {
		return nil, err
	}
	var ev RouteEvent
	var soonest time.Time
	disabled := 0 // the keys the routes passed over as out of rotation
	skip := func(r *fallbackRoute, s RouteSkip) {
		s.Route = r.Name
		ev.Skipped = append(ev.Skipped, s)
		if !s.Until.IsZero() && (soonest.IsZero() || s.Until.Before(soonest)) {
			soonest = s.Until // a route that names no return says nothing of when one comes
		}
	}
	sent := false
	// held is a route's quoted failure (see quoted), returned if no
	// later route answers; heldAt its place in ev.Skipped.
	var held *http.Response
	heldAt := 0
	for _, r := range fb.routes {
		if !allowsRoute(req.Context(), r.Name) {
			continue // the caller's context names routes, and not this one (OnlyRoutes)
		}
		now := fb.clock()
		if until := r.benchedAt(); until > now.UnixNano() {
			// A key another replica enabled brings the route back, though
			// no request reaches its pool while it is benched.
			r.Pool.refreshDisabledAside(r.Pool.cfg.clock())
			if until = r.benchedAt(); until > now.UnixNano() {
				skip(r, RouteSkip{Kind: Kind(r.benchKind.Load()), Earlier: true, Until: time.Unix(0, until).UTC()})
				continue
			}
		}
		if sent && !body.replayable() {
			break // the body went to an earlier route and cannot be sent again
		}
		out, err := r.request(req, body)
		if err != nil {
			body.discard()
			return endHeld(held, nil, err)
		}
		sent = true
		resp, err := r.rt.RoundTrip(out)
		var na *NoAvailableKeyError
		if errors.As(err, &na) {
			disabled += na.disabled
			fb.bench(r, na.RetryAt, KindRate, now)
			skip(r, RouteSkip{Kind: KindRate, Until: na.RetryAt, Disabled: na.disabled})
			continue
		}
		if err != nil {
			return endHeld(held, nil, err)
		}
		var v verdict
		if resp.StatusCode >= 400 {
			// Below 400 an answer is never a failure (classify): its
			// headers need not be read again after the route's pool.
			classifyAnswer(&v, resp, now)
			if v.quoted {
				if data, whole := body.known(); !mayHaveWritten(v.echo, req, data, whole) {
					v.quoted = false // the request holds no word of it: the vendor's own
				}
			}
		}
		last := !body.replayable() || r == fb.routes[len(fb.routes)-1]
		switch {
		case v.quoted && held == nil && !last:
			// Words the request could have written bench no route: the
			// next vendor may read the request otherwise.
			heldAt, held = len(ev.Skipped), resp
			ev.Skipped = append(ev.Skipped, RouteSkip{Route: r.Name, Kind: v.kind})
			held.Request = req
			continue
		case v.kind == KindTransient && !r.Pool.single():
			// A bad moment its pool gave back: the pool benched the key it
			// was evidence about, and a second key's is the request's or
			// the vendor's (call.badMoment), not the route's. The next
			// route may serve it; none is benched for it.
			if !last {
				skip(r, RouteSkip{Kind: v.kind})
				drain(resp.Body)
				continue
			}
		case v.kind != KindNone && !v.quoted:
			// The route's own failure: its pool could not route around it.
			d, _ := r.Pool.cfg.bench.benchFor(v, 0, now)
			fb.bench(r, now.Add(d), v.kind, now)
			if !last {
				skip(r, RouteSkip{Kind: v.kind, Until: now.Add(d)})
				drain(resp.Body)
				continue
			}
			ev.Benched = RouteSkip{Route: r.Name, Kind: v.kind, Until: now.Add(d)}
		}
		resp.Request = req
		ev.Route = r.Name
		fb.report(ev)
		return endHeld(held, resp, nil)
	}
	body.discard()
	if held != nil {
		// No later route answered: the held answer is the request's.
		ev.Route = ev.Skipped[heldAt].Route
		ev.Skipped = slices.Delete(ev.Skipped, heldAt, heldAt+1)
	}
	fb.report(ev)
	na := noKeyError(fb.names, soonest, fb.clock())
	na.disabled = disabled
	return endHeld(held, nil, na)
}

// readReplay reads a request's body into memory, so that each route can be
// sent it.
func readReplay(req *http.Request) (*replay, error) {
	body := &replay{orig: req.Body, getBody: req.GetBody}
	if body.orig != nil && body.orig != http.NoBody {
		if _, err := body.read(bodyLength(req)); err != nil {
			body.discard()
			return nil, fmt.Errorf("keypool: reading request body: %w", err)
		}
	}
	return body, nil
}

func (fb *Fallback) report(ev RouteEvent) {
	if fb.onRoute != nil {
		fb.onRoute(ev)
	}
}

// bench sets route r aside until until for a failure of kind, unless it
// is already benched longer, and tells OnBenchEnd's alarm.
func (fb *Fallback) bench(r *fallbackRoute, until time.Time, kind Kind, now time.Time) {
	if r.benchedAt() <= now.UnixNano() {
		// A new bench, not a longer one: what the alarm holds of the
		// route is of a bench lifted by hand, whose end is not heard.
		fb.alarm.drop(r.Name, "", nil)
	}
	r.unbenched.Store(r.Pool.unbenched.Load())
	if extendTo(&r.benchedUntil, until.UnixNano()) {
		r.benchKind.Store(int64(kind))
		fb.alarm.set(Eviction{Provider: r.Name, Kind: kind, For: max(until.Sub(now), 0), Until: until}, false)
	}
}

// benchedAt returns when the route's bench ends, in Unix nanoseconds: 0
// when none holds it, or when a key of its pool was unbenched by hand
// (Pool.Unbench) since it was benched.
func (r *fallbackRoute) benchedAt() int64 {
	if r.unbenched.Load() != r.Pool.unbenched.Load() {
		r.benchedUntil.Store(0)
		return 0
	}
	return r.benchedUntil.Load()
}

// request builds the request for the route: its URL, and its model names in
// the path and the body.
func (r *fallbackRoute) request(req *http.Request, body *replay) (*http.Request, error) {
	// A shallow copy: the route's pool copies its header before it puts a
	// key on it, so only what changes here is copied.
	out := new(http.Request)
	*out = *req
	u := *r.URL
	p := req.URL.Path
	if m := modelFromPath(p); m != "" {
		if to, ok := r.Models[m]; ok {
			p = strings.Replace(p, "/"+m, "/"+to, 1)
		}
	}
	if climbs(p) {
		// "/v1/%2e%2e/%2e%2e/admin" would leave the route's base path,
		// with a key on it.
		return nil, fmt.Errorf("keypool: fallback: the path %q leaves the route's base path", truncate(req.URL.Path, 64))
	}
	u.Path = joinPath(r.URL.Path, p)
	if strings.HasSuffix(p, "/") && !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
	}
	u.RawPath = ""
	u.RawQuery = req.URL.RawQuery
	out.URL, out.Host = &u, ""
	switch {
	case body.orig == nil || body.orig == http.NoBody:
		return out, nil
	case body.whole:
		// The route's pool reads a memoryBody without copying it.
		b := mapModel(body.first.data, r.Models)
		out.Body = newMemoryBody(b)
		out.GetBody = func() (io.ReadCloser, error) { return newMemoryBody(b), nil }
		out.ContentLength = int64(len(b))
		if cl, ok := out.Header["Content-Length"]; ok && !sizeIs(cl, len(b)) {
			// A model the route names otherwise changed the body's length.
			out.Header = out.Header.Clone()
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

// climbs reports whether a path has a ".." segment: joined to a route's
// base path, it would climb out of it.
func climbs(p string) bool {
	for seg := range strings.SplitSeq(p, "/") {
		if seg == ".." {
			return true
		}
	}
	return false
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
	to, ok := models[string(jsonUnescape(body[start:end]))]
	if !ok {
		return body
	}
	literal, _ := json.Marshal(to) // a string always marshals
	out := make([]byte, 0, len(body)-(end-start)+len(literal))
	out = append(out, body[:start-1]...)
	out = append(out, literal...)
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
			model = lex.depth == 1 && string(jsonUnescape(lex.keyIn(body))) == "model"
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
	// BenchedUntil is when the route is back; zero when it is not benched.
	BenchedUntil time.Time
	Keys         []KeyStats
}

// Status returns each route's state, in order.
func (fb *Fallback) Status() []RouteStatus {
	now := fb.clock().UnixNano()
	out := make([]RouteStatus, 0, len(fb.routes))
	for _, r := range fb.routes {
		st := RouteStatus{Name: r.Name, URL: r.URL.Redacted(), Keys: r.Pool.Stats()}
		if until := r.benchedAt(); until > now {
			st.BenchedUntil = time.Unix(0, until).UTC()
		}
		out = append(out, st)
	}
	return out
}

// CloseIdleConnections closes the idle connections of every route's base.
func (fb *Fallback) CloseIdleConnections() {
	for _, r := range fb.routes {
		if c, ok := r.rt.(interface{ CloseIdleConnections() }); ok {
			c.CloseIdleConnections()
		}
	}
}

// sizeIs reports whether a Content-Length header's values say n: one
// value, n in decimal.
func sizeIs(values []string, n int) bool {
	if len(values) != 1 {
		return false
	}
	v, err := strconv.Atoi(values[0])
	return err == nil && v == n
}

// joinPath returns path.Join("/", base, p): without a copy of p when the
// base is the root and p a clean absolute path, the common route.
func joinPath(base, p string) string {
	if (base == "" || base == "/") && strings.HasPrefix(p, "/") {
		return path.Clean(p) // p itself when it is clean
	}
	return path.Join("/", base, p)
}

// routesKey is the context key of the routes OnlyRoutes names.
type routesKey struct{}

// OnlyRoutes returns a copy of ctx under which a Fallback sends a request
// only to the routes named (by Route.Name), in the Fallback's order; when
// none of them can take it, the call fails with a *NoAvailableKeyError as
// when every route is benched. No names leaves ctx as it is: every route.
func OnlyRoutes(ctx context.Context, names ...string) context.Context {
	if len(names) == 0 {
		return ctx
	}
	return context.WithValue(ctx, routesKey{}, slices.Clone(names))
}

// allowsRoute reports whether a request under ctx may go to the route
// named name (see OnlyRoutes).
func allowsRoute(ctx context.Context, name string) bool {
	names, ok := ctx.Value(routesKey{}).([]string)
	return !ok || slices.Contains(names, name)
}
