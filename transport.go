package keypool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/keypool-go/keypool/internal/windowspec"
	"go.opentelemetry.io/otel/trace"
)

// The bounds of what the transport reads itself.
const (
	// maxBodyScan is how much of a request body is read for its model and
	// token estimate.
	maxBodyScan = 1 << 20
	// maxDrain is how much of a discarded answer is read so that its
	// connection can be reused.
	maxDrain = 4 << 10
)

// transport is a Pool's http.RoundTripper.
type transport struct {
	pool *Pool
	base http.RoundTripper
}

var _ http.RoundTripper = (*transport)(nil)

// Transport returns an http.RoundTripper that sends each request through base
// with a key of the pool. A nil base is http.DefaultTransport. The transport
// is safe for concurrent use; it forwards CloseIdleConnections to base.
//
// It keeps the RoundTripper contract with one documented bend: when a key
// fails with a rate, quota, auth or transient answer and another key can take
// the request, it sends the request again with that key, each key at most
// once, and returns the last answer (or, when a key's answer was quoted —
// see the package doc — and no other key can take the request, that
// answer). It does so only when the body can be
// replayed (no body, http.NoBody, Request.GetBody, or a body small enough to
// read whole). When no key can take a request, it returns a
// *NoAvailableKeyError. A vendor's answer — a 429 included — is otherwise
// returned as is, with its body intact.
func (p *Pool) Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{pool: p, base: base}
}

// CloseIdleConnections closes the idle connections of the base transport if
// it has them.
func (t *transport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// RoundTrip implements http.RoundTripper: a request goes to the first key in
// order that can take it, then, while keys fail it and its body can be sent
// again, to the next (see Transport).
func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	p := t.pool
	if err := p.usable(); err != nil {
		closeRequestBody(req)
		return nil, err
	}
	if keyless, err := p.keyless(req); err != nil || keyless {
		if err != nil {
			closeRequestBody(req)
			return nil, err
		}
		return t.sendKeyless(req)
	}
	x := new(exchange)
	info, err := p.inspect(req, &x.body)
	if err != nil {
		return nil, err
	}
	r := request{req: req, body: &x.body, metered: &x.metered, out: &x.out, model: info.Model, call: call{spare: &x.res, maxOutput: info.MaxOutput}}
	if p.needTokens() {
		r.estimate = estimateUse(info, max(p.cfg.estimator(info), 0))
	}
	for attempt := 0; ; attempt++ {
		resp, again, err := t.attempt(&r, attempt)
		if !again {
			if r.held != nil {
				return endHeld(r.held.resp, resp, err)
			}
			return resp, err
		}
	}
}

// heldAnswer is a quoted failure (see quoted): the answer of a key that
// failed a request on words the request could have written, held unbenched
// while one more key tries the request.
type heldAnswer struct {
	resp  *http.Response
	key   *poolKey
	model string
	level int
	v     verdict
}

// endHeld returns what a request ends with, resp or err, given a quoted
// answer it held: that answer when no other key or route could take the
// request, else resp or err, the held answer discarded.
func endHeld(held, resp *http.Response, err error) (*http.Response, error) {
	switch {
	case held == nil:
		return resp, err
	case resp == nil && isNoKey(err):
		return held, nil
	}
	drain(held.Body)
	return resp, err
}

// exchange is the state of one request that outlives RoundTrip's frame —
// the body it sends on each attempt, the metered body of its answer, what
// its first admitted attempt recorded, and the request that attempt sends
// — allocated at once.
type exchange struct {
	body    replay
	metered meteredBody
	res     memReservation // the first take's, in the package's own stores
	out     http.Request   // the first attempt's, when it has the caller's context
}

// request is what one RoundTrip carries across its attempts.
type request struct {
	req     *http.Request
	body    *replay
	metered *meteredBody // its answer's body, when it is metered
	// out is where the first attempt's request may be made (see
	// auth.outgoing); nil once an attempt has had it.
	out      *http.Request
	model    string
	estimate usageReport
	// held is the first quoted failure of the request, if it had one.
	held *heldAnswer
	call
}

// attempt sends r once, with the next key that can take it. It returns the
// answer or error for the caller, or again when the key failed with a
// failure another key may not have and the request goes to the next key.
func (t *transport) attempt(r *request, attempt int) (resp *http.Response, again bool, err error) {
	p := t.pool
	ctx := r.req.Context()
	var l lease
	if r.held == nil {
		err = p.take(ctx, &r.call, r.model, r.estimate, &l)
	} else {
		err = p.acquire(ctx, &r.call, r.model, r.estimate, &l) // no wait in line: an answer is there to return
	}
	if err != nil {
		r.body.discard()
		return nil, false, err
	}
	actx, span := p.tel.startAttempt(ctx, l.key, r.model, attempt)
	out := p.cfg.auth.outgoing(actx, r.req, l.key.auth, r.out)
	r.out = nil
	if out.Body, err = r.body.next(); err != nil {
		p.release(ctx, &l)
		p.probed(&l, false)
		endAttempt(span, 0, KindNone, 0, err)
		return nil, false, err
	}
	out.GetBody = r.body.getBodyFunc()
	l.key.sent.Add(1)
	resp, err = t.base.RoundTrip(out)
	if err == nil && resp == nil {
		err = errors.New("keypool: base RoundTripper returned neither an answer nor an error")
	}
	if err != nil {
		again, err = t.noAnswer(r, &l, span, err)
		return nil, again, err
	}
	resp.Request = r.req // never hand out the clone that carries the key
	p.cfg.auth.unechoed(resp.Header, l.key.Secret)
	now := p.cfg.clock()
	v := classifyAnswer(resp, now)
	if v.quoted {
		if body, whole := r.body.known(); !mayHaveWritten(v.echo, r.req, body, whole) {
			v.quoted = false // the request holds no word of it: the vendor's own
		}
	}
	until := p.observe(ctx, &l, &v, now)
	r.sooner(until)
	var benched time.Duration // most answers bench nothing, and time.Sub is no small sum
	if !until.IsZero() {
		benched = max(until.Sub(now), 0)
	}
	endAttempt(span, resp.StatusCode, v.kind, benched, nil)
	if v.quoted && r.held == nil && !p.single() && r.body.replayable() {
		// Words the request could have written: one more key tries it,
		// and this answer is held to return if none can.
		c := l.charge()
		p.settle(ctx, &c, usageReport{})
		r.tried.add(l.key.index)
		r.held = &heldAnswer{resp: resp, key: l.key, model: l.claim.Model, level: l.grant.Level, v: v}
		return nil, true, nil
	}
	if r.held != nil && v.kind == KindNone && resp.StatusCode < 300 {
		// Another key served the request: the held answer was its key's.
		h := r.held
		p.benchKey(ctx, h.key, h.model, h.level, &h.v, now)
	}
	if v.kind == KindNone || v.oversized || p.single() || !r.body.replayable() || v.quoted {
		// A second quoted failure is the request's: it goes back.
		p.meter(&l, resp, r.metered)
		return resp, false, nil
	}
	// A key-scoped failure: the vendor refused the request, so it used
	// no tokens. Try the next key.
	c := l.charge()
	p.settle(ctx, &c, usageReport{})
	r.tried.add(l.key.index)
	drain(resp.Body)
	return nil, true, nil
}

// noAnswer ends an attempt that got no answer, only err: nothing to bench
// unless the key itself could not go on the request. The request never
// counted — unless the caller gave up while the vendor had it, which the
// vendor may count: then its slot stays taken. It reports whether the
// request goes on to the next key.
func (t *transport) noAnswer(r *request, l *lease, span trace.Span, err error) (again bool, _ error) {
	p := t.pool
	ctx := r.req.Context()
	if ctx.Err() == nil {
		p.release(ctx, l)
	}
	p.probed(l, false)
	err = p.redact(err, l.key)
	v := verdict{}
	if p.cfg.auth.refused(err) {
		// The key itself could not go on a request: it is the key's
		// fault, as a revoked key is.
		v.kind = KindAuth
		r.sooner(p.observe(ctx, l, &v, p.cfg.clock()))
	}
	endAttempt(span, 0, v.kind, 0, err)
	if v.kind != KindNone && !p.single() && r.body.replayable() {
		r.tried.add(l.key.index)
		return true, nil
	}
	return false, err
}

// classifyAnswer classifies an answer at now, reading the start of a
// failure's body, which the caller still reads whole.
func classifyAnswer(resp *http.Response, now time.Time) verdict {
	if resp.Body == nil {
		resp.Body = http.NoBody // as http.Client reads a RoundTripper's nil Body
	}
	var head []byte
	if resp.StatusCode >= 400 {
		head, resp.Body = peek(resp.Body, maxFailureBody)
	}
	return classify(resp.StatusCode, resp.Header, head, now)
}

// closeRequestBody closes a request's body, as a RoundTripper must on every
// path.
func closeRequestBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// release gives back what a lease recorded: its request never reached the
// vendor.
func (p *Pool) release(ctx context.Context, l *lease) {
	p.storeResult(opSettle, l.grant.Reservation.Release(ctx))
}

// settle settles a lease's charge at what its request used — tokens, and
// their cost where the model has a price — when the pool counts either,
// and returns what it counted: u within what the request could have used
// (usageReport.clamp).
func (p *Pool) settle(ctx context.Context, c *charge, u usageReport) usageReport {
	if !p.needTokens() && c.price == nil {
		return u
	}
	u = u.clamp(c.bound)
	var cost int64
	if c.price != nil {
		cost = c.price.cost(u)
		p.tel.spent(ctx, c.key, c.model, cost)
	}
	p.storeResult(opSettle, c.reservation.Settle(ctx, u.total(), cost))
	return u
}

// meter arranges for what an answer reports it used to replace the
// estimate of its lease: as the caller reads a successful body, through m,
// or at once (nothing used) for an answer that is not a success.
func (p *Pool) meter(l *lease, resp *http.Response, m *meteredBody) {
	if !p.needTokens() && l.price == nil {
		return
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		c := l.charge()
		p.settle(resp.Request.Context(), &c, usageReport{})
		return
	}
	// Fields set one by one, m being zero: a struct written whole into the
	// heap goes through the collector's bulk barrier while it marks.
	m.pool, m.charge = p, l.charge()
	m.start(resp.Body, resp.Header, m)
	resp.Body = m
}

// meteredBody is a successful answer's body, read for the tokens it reports,
// which then settle its lease's charge.
type meteredBody struct {
	usageBody
	pool   *Pool
	charge charge
}

func (m *meteredBody) settle(u usageReport, ok bool) {
	if !ok {
		return // the estimate stands
	}
	ctx := context.Background() // the request's context may be over by now
	u = m.pool.settle(ctx, &m.charge, u)
	m.pool.tel.used(ctx, m.charge.key, u.total())
}

// redact returns err with the key's secret removed from its text, for a key
// put in a URL query, where errors may quote the URL.
func (p *Pool) redact(err error, k *poolKey) error {
	if p.cfg.auth.style != authQuery || !strings.Contains(err.Error(), k.Secret) {
		return err
	}
	return &redactedError{err: err, secret: k.Secret}
}

// redactedError is an error whose text had a secret in it.
type redactedError struct {
	err    error
	secret string
}

func (e *redactedError) Error() string {
	return strings.ReplaceAll(e.err.Error(), e.secret, "[redacted]")
}

func (e *redactedError) Unwrap() error { return e.err }

// peek reads up to n bytes of body and returns them with a body that reads
// them again, then the rest.
func peek(body io.ReadCloser, n int64) ([]byte, io.ReadCloser) {
	head, _ := io.ReadAll(io.LimitReader(body, n))
	return head, &prefixedBody{r: io.MultiReader(bytes.NewReader(head), body), c: body}
}

type prefixedBody struct {
	r io.Reader
	c io.Closer
}

func (b *prefixedBody) Read(p []byte) (int, error) { return b.r.Read(p) }
func (b *prefixedBody) Close() error               { return b.c.Close() }

// drain reads a little of a discarded answer, so its connection can be
// reused, and closes it.
func drain(body io.ReadCloser) {
	_, _ = io.CopyN(io.Discard, body, maxDrain)
	_ = body.Close()
}

// bodyLength returns the length of a request's body, or -1 when unknown: a
// zero ContentLength with a body means unknown.
func bodyLength(req *http.Request) int64 {
	if req.ContentLength == 0 {
		return -1
	}
	return req.ContentLength
}

// inspect reads what the pool needs of a request before sending it — the
// model, and what a token estimate needs — without consuming the body, and
// sets b, which must be zero, to send the body on each attempt.
func (p *Pool) inspect(req *http.Request, b *replay) (RequestInfo, error) {
	// Fields set one by one: a struct written whole into the heap goes
	// through the collector's bulk barrier while it marks.
	b.orig, b.getBody = req.Body, req.GetBody
	var info RequestInfo
	if p.cfg.modelFunc != nil {
		info.Model = p.cfg.modelFunc(req)
	} else if req.URL != nil {
		info.Model = modelFromPath(req.URL.Path)
	}
	if b.orig == nil || b.orig == http.NoBody || (info.Model != "" && !p.needTokens()) {
		return info, p.checkModel(info.Model, b)
	}
	data, err := b.read(bodyLength(req))
	if err != nil {
		b.discard()
		return info, fmt.Errorf("keypool: reading request body: %w", err)
	}
	scanned := scanRequest(data, &p.models)
	if rest := req.ContentLength - int64(len(data)); rest > 0 {
		scanned.PromptBytes += rest // a body longer than what was read counts as prompt
	}
	if info.Model == "" {
		info.Model = scanned.Model
	}
	scanned.Model = info.Model
	return scanned, p.checkModel(info.Model, b)
}

// checkModel returns an error for a model name no store may keep (see
// windowspec.CheckModel), closing the request's body. A name the pool's
// names hold has been checked.
func (p *Pool) checkModel(model string, b *replay) error {
	if p.models.holds(model) {
		return nil
	}
	if err := windowspec.CheckModel(model); err != nil {
		b.discard()
		return fmt.Errorf("keypool: %s: %w", p.provider, err)
	}
	return nil
}
