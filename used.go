package keypool

import (
	"context"
	"slices"
)

// A request's context may carry what the caller wants of it beyond the
// pool's own rules: the routes a Fallback may send it to (OnlyRoutes), and
// a function told what it used once its answer settles (NotifySettle). A
// proxy that serves several clients — each with its own windows, budget
// and routes — holds them with these, the windows in the pool's Store.

type usedKey struct{}

// NotifySettle returns a copy of ctx under which a Pool's Transport (and so
// a Fallback) tells f what a request sent with it used, each time the pool
// settles it: at zero when a key refused it or its answer was not a
// success, and at what the vendor reported once a success's body is read
// (or closed) — with its Cost, unlike OnSettle, and whether or not the
// pool counts tokens itself. The last call counts; an answer that reports
// no usage settles nothing, so f may not be called for it. f runs on the
// goroutine that reads the body or sends the request, and must be quick;
// it never receives a secret. A nil f changes nothing.
func NotifySettle(ctx context.Context, f func(Settlement)) context.Context {
	if f == nil {
		return ctx
	}
	return context.WithValue(ctx, usedKey{}, f)
}

// usedOf returns the function NotifySettle put in ctx, or nil.
func usedOf(ctx context.Context) func(Settlement) {
	f, _ := ctx.Value(usedKey{}).(func(Settlement))
	return f
}

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

// ReadRequest returns what a Pool reads from a request before sending it,
// given its URL path and its body (or the start of it): the model — from the
// path (Gemini's /models/{model}:…, Azure's /deployments/{name}/), else the
// JSON body's top-level "model" — and what DefaultEstimate counts. It reads
// the body in one pass, with the pool's own reader, and never panics on
// malformed JSON.
func ReadRequest(path string, body []byte) RequestInfo {
	info, _ := readRequest(body, nil)
	if m := modelFromPath(path); m != "" {
		info.Model = m
	}
	return info
}

// Reserve returns what a request read as info, estimated at estimate
// tokens, can cost at most at price p, in millionths of a US dollar, as a
// Pool reserves it against a Budget: its estimated input and its output
// bound (info.MaxOutput, at most p.MaxOutput). When nothing bounds its
// output it returns the cost of the estimate and unbounded, as a Claim's
// Unbounded says.
func (p Price) Reserve(info RequestInfo, estimate int64) (cost int64, unbounded bool) {
	return p.reserve(estimateUse(info, max(estimate, 0)), info.MaxOutput)
}
