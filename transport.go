package keypool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
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
	info, conv, pinned, err := p.inspect(req, &x.body)
	if err != nil {
		return nil, err
	}
	r := request{req: req, body: &x.body, metered: &x.metered, out: &x.out, model: info.Model,
		call: call{spare: &x.res, maxOutput: info.MaxOutput, completions: info.Completions, conversation: conv, pinned: pinned,
			cut: x.body.first.data != nil && !x.body.whole}}
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
	defer func() {
		if v := recover(); v != nil {
			// A hook (OnAttempt, OnEvict, OnRateLimit) panicked: the key's
			// place and the answer's connection go back before the panic
			// goes on.
			p.landLease(&l)
			p.probed(&l, false)
			if resp != nil && resp.Body != nil {
				_ = resp.Body.Close()
			}
			panic(v)
		}
	}()
	actx, span := p.tel.startAttempt(ctx, l.key, r.model, attempt)
	out := p.cfg.auth.outgoing(actx, r.req, l.key.auth, r.out)
	r.out = nil
	if out.Body, err = r.body.next(); err != nil {
		p.release(ctx, &l)
		p.landLease(&l)
		p.probed(&l, false)
		p.attempted(ctx, span, Attempt{KeyID: l.key.ID, Model: r.model, Failover: attempt}, err)
		return nil, false, err
	}
	out.GetBody = r.body.getBodyFunc()
	l.key.sent.Add(1)
	resp, err = t.base.RoundTrip(out)
	if err == nil && resp == nil {
		err = errors.New("keypool: base RoundTripper returned neither an answer nor an error")
	}
	if err != nil {
		again, err = t.noAnswer(r, &l, span, attempt, err)
		return nil, again, err
	}
	resp.Request = r.req // never hand out the clone that carries the key
	p.cfg.auth.unechoed(resp.Header, l.key.Secret)
	now := p.cfg.clock()
	var v verdict
	classifyAnswer(&v, resp, now)
	if v.quoted {
		if body, whole := r.body.known(); !mayHaveWritten(v.echo, r.req, body, whole) {
			v.quoted = false // the request holds no word of it: the vendor's own
		}
	}
	r.badMoment(&v)
	until := p.observe(ctx, &l, &v, now)
	r.sooner(until)
	p.attempted(ctx, span, Attempt{KeyID: l.key.ID, Model: r.model, Failover: attempt, Status: resp.StatusCode, Kind: v.kind, Bench: benchLength(until, now)}, nil)
	if v.quoted && r.held == nil && !p.single() && r.body.replayable() {
		// Words the request could have written: one more key tries it,
		// and this answer is held to return if none can.
		c := l.charge()
		p.settle(ctx, &c, usageReport{})
		r.tried.add(l.key.index)
		r.held = &heldAnswer{resp: resp, key: l.key, model: l.claim.Model, level: l.grant.Level, v: v}
		p.landLease(&l) // the key's work is done: its answer waits in memory
		return nil, true, nil
	}
	if r.held != nil && v.kind == KindNone && resp.StatusCode < 300 {
		// Another key served the request: the held answer was its key's.
		h := r.held
		p.benchKey(ctx, h.key, h.model, h.level, &h.v, now)
	}
	if v.kind == KindNone || v.oversized || p.single() || !r.body.replayable() || v.quoted || v.again {
		// A second quoted failure is the request's, and so is a second
		// bad moment: it goes back.
		p.meter(&l, resp, r.metered)
		if l.flying {
			resp.Body = &landingBody{ReadCloser: resp.Body, pool: p, key: l.key}
		}
		return resp, false, nil
	}
	// A key-scoped failure: the vendor refused the request, so it used
	// no tokens. Try the next key.
	c := l.charge()
	p.settle(ctx, &c, usageReport{})
	r.tried.add(l.key.index)
	drain(resp.Body)
	p.landLease(&l)
	return nil, true, nil
}

// landingBody is an answer's body that gives back its request's place in
// its key's flights when it is read to its end or closed, once.
type landingBody struct {
	io.ReadCloser
	pool   *Pool
	key    *poolKey
	landed atomic.Bool
}

func (b *landingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.land()
	}
	return n, err
}

func (b *landingBody) Close() error {
	err := b.ReadCloser.Close()
	b.land()
	return err
}

func (b *landingBody) land() {
	if b.landed.CompareAndSwap(false, true) {
		b.pool.land(b.key)
	}
}

// noAnswer ends an attempt that got no answer, only err: nothing to bench
// unless the key itself could not go on the request. The request never
// counted — unless the caller gave up while the vendor had it, which the
// vendor may count: then its slot stays taken. It reports whether the
// request goes on to the next key.
func (t *transport) noAnswer(r *request, l *lease, span trace.Span, attempt int, err error) (again bool, _ error) {
	p := t.pool
	ctx := r.req.Context()
	if ctx.Err() == nil {
		p.release(ctx, l)
	}
	p.landLease(l)
	p.probed(l, false)
	err = p.redact(err, l.key)
	v := verdict{}
	if p.cfg.auth.refused(err) {
		// The key itself could not go on a request: it is the key's
		// fault, as a revoked key is.
		v.kind = KindAuth
		r.sooner(p.observe(ctx, l, &v, p.cfg.clock()))
	}
	p.attempted(ctx, span, Attempt{KeyID: l.key.ID, Model: r.model, Failover: attempt, Kind: v.kind}, err)
	if v.kind != KindNone && !p.single() && r.body.replayable() {
		r.tried.add(l.key.index)
		return true, nil
	}
	return false, err
}

// classifyAnswer classifies an answer at now into v, which must be zero,
// reading the start of a failure's body, which the caller still reads
// whole.
func classifyAnswer(v *verdict, resp *http.Response, now time.Time) {
	if resp.Body == nil {
		resp.Body = http.NoBody // as http.Client reads a RoundTripper's nil Body
	}
	var head []byte
	if resp.StatusCode >= 400 {
		head, resp.Body = peek(resp.Body, maxFailureBody)
	}
	classifyInto(v, resp.StatusCode, resp.Header, head, now)
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
	return p.settleFor(ctx, c, u, usedOf(ctx))
}

// settleFor is settle, telling used (NotifySettle; nil: no one) what it
// counted.
func (p *Pool) settleFor(ctx context.Context, c *charge, u usageReport, used func(Settlement)) usageReport {
	if !p.needTokens() && c.price == nil {
		if used != nil {
			used(Settlement{Provider: p.provider, KeyID: c.key.ID, Model: c.model, Tokens: u.clamp(c.bound).total()})
		}
		return u
	}
	u = u.clamp(c.bound)
	var cost int64
	if c.price != nil {
		cost = c.price.cost(u)
		p.tel.spent(ctx, c.key, c.model, cost)
	}
	p.storeResult(opSettle, c.reservation.Settle(ctx, u.total(), cost))
	if used != nil {
		used(Settlement{Provider: p.provider, KeyID: c.key.ID, Model: c.model, Tokens: u.total(), Cost: cost})
	}
	return u
}

// standEstimate settles charge c, whose answer reported no usage (a
// stream without include_usage), at what its request recorded: its
// estimate stands in the windows, and what it reserved of a budget is
// spent — not held as if the request were still in flight until the
// period ends, which would refuse the key's next requests as held by one
// in flight (a second's retry, all day). NotifySettle hears nothing: the
// vendor said nothing.
func (p *Pool) standEstimate(ctx context.Context, c *charge) {
	if p.needTokens() || c.price != nil { // else the reservation holds no tokens or cost
		p.storeResult(opSettle, c.reservation.Settle(ctx, c.tokens, c.cost))
	}
}

// meter arranges for what an answer reports it used to replace the
// estimate of its lease: as the caller reads a successful body, through m,
// or at once (nothing used) for an answer that is not a success. Under
// affinity, the body of an answer that may make what later requests name
// (namesConversations) is read for its ID too.
func (p *Pool) meter(l *lease, resp *http.Response, m *meteredBody) {
	used := usedOf(resp.Request.Context())
	names := p.affinity != nil && namesConversations(resp.Request)
	if !p.needTokens() && l.price == nil && used == nil && !names {
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
	var s settler = m
	if used != nil {
		// Apart from m, which fits the exchange in its size class: only a
		// request with NotifySettle pays for it.
		s = &notifiedBody{m: m, used: used}
	}
	m.start(resp.Body, resp.Header, s)
	if m.scan != nil {
		m.scan.usage.wantNamed = names
	}
	resp.Body = m
}

// meteredBody is a successful answer's body, read for the tokens it reports,
// which then settle its lease's charge.
type meteredBody struct {
	usageBody
	pool   *Pool
	charge charge
}

func (m *meteredBody) settle(u usageReport, ok bool, named conversation) {
	m.settleFor(u, ok, named, nil)
}

// notifiedBody is the settler of a metered body whose request's context
// carries a NotifySettle function.
type notifiedBody struct {
	m    *meteredBody
	used func(Settlement)
}

func (n *notifiedBody) settle(u usageReport, ok bool, named conversation) {
	n.m.settleFor(u, ok, named, n.used)
}

// settleFor settles the body's charge at u, telling used (nil: no one),
// and keeps the conversation the answer named (0: none) on its key.
func (m *meteredBody) settleFor(u usageReport, ok bool, named conversation, used func(Settlement)) {
	ctx := context.Background() // the request's context may be over by now
	if named != 0 {
		m.pool.named(ctx, named, m.charge.key)
	}
	if !ok {
		m.pool.standEstimate(ctx, &m.charge)
		return
	}
	u = m.pool.settleFor(ctx, &m.charge, u, used)
	if m.pool.needTokens() || m.charge.price != nil {
		// Metered for the pool's own count, not only for NotifySettle's.
		m.pool.counted(ctx, m.charge.key, m.charge.model, u.total())
	}
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
// model, what a token estimate needs, and its conversation (see
// WithAffinity) — without consuming the body, and sets b, which must be
// zero, to send the body on each attempt.
func (p *Pool) inspect(req *http.Request, b *replay) (RequestInfo, conversation, bool, error) {
	// Fields set one by one: a struct written whole into the heap goes
	// through the collector's bulk barrier while it marks.
	b.orig, b.getBody = req.Body, req.GetBody
	var info RequestInfo
	if p.cfg.modelFunc != nil {
		info.Model = p.cfg.modelFunc(req)
	} else if req.URL != nil {
		info.Model = modelFromPath(req.URL.Path)
	}
	var conv conversation
	if p.affinity != nil {
		if f := p.cfg.affinity.of; f != nil {
			conv = conversationOf(f(req))
		}
		if v := req.Header["X-Session-Id"]; conv == 0 && len(v) > 0 {
			conv = conversationOf(v[0]) // the canonical name, looked up as it is
		}
	}
	// A Responses request is read under affinity whatever else the pool
	// knows: its previous_response_id or conversation only one key's
	// organisation can answer.
	known := info.Model != "" && !p.needTokens() && (p.affinity == nil || !namesConversations(req))
	if b.orig == nil || b.orig == http.NoBody || known {
		return info, conv, false, p.checkModel(info.Model, b)
	}
	data, err := b.read(bodyLength(req))
	if err != nil {
		b.discard()
		return info, 0, false, fmt.Errorf("keypool: reading request body: %w", err)
	}
	scanned, named, pinned := readRequest(data, &p.models)
	if rest := req.ContentLength - int64(len(data)); rest > 0 {
		scanned.PromptBytes += rest // a body longer than what was read counts as prompt
	}
	if info.Model == "" {
		info.Model = scanned.Model
	}
	switch {
	case p.affinity == nil:
		pinned = false
	case conv == 0 || pinned:
		// A name the vendor keeps for one organisation outranks the
		// caller's and the header's: only that organisation's keys can
		// answer it.
		conv = named
	}
	scanned.Model = info.Model
	return scanned, conv, pinned, p.checkModel(info.Model, b)
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

// Keys go only to the vendor: to the hosts of WithHosts, or else to the host
// a request was first sent to. http.Client calls a RoundTripper again for
// every hop of a redirect, so a transport that put its key on every request
// would hand the key to whatever host a redirect named — net/http strips
// Authorization on such a hop, but not the header another vendor reads, nor
// a key in the URL.

// hostKey returns u's host as hosts are compared: lower case, with the
// scheme's default port when none is given.
func hostKey(u *url.URL) string {
	host, port := strings.ToLower(u.Hostname()), u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	return net.JoinHostPort(host, port)
}

// parseHost returns the host key of an entry of WithHosts: a host name
// with or without a port ("api.openai.com", "localhost:8080"); without one
// it stands for both default ports.
func parseHost(h string) ([]string, error) {
	if h == "" || strings.ContainsAny(h, "/?#@ ") {
		return nil, fmt.Errorf("%q is not a host name", h)
	}
	if _, _, err := net.SplitHostPort(h); err == nil {
		return []string{hostKey(&url.URL{Host: h})}, nil
	}
	return []string{hostKey(&url.URL{Scheme: "http", Host: h}), hostKey(&url.URL{Scheme: "https", Host: h})}, nil
}

// maxRedirects bounds the walk back along a redirect chain.
const maxRedirects = 64

// firstRequest returns the request a chain of redirects began with: req
// itself when it is no redirect.
func firstRequest(req *http.Request) *http.Request {
	for range maxRedirects {
		if req.Response == nil || req.Response.Request == nil {
			break
		}
		req = req.Response.Request
	}
	return req
}

// keyless reports whether req must go without a key — a redirect to a host
// keys do not go to — or returns an error for a request the pool must not
// send at all: one sent first to a host outside WithHosts.
func (p *Pool) keyless(req *http.Request) (bool, error) {
	if req.URL == nil {
		return false, nil // net/http refuses it
	}
	if len(p.cfg.hosts) > 0 {
		if p.cfg.hosts[hostKey(req.URL)] {
			return false, nil
		}
		if req.Response != nil {
			return true, nil
		}
		return false, fmt.Errorf("keypool: %s: %s is not a host of the pool (WithHosts): no key goes there", p.provider, req.URL.Host)
	}
	if req.Response == nil {
		return false, nil
	}
	first := firstRequest(req)
	return first.URL == nil || hostKey(first.URL) != hostKey(req.URL), nil
}

// sendKeyless sends a redirected request on to a host keys do not go to, as
// net/http would: with no key of the pool, and without the header or
// parameter keys go in. It counts in no window.
func (t *transport) sendKeyless(req *http.Request) (*http.Response, error) {
	out := req.Clone(req.Context())
	t.pool.cfg.auth.strip(out)
	resp, err := t.base.RoundTrip(out)
	if resp != nil {
		resp.Request = req
	}
	return resp, err
}

// replay hands a request's body to each attempt of a RoundTrip. A body read
// whole (see read) is sent from memory; otherwise the first attempt gets the
// caller's body and later ones a copy from Request.GetBody.
type replay struct {
	orig    io.ReadCloser // the caller's body: nil or http.NoBody for none
	getBody func() (io.ReadCloser, error)
	// first.data is what was read of the body: all of it when whole, else
	// the start of a body too long to read whole; first is the first
	// attempt's reader of a body read whole. (One slice for both keeps an
	// exchange in the allocator's 640-byte class: see TestExchangeSize.)
	first  memoryBody
	whole  bool
	handed bool // orig, or first, has been handed to an attempt
}

// memoryBody reads a body held in memory. The pool reads one it is handed
// (by a Fallback, or as a GetBody of its own) without copying it.
type memoryBody struct {
	data []byte
	off  int // what has been read of data
}

func newMemoryBody(data []byte) *memoryBody { return &memoryBody{data: data} }

func (m *memoryBody) Read(p []byte) (int, error) {
	if m.off >= len(m.data) {
		return 0, io.EOF
	}
	n := copy(p, m.data[m.off:])
	m.off += n
	return n, nil
}

// WriteTo writes the rest of the body to w in one call, as bytes.Reader
// does, so that io.Copy needs no buffer for it.
func (m *memoryBody) WriteTo(w io.Writer) (int64, error) {
	rest := m.data[min(m.off, len(m.data)):]
	if len(rest) == 0 {
		return 0, nil
	}
	n, err := w.Write(rest)
	n = min(max(n, 0), len(rest)) // a Writer that says more than it was given wrote it all
	m.off += n
	if err == nil && n < len(rest) {
		err = io.ErrShortWrite
	}
	return int64(n), err
}

func (*memoryBody) Close() error { return nil }

// read returns up to maxBodyScan bytes of the body without using it up: the
// body is read into memory, whole when it fits, and sent from there on every
// attempt; a longer body keeps its start for the first attempt. It never
// reads a copy from GetBody for this, since some GetBody functions (go-
// retryablehttp's, for one) rewind the very reader the request holds. n is
// the body's length when known, else -1.
func (b *replay) read(n int64) ([]byte, error) {
	if m, ok := b.orig.(*memoryBody); ok && m.off == 0 && len(m.data) <= maxBodyScan {
		b.first.data, b.whole = m.data, true
		return m.data, nil
	}
	data, err := readAtMost(b.orig, n, maxBodyScan)
	if err != nil {
		return nil, err
	}
	b.first.data = data
	if len(data) <= maxBodyScan {
		b.whole = true
		_ = b.orig.Close()
		return data, nil
	}
	return data[:maxBodyScan], nil
}

// readAtMost reads r to its end, or to limit+1 bytes when it is longer. n is
// r's length when known (else -1), so that a body of known length is read
// into one buffer of its size.
func readAtMost(r io.Reader, n int64, limit int) ([]byte, error) {
	if n < 0 || n > int64(limit) {
		return io.ReadAll(io.LimitReader(r, int64(limit)+1))
	}
	buf := make([]byte, n, n+1)
	if k, err := io.ReadFull(r, buf); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return buf[:k], nil // shorter than it said: the vendor will judge
		}
		return nil, err
	}
	// The one byte more that tells a body longer than it said goes in
	// buf's spare capacity: a local array would escape to the heap.
	for {
		m, err := r.Read(buf[n : n+1])
		if m > 0 {
			// Longer than it said: read on as a body of unknown length.
			rest, err := io.ReadAll(io.LimitReader(r, int64(limit)-n))
			return append(buf[:n+1], rest...), err
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// replayable reports whether the body can be sent again.
// known returns the body as the pool holds it, and whether that is all of
// it: a request without a body is known to hold nothing.
func (b *replay) known() ([]byte, bool) {
	return b.first.data, b.orig == nil || b.orig == http.NoBody || b.whole
}

func (b *replay) replayable() bool {
	return b.orig == nil || b.orig == http.NoBody || b.getBody != nil || b.whole
}

// next returns the body for the next attempt.
func (b *replay) next() (io.ReadCloser, error) {
	switch {
	case b.orig == nil || b.orig == http.NoBody:
		return b.orig, nil
	case b.whole && !b.handed:
		b.handed = true
		return &b.first, nil
	case b.whole:
		return b.rewindBody()
	case !b.handed:
		b.handed = true
		if b.first.data != nil {
			return &prefixedBody{r: io.MultiReader(bytes.NewReader(b.first.data), b.orig), c: b.orig}, nil
		}
		return b.orig, nil
	case b.getBody != nil:
		return b.getBody()
	}
	return nil, errors.New("keypool: request body cannot be sent again")
}

// rewindBody returns a new reader of a body read whole.
func (b *replay) rewindBody() (io.ReadCloser, error) {
	return newMemoryBody(b.first.data), nil
}

// getBodyFunc returns what an attempt's Request.GetBody should be: the
// caller's, which gives the same bytes, or else one over the body read
// whole (made for each attempt, most requests' only one: kept, it would
// take an exchange past the allocator's 640-byte class).
func (b *replay) getBodyFunc() func() (io.ReadCloser, error) {
	if !b.whole || b.getBody != nil {
		return b.getBody
	}
	return b.rewindBody
}

// discard closes the caller's body if no attempt has taken it, as a
// RoundTripper must on every path.
func (b *replay) discard() {
	if b.orig != nil && b.orig != http.NoBody && !b.handed && !b.whole {
		_ = b.orig.Close()
	}
}

// auth is how a key is put on a request.
type auth struct {
	style  authStyle
	name   string // the canonical header name, or the query parameter
	prefix string // before the secret in a header value; "param=" for a query
}

type authStyle int

const (
	authHeader authStyle = iota
	authQuery
)

// value returns what apply puts on a request for secret, built once per key.
func (a auth) value(secret string) []string {
	if a.style == authQuery {
		return []string{a.prefix + url.QueryEscape(secret)}
	}
	return []string{a.prefix + secret}
}

// outgoing returns the request one attempt sends: req under ctx, with the
// key's value put on it in place of any the request had for the same header
// or parameter, in any spelling. req is left as it was. When ctx is req's
// own context and into is not nil, the copy is made in into, which the
// caller allocated with other things, rather than in a request of its own.
//
// It copies only what it changes, where Request.Clone copies every field
// the request points to: the header, and the URL for a key in the query.
// The rest — the trailer, the form, the transfer encoding — is the
// caller's, which no RoundTripper may change.
func (a auth) outgoing(ctx context.Context, req *http.Request, value []string, into *http.Request) *http.Request {
	var out *http.Request
	if into != nil && ctx == req.Context() {
		*into = *req // as WithContext copies it, the context the same
		out = into
	} else {
		out = req.WithContext(ctx)
	}
	if a.style == authQuery {
		out.Header = cloneHeader(req.Header, "", nil)
		if req.URL != nil {
			u := *req.URL
			u.RawQuery = withQuery(u.RawQuery, a.name, value[0])
			out.URL = &u
		}
		return out
	}
	out.Header = cloneHeader(req.Header, a.name, value)
	return out
}

// cloneHeader returns a copy of h without any spelling of name, and with
// name set to value when name is not "". As Header.Clone does, it copies
// the values into one array, each name's cut to its length: whatever sends
// the request may write to them or append, and the caller's header, or
// the key's value that later requests share, never sees it.
func cloneHeader(h http.Header, name string, value []string) http.Header {
	// One pass over h, the values copied into an array sized for one a
	// name (most have one) and grown when a name has more: a map's
	// iteration costs more than the copy (BenchmarkCloneHeader, medians
	// of six runs: 6% faster for one header, 2% for an SDK's ten, than
	// counting the values first, as Header.Clone does).
	values := make([]string, 0, len(h)+len(value))
	out := make(http.Header, len(h)+1)
	for k, v := range h {
		if name != "" && len(k) == len(name) && strings.EqualFold(k, name) {
			continue
		}
		out[k], values = cut(values, v)
	}
	if name != "" {
		out[name], _ = cut(values, value)
	}
	return out
}

// cut appends v to values and returns the copy, its capacity its length,
// and values with the copy in it. When values has no room for v, the copy
// starts a new array: the copies made before keep the old one.
func cut(values, v []string) (copied, rest []string) {
	n := len(values)
	rest = append(values, v...)
	return rest[n:len(rest):len(rest)], rest
}

// strip removes from r, a clone the caller owns, the header or parameter a
// key goes in, in every spelling.
func (a auth) strip(r *http.Request) {
	if a.style == authQuery {
		if r.URL != nil && r.URL.RawQuery != "" {
			u := *r.URL
			u.RawQuery = withoutQuery(u.RawQuery, a.name)
			r.URL = &u
		}
		return
	}
	for name := range r.Header {
		if strings.EqualFold(name, a.name) {
			delete(r.Header, name)
		}
	}
}

// withoutQuery returns the query raw without any name parameter.
func withoutQuery(raw, name string) string {
	var b strings.Builder
	for part := range strings.SplitSeq(raw, "&") {
		if key, _, _ := strings.Cut(part, "="); key == "" || unescape(key) == name {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('&')
		}
		b.WriteString(part)
	}
	return b.String()
}

// withQuery returns the query raw without any name parameter and with pair
// ("name=value") added at the end.
func withQuery(raw, name, pair string) string {
	if raw == "" {
		return pair
	}
	if rest := withoutQuery(raw, name); rest != "" {
		return rest + "&" + pair
	}
	return pair
}

func unescape(s string) string {
	if u, err := url.QueryUnescape(s); err == nil {
		return u
	}
	return s
}

// refused reports whether err is net/http refusing to send the key's
// header value: a key the transport cannot put on any request. The http
// package says so only in its error text.
func (a auth) refused(err error) bool {
	return a.style == authHeader && strings.Contains(err.Error(), "invalid header field value for "+strconv.Quote(a.name))
}

// unechoed removes a key put in a URL from an answer's headers that echo it:
// a Location or Content-Location loses the parameter (a redirect to the same
// host gets the key again from the pool; one to another host must not), any
// other header the secret itself. Only keys put in the query are echoed so.
func (a auth) unechoed(h http.Header, secret string) {
	if a.style != authQuery || len(h) == 0 {
		return
	}
	escaped := url.QueryEscape(secret)
	for name, vs := range h {
		for i, v := range vs {
			if !strings.Contains(v, secret) && !strings.Contains(v, escaped) {
				continue
			}
			if u, err := url.Parse(v); err == nil && (name == "Location" || name == "Content-Location") {
				u.RawQuery = withoutQuery(u.RawQuery, a.name)
				vs[i] = u.String()
				continue
			}
			vs[i] = strings.ReplaceAll(strings.ReplaceAll(v, secret, "[redacted]"), escaped, "[redacted]")
		}
	}
}
