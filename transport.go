package keypool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// The bounds of what the transport reads itself.
const (
	// maxBodyScan is how much of a request body is read for its model and
	// token estimate.
	maxBodyScan = 1 << 20
	// maxFailureBody is how much of a failure's body is read to classify
	// it; the caller still reads the whole body.
	maxFailureBody = 64 << 10
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
// once, and returns the last answer. It does so only when the body can be
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

// RoundTrip implements http.RoundTripper.
func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	p := t.pool
	body, info, err := p.inspect(req)
	if err != nil {
		return nil, err
	}
	var estimate int64
	if p.needTokens {
		estimate = max(p.cfg.estimator(info), 0)
	}
	ctx := req.Context()
	var c call
	for attempt := 0; ; attempt++ {
		l, err := p.take(ctx, &c, info.Model, estimate)
		if err != nil {
			body.discard()
			return nil, err
		}
		actx, span := p.tel.startAttempt(ctx, l.key, info.Model, attempt)
		out := req.Clone(actx)
		if out.Body, err = body.next(); err != nil {
			_ = p.store.Release(ctx, l.take, l.grant)
			endAttempt(span, 0, verdict{}, 0, err)
			return nil, err
		}
		out.GetBody = body.getBodyFunc()
		p.cfg.auth.apply(out, l.key.auth)
		p.sent(&l)
		resp, err := t.base.RoundTrip(out)
		if err == nil && resp == nil {
			err = errors.New("keypool: base RoundTripper returned neither an answer nor an error")
		}
		if err == nil && resp.Body == nil {
			resp.Body = http.NoBody // as http.Client reads a RoundTripper's nil Body
		}
		if err != nil {
			// No answer: nothing to bench. The request never counted —
			// unless the caller gave up while the vendor had it, which the
			// vendor may count: then its slot stays taken.
			if ctx.Err() == nil {
				_ = p.store.Release(ctx, l.take, l.grant)
			}
			err = p.redact(err, l.key)
			endAttempt(span, 0, verdict{}, 0, err)
			return nil, err
		}
		resp.Request = req // never hand out the clone that carries the key
		var head []byte
		if resp.StatusCode >= 400 {
			head, resp.Body = peek(resp.Body, maxFailureBody)
		}
		now := p.cfg.clock()
		v := classify(resp.StatusCode, resp.Header, head, now)
		until := p.observe(ctx, &l, v, now)
		c.sooner(until)
		endAttempt(span, resp.StatusCode, v, max(until.Sub(now), 0), nil)
		if v.kind == KindNone || v.oversized || p.single() || !body.replayable() {
			p.settle(&l, resp)
			return resp, nil
		}
		// A key-scoped failure: the vendor refused the request, so it used
		// no tokens. Try the next key.
		if p.needTokens {
			_ = p.store.Settle(ctx, l.take, l.grant, 0)
		}
		c.tried.add(l.key.index)
		drain(resp.Body)
	}
}

// settle arranges for the tokens an answer reports to replace the estimate
// of its lease: as the caller reads a successful body, or at once (zero
// tokens) for an answer that is not a success.
func (p *Pool) settle(l *lease, resp *http.Response) {
	if !p.needTokens {
		return
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		_ = p.store.Settle(resp.Request.Context(), l.take, l.grant, 0)
		return
	}
	m := &meteredBody{pool: p, lease: *l}
	m.start(resp.Body, resp.Header.Get("Content-Type"), m)
	resp.Body = m
}

// meteredBody is a successful answer's body, read for the tokens it reports,
// which then settle its lease.
type meteredBody struct {
	usageBody
	pool  *Pool
	lease lease
}

func (m *meteredBody) settle(tokens int64, ok bool) {
	if !ok {
		return // the estimate stands
	}
	ctx := context.Background() // the request's context may be over by now
	_ = m.pool.store.Settle(ctx, m.lease.take, m.lease.grant, tokens)
	m.pool.tel.used(ctx, m.lease.key, tokens)
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
// returns how to send the body on each attempt.
func (p *Pool) inspect(req *http.Request) (*replay, RequestInfo, error) {
	b := &replay{orig: req.Body, getBody: req.GetBody}
	var info RequestInfo
	if p.cfg.modelFunc != nil {
		info.Model = p.cfg.modelFunc(req)
	} else if req.URL != nil {
		info.Model = modelFromPath(req.URL.Path)
	}
	if b.orig == nil || b.orig == http.NoBody || (info.Model != "" && !p.needTokens) {
		return b, info, nil
	}
	data, err := b.read(bodyLength(req))
	if err != nil {
		b.discard()
		return nil, info, fmt.Errorf("keypool: reading request body: %w", err)
	}
	scanned := scanRequest(data, &p.models)
	if rest := req.ContentLength - int64(len(data)); rest > 0 {
		scanned.PromptChars += rest // a body longer than what was read counts as prompt
	}
	if info.Model == "" {
		info.Model = scanned.Model
	}
	scanned.Model = info.Model
	return b, scanned, nil
}
