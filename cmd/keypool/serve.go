package main

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/keypool-go/keypool"
	"github.com/keypool-go/keypool/internal/refusal"
	"github.com/keypool-go/keypool/redisstore"
	"github.com/redis/go-redis/v9"
)

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	path, err := configFlag(newFlagSet("serve", "keypool serve -config FILE",
		"Serves a local proxy that pools the configured upstream keys; point a client's base URL at it.\n"+
			"It first checks the configuration as keypool check does, and starts only when it has no mistake."), args, stderr)
	if err != nil {
		return err
	}
	s, all := checkConfig(path, true)
	var ln net.Listener
	if s != nil {
		if !all.covers("listen") {
			if ln, err = net.Listen("tcp", s.listen); err != nil {
				all.addf("listen", "%v", err)
			}
		}
	}
	if len(all) > 0 {
		if ln != nil {
			ln.Close()
		}
		return usageError{all}
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: s.logLevel}))
	// The lines that say where the proxy is — starting, serving, stopped —
	// are logged whatever the level.
	milestones := slog.New(slog.NewTextHandler(stderr, nil))
	milestones.Info("starting", stateAttrs(path, s)...)
	redis.SetLogger(redisLog{log})
	for _, w := range s.warnings {
		log.Warn(w)
	}
	srv, err := newServer(s, log)
	if err != nil {
		ln.Close()
		return err
	}
	srv.milestones = milestones
	return srv.serve(ctx, ln)
}

// stateAttrs are the attributes of serve's first log line: the
// configuration, and where the state is — the directory in full, saying
// when it is the default.
func stateAttrs(path string, s *settings) []any {
	attrs := []any{"config", path}
	switch {
	case isRedisURL(s.state) && redisstore.IsClusterURL(s.state):
		return append(attrs, "state", displayState(s.state), "store", "redis cluster")
	case isRedisURL(s.state):
		return append(attrs, "state", displayState(s.state), "store", "redis")
	case s.stateDefault:
		attrs = append(attrs, "state", displayState(s.state), "store", "badger",
			"note", "state is not set: the default is "+defaultState+" in the directory serve runs in")
	default:
		attrs = append(attrs, "state", displayState(s.state), "store", "badger")
	}
	return attrs
}

// absolute returns dir as an absolute path, or as it is when it has none.
func absolute(dir string) string {
	if abs, err := filepath.Abs(dir); err == nil {
		return abs
	}
	return dir
}

// server is the running proxy.
type server struct {
	settings *settings
	log      *slog.Logger
	store    keypool.Store
	state    io.Closer
	pools    []*keypool.Pool
	fallback *keypool.Fallback
	proxy    *httputil.ReverseProxy
	metrics  http.Handler
	meters   meterProvider
	events   eventRing // for the status page
	redact   *redactor
	tokens   []string // the proxy and operator tokens, to find in what goes upstream
	inFlight inFlight
	sessions sessions     // the status page's logins
	attempts attempts     // tries at an operator token, by client address
	pending  pendingConns // connections whose first request is not in yet
	watch    *watcher     // polls the store's health and logs returns
	// milestones logs where the proxy is — serving, stopped — whatever
	// the level of log; nil: log.
	milestones *slog.Logger

	saveOnce sync.Once
	saveErr  error
}

// newServer opens the state and builds the pools, the fallback over them and
// the handlers.
func newServer(s *settings, log *slog.Logger) (*server, error) {
	store, closer, err := openState(s, log)
	if err != nil {
		return nil, err
	}
	return newServerWith(s, log, store, closer)
}

// newServerWith builds the server over a state store already open, which
// closer closes, and starts its watcher of the store's health; close or a
// shutdown stops it.
func newServerWith(s *settings, log *slog.Logger, store keypool.Store, closer io.Closer) (*server, error) {
	srv := &server{settings: s, log: log, store: store, state: closer}
	srv.events.now = srv.now
	for _, t := range slices.Concat(s.tokens, s.operatorTokens) {
		srv.tokens = append(srv.tokens, string(t))
	}
	var err error
	if srv.meters, srv.metrics, err = newMetrics(); err != nil {
		srv.close()
		return nil, err
	}
	if err := srv.registerStoreGauge(srv.meters.Meter("github.com/keypool-go/keypool/cmd/keypool")); err != nil {
		srv.close()
		return nil, fmt.Errorf("metrics: %w", err)
	}
	var routes []keypool.Route
	var secrets []secretKey
	for i, r := range s.routes {
		opts := append([]keypool.Option{
			keypool.WithStore(store),
			keypool.WithMeterProvider(srv.meters),
			keypool.OnAttempt(attempted),
			keypool.OnEvict(func(e keypool.Eviction) { srv.benched(r.name, e) }),
			keypool.OnBenchEnd(func(e keypool.Eviction) { srv.back(r.name, e) }),
		}, r.options...)
		if s.clock != nil {
			opts = append(opts, keypool.WithClock(s.clock))
		}
		pool, err := keypool.New(r.name, r.keys, opts...)
		if err != nil {
			srv.close()
			return nil, &configError{field: fmt.Sprintf("upstreams[%d]", i), err: err}
		}
		srv.pools = append(srv.pools, pool)
		routes = append(routes, keypool.Route{Name: r.name, Pool: pool, URL: r.url, Models: r.models, Base: upstreamTransport(r)})
		for i, ks := range pool.Stats() { // in the order the keys were given
			secrets = append(secrets, secretKey{secret: r.keys[i].Secret, id: ks.ID})
		}
	}
	srv.redact = newRedactor(secrets)
	srv.fallback, err = keypool.NewFallback(routes, keypool.OnRoute(srv.routed), keypool.OnBenchEnd(srv.routeBack), keypool.WithClock(srv.now))
	if err != nil {
		srv.close()
		return nil, err
	}
	srv.proxy = &httputil.ReverseProxy{
		Rewrite:        srv.rewrite,
		Transport:      srv.fallback,
		FlushInterval:  -1, // streams pass through as they come
		ErrorHandler:   srv.proxyError,
		ModifyResponse: srv.modifyResponse,
		BufferPool:     &copyBuffers{},
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	srv.startWatch()
	return srv, nil
}

// now returns the time on the server's clock: the pools' and the
// fallback's.
func (s *server) now() time.Time {
	if s.settings.clock != nil {
		return s.settings.clock()
	}
	return time.Now()
}

// benched logs a bench of a key of route, and keeps it for the status page.
func (s *server) benched(route string, e keypool.Eviction) {
	s.log.Info("benched", "route", route, "key", e.KeyID, "model", e.Model, "kind", e.Kind.String(),
		"for", e.For.Round(time.Second).String(), "until", e.Until.Format(time.RFC3339))
	s.events.benched(route, e)
}

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

// openState opens the pools' store: a Badger directory, or a Redis server
// that replicas share.
func openState(s *settings, log *slog.Logger) (keypool.Store, io.Closer, error) {
	if isRedisURL(s.state) {
		opts := []redisstore.Option{
			redisstore.WithLogger(log),
		}
		if s.replicas > 0 {
			opts = append(opts, redisstore.WithLocalFallback(s.replicas))
		}
		store, err := redisstore.Open(s.state, opts...)
		if err != nil {
			msg := withoutPassword(s.state, err.Error())
			if !errors.Is(err, redisstore.ErrUnavailable) {
				// A mistake of the configuration, such as a plain URL
				// naming a Cluster node, rather than an outage.
				return nil, nil, usageError{fieldErr("state", "%s", msg)}
			}
			return nil, nil, &configError{field: "state", err: errors.New(msg)}
		}
		return store, store, nil
	}
	store, err := keypool.OpenBadgerStore(s.state, keypool.WithBadgerLogger(log))
	if errors.Is(err, keypool.ErrStoreLocked) {
		return nil, nil, usageError{fieldErr("state", "%v", err)}
	}
	if err != nil {
		return nil, nil, err
	}
	return store, store, nil
}

// serve answers on ln until ctx ends, then shuts down within the shutdown
// timeout.
func (s *server) serve(ctx context.Context, ln net.Listener) error {
	st := s.settings
	s.pending.max, s.pending.log = st.maxPendingConns, s.log
	hs := &http.Server{
		Handler:           s.pending.arrive(s.handler()),
		ReadHeaderTimeout: st.headerTimeout,
		// What a connection may make the proxy hold before any token is
		// checked: a request's headers, each at most MaxHeaderBytes (431
		// beyond), on at most max_pending_conns connections at once.
		MaxHeaderBytes: st.maxHeaderBytes,
		ConnContext:    s.pending.opened,
		ConnState:      s.pending.note,
		IdleTimeout:    st.idleTimeout,
		// No ReadTimeout: it would cancel a request whose answer comes
		// after it; forward bounds the body instead. No WriteTimeout: it
		// would run from the request's arrival, and an upstream may think
		// for minutes; each handler sets its own.
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	names := make([]string, 0, len(s.settings.routes))
	for _, r := range s.settings.routes {
		names = append(names, fmt.Sprintf("%s (%s)", r.name, count(len(r.keys), "key")))
	}
	s.milestoneLog().Info("serving", "addr", ln.Addr().String(), "upstreams", strings.Join(names, ", "), "state", displayState(s.settings.state))
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		s.close()
		return err
	case <-ctx.Done():
	}
	s.fallback.CloseIdleConnections()
	return s.shutdown(hs, errc)
}

// milestoneLog returns the logger of the lines that say where the proxy
// is.
func (s *server) milestoneLog() *slog.Logger {
	if s.milestones != nil {
		return s.milestones
	}
	return s.log
}

// close saves the state within the shutdown timeout, and logs what it
// could not save.
func (s *server) close() {
	if err := s.save(time.Now().Add(s.settings.shutdownTimeout)); err != nil {
		s.log.Warn("closing", "err", err)
	}
}

// handler routes the proxy's own endpoints and forwards the rest, logging
// a line for each request.
func (s *server) handler() http.Handler {
	mux := newOwnMux(forwardable(s.guard(http.HandlerFunc(s.forward))))
	mux.HandleFunc("GET /healthz", s.healthz)
	s.handleOwn(mux) // the status page, /status, /metrics, unbench
	return s.inFlight.track(s.logRequests(apiMethods(mux)))
}

// writeWithin gives next's whole answer write_timeout to be written.
func (s *server) writeWithin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.settings.writeTimeout))
		next.ServeHTTP(w, r)
	})
}

// healthz answers 200 for a load balancer, with "ok", or "degraded: " and
// the reason when the state store reports a failure — the proxy serves on
// from memory, or refuses requests while Redis is down, as configured.
func (s *server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := s.storeHealth(); err != nil {
		_, _ = fmt.Fprintf(w, "degraded: state store: %s\n", s.reason(err))
		return
	}
	_, _ = io.WriteString(w, "ok\n")
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
	s.proxy.ServeHTTP(aw, r)
	if aw.body != nil {
		// Closed here, not after the handler returns: net/http, in full
		// duplex, would otherwise start reading the next request while
		// the close still reads this one's end, and panic
		// (golang/go#68560).
		_ = aw.body.Close()
	}
	if hasTrailers(w.Header()) {
		s.redact.header(w.Header()) // trailers go out after the handler returns
	}
}

// tooLarge answers a request whose body is over max_request_body.
func (s *server) tooLarge(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
	writeError(w, http.StatusRequestEntityTooLarge, "request_too_large",
		fmt.Sprintf("keypool: the request body is over max_request_body (%d bytes)", s.settings.maxBody), nil)
}

// guard lets through requests that present a proxy token: as a bearer
// token, an x-api-key or x-goog-api-key header, or a key query parameter —
// whichever the client's SDK sends.
func (s *server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		presented := []string{
			bearerToken(r.Header.Get("Authorization")),
			r.Header.Get("X-Api-Key"),
			r.Header.Get("X-Goog-Api-Key"),
			queryKey(r.URL.RawQuery),
		}
		for _, p := range presented {
			for _, t := range s.settings.tokens {
				if p != "" && subtle.ConstantTimeCompare([]byte(p), t) == 1 {
					next.ServeHTTP(w, r)
					return
				}
			}
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

// maxHeldBody bounds the body of an answer the proxy holds to redact:
// vendors' error bodies are a few KiB, and an answer that is not a stream
// — a completion, a list, a key management answer — seldom more than a
// few dozen.
const maxHeldBody = 256 << 10

// modifyResponse redacts an upstream's answer before the client has it:
// every header, and the body of every answer that is not a stream, held
// whole when it is at most maxHeldBody. Beyond it, a failure is cut there,
// and a success — which cutting would break — passes as it comes,
// unscanned. A stream passes as it comes, unread: holding any of it back
// would hold back the events.
func (s *server) modifyResponse(resp *http.Response) error {
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

// streamTypes are the media types of answers that stream: server-sent
// events (OpenAI, Anthropic, Gemini's alt=sse), and JSON a line or a
// record at a time (Ollama's application/x-ndjson, and their kin).
var streamTypes = []string{"text/event-stream", "application/x-ndjson", "application/jsonl", "application/json-seq", "application/stream+json"}

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

// proxyError answers a request the proxy could not forward: 429 with a
// Retry-After when no key is free; 413 or 408 for a body too long or too
// slow; 400 for what the request itself holds (a model name no store may
// keep, a model without a price); 503 while Redis is out of
// reach (without replicas); 502 otherwise.
func (s *server) proxyError(w http.ResponseWriter, r *http.Request, err error) {
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
		writeError(w, http.StatusBadRequest, "invalid_request_error", s.redact.String(err.Error()), nil)
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
