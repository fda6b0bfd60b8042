package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/keypool-go/keypool"
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
	srv.reloadFrom(path) // on SIGHUP and POST /reload (reload.go)
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
	settings     *settings
	log          *slog.Logger
	store        keypool.Store
	state        io.Closer
	pools        []*keypool.Pool
	fallback     *keypool.Fallback
	proxy        *httputil.ReverseProxy
	metrics      http.Handler
	meters       meterProvider
	events       *eventRing // for the status page
	history      *history   // the last hour, for the status page's charts
	redact       *redactor
	tokens       []string  // the proxy, client and operator tokens, to find in what goes upstream
	clients      []*client // those of clients:, then one for each proxy token
	clientMeters clientMeters
	inFlight     inFlight
	sessions     *sessions    // the status page's logins
	attempts     *attempts    // tries at an operator token, by client address
	pending      pendingConns // connections whose first request is not in yet
	watch        *watcher     // polls the store's health and logs returns
	// milestones logs where the proxy is — serving, stopped — whatever
	// the level of log; nil: log.
	milestones *slog.Logger
	// reloads re-reads the configuration (reload.go); nil: never. A
	// server a reload built is a successor: it shares the store, the
	// meters, the watcher and the page's sessions of the first, and its
	// close closes its pools alone.
	reloads   *reloads
	successor bool

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
	return nextServer(&server{log: log, store: store, state: closer, events: &eventRing{}, sessions: &sessions{}, attempts: &attempts{}}, s)
}

// nextServer builds the server of s over what prev holds that outlives a
// configuration: the log, the state store and its closer, the page's
// events and sessions and, once prev has them, the meters and the
// watcher. A prev without meters is a new proxy's: the server gets its
// own, and starts its watcher. With them, it is a reload's successor
// (reload.go).
func nextServer(prev *server, s *settings) (*server, error) {
	srv := &server{settings: s, log: prev.log, store: prev.store, state: prev.state, events: prev.events,
		sessions: prev.sessions, attempts: prev.attempts, meters: prev.meters, metrics: prev.metrics,
		clientMeters: prev.clientMeters, watch: prev.watch, milestones: prev.milestones, reloads: prev.reloads,
		successor: prev.meters != nil}
	srv.clients = newClients(s)
	for _, t := range slices.Concat(s.tokens, s.operatorTokens) {
		srv.tokens = append(srv.tokens, string(t))
	}
	for _, c := range s.clients {
		srv.tokens = append(srv.tokens, string(c.token))
	}
	var err error
	if !srv.successor {
		srv.events.now = srv.now
		if srv.meters, srv.metrics, err = newMetrics(); err != nil {
			srv.close()
			return nil, err
		}
		own := srv.meters.Meter("github.com/keypool-go/keypool/cmd/keypool")
		if err := srv.registerStoreGauge(own); err != nil {
			srv.close()
			return nil, fmt.Errorf("metrics: %w", err)
		}
		if srv.clientMeters, err = newClientMeters(own); err != nil {
			srv.close()
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	var routes []keypool.Route
	var secrets []secretKey
	// The hooks below read srv.history once requests come, after it is
	// made: it needs the keys' IDs, which the pools give.
	var names []string
	keyIDs := map[string][]string{}
	for i, r := range s.routes {
		opts := append([]keypool.Option{
			keypool.WithStore(srv.store),
			keypool.WithMeterProvider(srv.meters),
			keypool.OnAttempt(func(ctx context.Context, a keypool.Attempt) {
				attempted(ctx, a)
				callOf(ctx).attempted(a)
				srv.history.attempted(ctx, a)
			}),
			keypool.OnSettle(func(st keypool.Settlement) { srv.history.settled(st) }),
			keypool.OnEvict(func(e keypool.Eviction) { srv.benched(r.name, e) }),
			keypool.OnBenchEnd(func(e keypool.Eviction) { srv.back(r.name, e) }),
		}, r.options...)
		if s.clock != nil {
			opts = append(opts, keypool.WithClock(s.clock))
		}
		if old := prev.pool(r.name); old != nil {
			// A reload: the route's requests under way on the old pool
			// count against the new one's in-flight caps, and its
			// conversations stay on their keys.
			opts = append(opts, keypool.TakeOver(old))
		}
		pool, err := keypool.New(r.name, r.keys, opts...)
		if err != nil {
			srv.close()
			return nil, &configError{field: fmt.Sprintf("upstreams[%d]", i), err: err}
		}
		srv.pools = append(srv.pools, pool)
		routes = append(routes, keypool.Route{Name: r.name, Pool: pool, URL: r.url, Models: r.models, Base: upstreamTransport(r)})
		names = append(names, r.name)
		for i, ks := range pool.Stats() { // in the order the keys were given
			secrets = append(secrets, secretKey{secret: r.keys[i].Secret, id: ks.ID})
			keyIDs[r.name] = append(keyIDs[r.name], ks.ID)
		}
	}
	srv.history = newHistory(srv.now, names, keyIDs)
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
		ErrorLog:       slog.NewLogLogger(srv.log.Handler(), slog.LevelWarn),
	}
	if !srv.successor {
		srv.startWatch()
	}
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
	s.history.benched(route, e)
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
		if s.stateTimeout > 0 {
			opts = append(opts, redisstore.WithTimeout(s.stateTimeout))
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
	s.current().fallback.CloseIdleConnections()
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
	if s.successor {
		s.closePools() // the rest is its predecessor's
		return
	}
	if err := s.save(time.Now().Add(s.settings.shutdownTimeout)); err != nil {
		s.log.Warn("closing", "err", err)
	}
}

// handler routes the proxy's own endpoints and forwards the rest, logging
// a line for each request.
func (s *server) handler() http.Handler {
	return s.inFlight.track(s.live()) // each request on the configuration it came in under (reload.go)
}

// configured routes the endpoints and forwards the rest as s's
// configuration says, logging a line for each request.
func (s *server) configured() http.Handler {
	mux := newOwnMux(forwardable(s.guard(http.HandlerFunc(s.forward))))
	mux.HandleFunc("GET /healthz", s.healthz)
	s.handleOwn(mux) // the status page, /status, /metrics, unbench, reload
	return s.logRequests(apiMethods(mux))
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
