package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/keypool-go/keypool"
	"github.com/keypool-go/keypool/internal/refusal"
	"github.com/keypool-go/keypool/redisstore"
)

// Proxying: a request to an upstream is checked (its path, its token, its
// size), rewritten (the route's URL, the proxy's own tokens and the
// client's keys taken off), sent through the routes' Fallback, and its
// answer handed back — a stream unbuffered, an error of the proxy's own in
// the vendor's shape. Serving the proxy — building it, its endpoints, its
// lifecycle — is serve.go's.

// upstreamTransport returns the transport of a route: one of its own, kept
// apart from other routes', that keeps as many idle connections to the
// upstream as the route expects requests at once — Go's default keeps 2, so
// that under load most requests would open a connection — and speaks
// HTTP/2 where the upstream offers it.
func upstreamTransport(r routeSettings) *http.Transport {
	dialer := &net.Dialer{Timeout: r.dialTimeout, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dialer.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          r.idleConns,
		MaxIdleConnsPerHost:   r.idleConns,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   r.tlsTimeout,
		ResponseHeaderTimeout: r.answerTimeout,
		ExpectContinueTimeout: time.Second,
	}
}

// forward sends a request upstream through the fallback, within the limits
// of limits.go.
func (s *server) forward(w http.ResponseWriter, r *http.Request) {
	if escapesRoute(r.URL.Path) {
		refused(r, "refused")
		w.Header().Set("Connection", "close")
		writeError(w, http.StatusBadRequest, "invalid_request_error", "keypool: the path holds a dot segment or is not in its clean form", nil)
		return
	}
	if r.ContentLength > s.settings.maxBody {
		refused(r, "refused")
		s.tooLarge(w)
		return
	}
	if onlyH2C(r.Header) {
		// An offer of cleartext HTTP/2 (curl --http2 on http://), which a
		// server may ignore: the request is answered as HTTP/1.1.
		r.Header.Del("Upgrade")
		r.Header.Del("Http2-Settings")
	}
	if len(r.Header.Values("Upgrade")) > 0 {
		// What crosses an upgraded connection (a WebSocket: OpenAI's
		// Realtime API) could be neither metered nor scanned for keys,
		// and would hold a key's place for as long as it lasts.
		refused(r, "refused")
		writeError(w, http.StatusNotImplemented, "invalid_request_error",
			"keypool: the proxy does not forward protocol upgrades (WebSocket); use the vendor's HTTP endpoints", nil)
		return
	}
	// Writing the answer has a deadline that each write moves on:
	// waiting for the upstream never counts.
	rc := http.NewResponseController(w)
	aw := &answerWriter{ResponseWriter: w, rc: rc, redact: s.redact, writeTimeout: s.settings.writeTimeout}
	if r.Body != nil && r.Body != http.NoBody {
		// A body too long to hold is sent as it arrives, and an upstream
		// may answer before it has read it all: without full duplex, the
		// server would close the body as the answer starts, the transport
		// would then fail to send the rest and close the upstream's
		// connection, cutting the answer (golang/go#40747).
		_ = rc.EnableFullDuplex()
		_ = rc.SetReadDeadline(time.Now().Add(s.settings.bodyTimeout)) // cleared once the body is in
		aw.body = &requestBody{ReadCloser: http.MaxBytesReader(w, r.Body, s.settings.maxBody), rc: rc}
		r.Body = aw.body
	}
	call := callOf(r.Context())
	if call != nil {
		var ok bool
		if r, ok = s.admit(aw, r, call); !ok {
			if aw.body != nil {
				_ = aw.body.Close()
			}
			return
		}
	}
	if call != nil {
		// Once the answer is written, after the body's close below — and
		// deferred before the proxy runs: it panics with
		// http.ErrAbortHandler when a stream breaks, and the client's
		// reservation must settle then too.
		defer s.settleClient(call)
	}
	if aw.body != nil {
		// Closed here, not after the handler returns: net/http, in full
		// duplex, would otherwise start reading the next request while
		// the close still reads this one's end, and panic
		// (golang/go#68560).
		defer func() { _ = aw.body.Close() }()
	}
	s.proxy.ServeHTTP(aw, r)
	if hasTrailers(w.Header()) {
		s.redact.header(w.Header()) // trailers go out after the handler returns
	}
}

// onlyH2C reports whether h offers an upgrade to h2c and to nothing else.
func onlyH2C(h http.Header) bool {
	vs := h.Values("Upgrade")
	if len(vs) == 0 {
		return false
	}
	for _, v := range vs {
		for _, p := range strings.Split(v, ",") {
			if !strings.EqualFold(strings.TrimSpace(p), "h2c") {
				return false
			}
		}
	}
	return true
}

// tooLarge answers a request whose body is over max_request_body.
func (s *server) tooLarge(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
	writeError(w, http.StatusRequestEntityTooLarge, "request_too_large",
		fmt.Sprintf("keypool: the request body is over max_request_body (%d bytes)", s.settings.maxBody), nil)
}

// guard lets through requests that present a proxy token or a client's
// token — as a bearer token, an x-api-key or x-goog-api-key header, or a
// key query parameter, whichever the client's SDK sends — with the call of
// the client it names in their context (clients.go).
func (s *server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		presented := []string{
			bearerToken(r.Header.Get("Authorization")),
			r.Header.Get("X-Api-Key"),
			r.Header.Get("X-Goog-Api-Key"),
			queryKey(r.URL.RawQuery),
		}
		if c := s.clientFor(presented); c != nil {
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callKey{}, &clientCall{client: c})))
			return
		}
		// A client without the token gets nothing more on this connection.
		refused(r, "unauthorized")
		w.Header().Set("Connection", "close")
		writeError(w, http.StatusUnauthorized, "authentication_error", "keypool: this proxy needs its proxy token, not an upstream key (nor an operator token, which does not forward)", nil)
	})
}

// queryKey returns the value of the first key parameter of a raw query,
// without parsing the rest.
func queryKey(raw string) string {
	for part := range strings.SplitSeq(raw, "&") {
		if v, ok := strings.CutPrefix(part, "key="); ok {
			return unescapeQuery(v)
		}
	}
	return ""
}

// bearerToken returns the token of an Authorization header's Bearer
// scheme, whose name is in any case.
func bearerToken(h string) string {
	if len(h) > len("Bearer ") && strings.EqualFold(h[:len("Bearer ")], "Bearer ") {
		return h[len("Bearer "):]
	}
	return ""
}

// rewrite strips the client's credentials — every copy of its proxy token,
// and its cookies, the status page's session among them (a browser sends
// them with every request to the proxy's address) — from a forwarded
// request; the pool puts an upstream key on it, and the fallback its
// upstream URL.
func (s *server) rewrite(pr *httputil.ProxyRequest) {
	out := pr.Out
	for _, name := range []string{"Authorization", "Proxy-Authorization", "X-Api-Key", "X-Goog-Api-Key", "Cookie"} {
		delete(out.Header, name)
	}
	for name, values := range out.Header {
		if slices.ContainsFunc(values, s.holdsToken) {
			delete(out.Header, name)
		}
	}
	// The transport asks for gzip itself and decompresses the answer, so
	// that the proxy can read what it redacts.
	delete(out.Header, "Accept-Encoding")
	out.URL.RawQuery = s.stripQuery(out.URL.RawQuery)
	out.URL.Scheme, out.URL.Host, out.Host = "http", "upstream.invalid", ""
}

// stripQuery returns a query without its key parameters, whatever their
// case, and without any parameter that holds a proxy token; the rest keep
// their order and encoding.
func (s *server) stripQuery(raw string) string {
	if raw == "" {
		return raw
	}
	var kept []string // nil while every part is kept
	i := 0
	for part := range strings.SplitSeq(raw, "&") {
		name, _, _ := strings.Cut(part, "=")
		strip := strings.EqualFold(unescapeQuery(name), "key") || s.holdsToken(part) || s.holdsToken(unescapeQuery(part))
		switch {
		case strip && kept == nil:
			kept = strings.Split(raw, "&")[:i]
		case !strip && kept != nil:
			kept = append(kept, part)
		}
		i++
	}
	if kept == nil {
		return raw
	}
	return strings.Join(kept, "&")
}

// unescapeQuery returns s with its query escapes decoded, or s when it
// has none that decode.
func unescapeQuery(s string) string {
	if u, err := url.QueryUnescape(s); err == nil {
		return u
	}
	return s
}

// holdsToken reports whether v holds one of the proxy tokens.
func (s *server) holdsToken(v string) bool {
	for _, t := range s.tokens {
		if strings.Contains(v, t) {
			return true
		}
	}
	return false
}

// modifyResponse redacts an upstream's answer before the client has it:
// every header, and the body of every answer that is not a stream, held
// whole when it is at most maxHeldBody. Beyond it, a failure is cut there,
// and a success — which cutting would break — passes as it comes,
// unscanned. A stream passes as it comes, unread: holding any of it back
// would hold back the events.
func (s *server) modifyResponse(resp *http.Response) error {
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// Never asked for (forward refuses an upgrade): its body is a
		// connection, which reading would wait on.
		_ = resp.Body.Close()
		return errors.New("the upstream switched protocols, which the proxy does not forward")
	}
	s.redact.header(resp.Header)
	if resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified || resp.Request != nil && resp.Request.Method == http.MethodHead {
		return nil // no body
	}
	success := resp.StatusCode < 300
	if success && (isStream(resp) || resp.ContentLength > maxHeldBody) {
		return nil
	}
	if ce := resp.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		// Not one the transport asked for and decoded: unreadable, so
		// withheld.
		_ = resp.Body.Close()
		status := resp.StatusCode
		if success {
			resp.StatusCode, resp.Status = http.StatusBadGateway, ""
		}
		hold(resp, fmt.Appendf(nil, `{"error":{"type":"api_error","message":"keypool: the upstream answered %d with a body in %q encoding, which the proxy cannot check for keys; withheld"}}`,
			status, s.redact.String(ce)))
		resp.Header.Set("Content-Type", "application/json")
		resp.Header.Del("Content-Encoding")
		return nil
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxHeldBody+1))
	if err != nil {
		_ = resp.Body.Close()
		return err
	}
	if len(body) > maxHeldBody && success {
		// Too long to hold: what was read, then the rest, as they come.
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(body), resp.Body), resp.Body}
		return nil
	}
	_ = resp.Body.Close()
	if len(body) > maxHeldBody {
		s.log.Warn("an upstream's failure body is over the bound the proxy reads: cut", "status", resp.StatusCode, "bytes", maxHeldBody)
		body = body[:maxHeldBody]
	}
	if text := string(body); s.redact.String(text) != text {
		body = []byte(s.redact.String(text))
	}
	hold(resp, body)
	return nil
}

// hold makes body, held whole, the body of resp.
func hold(resp *http.Response, body []byte) {
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	resp.TransferEncoding = nil
}

// isStream reports whether an answer streams: its media type is one of
// streamTypes, or it answers a Google-style streaming method
// (…/models/NAME:streamGenerateContent), whose stream without alt=sse is
// one JSON array sent an element at a time.
func isStream(resp *http.Response) bool {
	mediaType, _, _ := strings.Cut(resp.Header.Get("Content-Type"), ";")
	mediaType = strings.TrimSpace(mediaType)
	for _, t := range streamTypes {
		if strings.EqualFold(mediaType, t) {
			return true
		}
	}
	if resp.Request == nil {
		return false
	}
	p := resp.Request.URL.Path
	_, method, ok := strings.Cut(p[strings.LastIndexByte(p, '/')+1:], ":")
	return ok && len(method) >= len("stream") && strings.EqualFold(method[:len("stream")], "stream")
}

// optionFields says the library's options that its refusals name as the
// fields of the configuration that set them, which a proxy's client can
// look up: the library has no error of its own for these refusals that a
// caller could tell apart (a *refusal.Error is all).
var optionFields = strings.NewReplacer(
	" (WithPrices)", " in the upstream's prices",
	"the model's MaxOutput", "the model's max_output in the upstream's prices",
)

// proxyError answers a request the proxy could not forward: 429 with a
// Retry-After when no key is free; 413 or 408 for a body too long or too
// slow; 400 for what the request itself holds (a model name no store may
// keep, a model without a price); 503 while Redis is out of
// reach (without replicas); 502 otherwise.
func (s *server) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	if call := callOf(r.Context()); r.Context().Err() == nil || !call.wasSent() {
		// A client that gave up while the vendor had its request keeps
		// it counted, as the pools keep a key's: the vendor may count it.
		call.unanswered()
	}
	var na *keypool.NoAvailableKeyError
	var own *refusal.Error
	var body *requestBody
	if aw, ok := w.(*answerWriter); ok {
		body = aw.body
	}
	switch {
	case body != nil && body.tooLarge:
		refused(r, "refused")
		s.tooLarge(w)
	case body != nil && body.timedOut:
		refused(r, "refused")
		w.Header().Set("Connection", "close")
		writeError(w, http.StatusRequestTimeout, "invalid_request_error", "keypool: the request body did not arrive within body_timeout", nil)
	case errors.As(err, &own):
		refused(r, "refused")
		writeError(w, http.StatusBadRequest, "invalid_request_error", s.redact.String(optionFields.Replace(err.Error())), nil)
	case errors.As(err, &na):
		refused(r, "no_key")
		extra := map[string]any{}
		if !na.RetryAt.IsZero() {
			secs := int64(math.Ceil(na.RetryAt.Sub(s.now()).Seconds()))
			w.Header().Set("Retry-After", strconv.FormatInt(max(secs, 1), 10))
			extra["retry_at"] = na.RetryAt.UTC().Format(time.RFC3339)
		}
		writeError(w, http.StatusTooManyRequests, "rate_limit_error", err.Error(), extra)
	case errors.Is(err, redisstore.ErrUnavailable):
		// Redis is out of reach, and without replicas no local windows
		// stand in: the watcher logs the spell once, and each request's
		// line says no_store, rather than a warning a request.
		refused(r, "no_store")
		writeError(w, http.StatusServiceUnavailable, "api_error",
			"keypool: the state store is out of reach, and without replicas the proxy refuses requests until it answers: "+s.reason(err), nil)
	case r.Context().Err() != nil:
		refused(r, "canceled") // the client went away
	default:
		recordOf(r.Context()).set(func(rec *requestRecord) {
			if rec.outcome == "" {
				rec.outcome = "error"
			}
		})
		msg := s.redact.String(err.Error())
		s.log.Warn("forwarding failed", "path", r.URL.Path, "err", msg)
		writeError(w, http.StatusBadGateway, "api_error", "keypool: "+strings.TrimPrefix(msg, "keypool: "), nil)
	}
}

// refused notes in r's record why the proxy answered it itself, for its
// log line.
func refused(r *http.Request, why string) {
	recordOf(r.Context()).set(func(rec *requestRecord) { rec.refused = why })
}

// writeError writes an error body shaped as OpenAI's and Anthropic's are,
// so clients show its message.
func writeError(w http.ResponseWriter, status int, typ, msg string, extra map[string]any) {
	e := map[string]any{"type": typ, "message": msg}
	for k, v := range extra {
		e[k] = v
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": e})
}

// maxHeldBody bounds the body of an answer the proxy holds to redact:
// vendors' error bodies are a few KiB, and an answer that is not a stream
// — a completion, a list, a key management answer — seldom more than a
// few dozen.
const maxHeldBody = 256 << 10

// streamTypes are the media types of answers that stream: server-sent
// events (OpenAI, Anthropic, Gemini's alt=sse), and JSON a line or a
// record at a time (Ollama's application/x-ndjson, and their kin).
var streamTypes = []string{"text/event-stream", "application/x-ndjson", "application/jsonl", "application/json-seq", "application/stream+json"}
