package main

import (
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
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/keypool-go/keypool"
	"github.com/keypool-go/keypool/redisstore"
)

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", "keypool serve -config FILE", "Serves a local proxy that pools the configured upstream keys; point a client's base URL at it.")
	path := fs.String("config", "", "the YAML configuration file (required)")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	if *path == "" {
		return usageError{errors.New("-config FILE is required")}
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	s, err := loadConfig(*path)
	if err != nil {
		return usageError{err}
	}
	for _, w := range s.warnings {
		log.Warn(w)
	}
	srv, err := newServer(s, log)
	if err != nil {
		return err
	}
	defer srv.close()
	ln, err := net.Listen("tcp", s.listen)
	if err != nil {
		return usageError{fieldErr("listen", "%v", err)}
	}
	return srv.serve(ctx, ln)
}

// server is the running proxy.
type server struct {
	settings *settings
	log      *slog.Logger
	state    io.Closer
	pools    []*keypool.Pool
	fallback *keypool.Fallback
	proxy    *httputil.ReverseProxy
	metrics  http.Handler
	meters   *sdkmetric.MeterProvider
	events   eventRing // for the status page
}

// newServer opens the state and builds the pools, the fallback over them and
// the handlers.
func newServer(s *settings, log *slog.Logger) (*server, error) {
	srv := &server{settings: s, log: log}
	store, closer, err := openState(s, log)
	if err != nil {
		return nil, err
	}
	srv.state = closer
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		srv.close()
		return nil, fmt.Errorf("metrics: %w", err)
	}
	srv.meters = sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	srv.metrics = promhttp.HandlerFor(registry, promhttp.HandlerOpts{})
	var routes []keypool.Route
	for _, r := range s.routes {
		opts := append([]keypool.Option{
			keypool.WithStore(store),
			keypool.WithMeterProvider(srv.meters),
			keypool.OnEvict(func(e keypool.Eviction) {
				log.Info("benched", "route", r.name, "key", e.KeyID, "model", e.Model, "kind", e.Kind.String(), "for", e.For.Round(time.Second).String())
				srv.events.benched(r.name, e)
			}),
		}, r.options...)
		pool, err := keypool.New(r.name, r.keys, opts...)
		if err != nil {
			srv.close()
			return nil, &configError{field: "upstreams." + r.name, err: err}
		}
		srv.pools = append(srv.pools, pool)
		routes = append(routes, keypool.Route{Name: r.name, Pool: pool, URL: r.url, Models: r.models})
	}
	srv.fallback, err = keypool.NewFallback(routes, keypool.OnRoute(func(e keypool.RouteEvent) {
		srv.routed(e)
		for _, sk := range e.Skipped {
			if !sk.Earlier {
				log.Info("route benched", "route", sk.Route, "kind", sk.Kind.String(), "until", sk.Until.Format(time.RFC3339))
			}
		}
	}))
	if err != nil {
		srv.close()
		return nil, err
	}
	srv.proxy = &httputil.ReverseProxy{
		Rewrite:       rewrite,
		Transport:     srv.fallback,
		FlushInterval: -1, // streams pass through as they come
		ErrorHandler:  srv.proxyError,
	}
	return srv, nil
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
			return nil, nil, &configError{field: "state", err: err}
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

// serve answers on ln until ctx ends, then shuts down gracefully.
func (s *server) serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{Handler: s.handler(), ReadHeaderTimeout: 30 * time.Second}
	names := make([]string, 0, len(s.settings.routes))
	for _, r := range s.settings.routes {
		names = append(names, fmt.Sprintf("%s (%d keys)", r.name, len(r.keys)))
	}
	s.log.Info("serving", "addr", ln.Addr().String(), "upstreams", strings.Join(names, ", "), "state", s.settings.state)
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := hs.Shutdown(shutdown)
	<-errc
	s.log.Info("stopped")
	return err
}

// close flushes the pools and closes the state and the meters.
func (s *server) close() {
	for _, p := range s.pools {
		if err := p.Close(); err != nil {
			s.log.Warn("closing pool", "err", err)
		}
	}
	if s.state != nil {
		if err := s.state.Close(); err != nil {
			s.log.Warn("closing state", "err", err)
		}
	}
	if s.meters != nil {
		_ = s.meters.Shutdown(context.Background())
	}
}

// handler routes the proxy's own endpoints and forwards the rest.
func (s *server) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	s.handleOwn(mux) // the status page, /status, /metrics, unbench
	mux.Handle("/", forwardable(s.guard(s.proxy)))
	return mux
}

// guard lets through requests that present a proxy token: as a bearer
// token, an x-api-key or x-goog-api-key header, or a key query parameter —
// whichever the client's SDK sends.
func (s *server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		presented := []string{
			strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "),
			r.Header.Get("X-Api-Key"),
			r.Header.Get("X-Goog-Api-Key"),
			r.URL.Query().Get("key"),
		}
		for _, p := range presented {
			for _, t := range s.settings.tokens {
				if p != "" && subtle.ConstantTimeCompare([]byte(p), t) == 1 {
					next.ServeHTTP(w, r)
					return
				}
			}
		}
		writeError(w, http.StatusUnauthorized, "authentication_error", "keypool: this proxy needs its proxy token, not an upstream key", nil)
	})
}

// rewrite strips the client's credentials — its proxy token — from a
// forwarded request; the pool puts an upstream key on it, and the fallback
// its upstream URL.
func rewrite(pr *httputil.ProxyRequest) {
	out := pr.Out
	out.Header.Del("Authorization")
	out.Header.Del("X-Api-Key")
	out.Header.Del("X-Goog-Api-Key")
	if q := out.URL.Query(); q.Has("key") {
		q.Del("key")
		out.URL.RawQuery = q.Encode()
	}
	out.URL.Scheme, out.URL.Host, out.Host = "http", "upstream.invalid", ""
}

// proxyError answers a request the proxy could not forward: 429 with a
// Retry-After when no key is free, 502 otherwise.
func (s *server) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	var na *keypool.NoAvailableKeyError
	switch {
	case errors.As(err, &na):
		extra := map[string]any{}
		if !na.RetryAt.IsZero() {
			secs := int64(math.Ceil(time.Until(na.RetryAt).Seconds()))
			w.Header().Set("Retry-After", strconv.FormatInt(max(secs, 1), 10))
			extra["retry_at"] = na.RetryAt.UTC().Format(time.RFC3339)
		}
		writeError(w, http.StatusTooManyRequests, "rate_limit_error", err.Error(), extra)
	case r.Context().Err() != nil:
		// The client went away.
	default:
		s.log.Warn("forwarding failed", "path", r.URL.Path, "err", err)
		writeError(w, http.StatusBadGateway, "api_error", "keypool: "+err.Error(), nil)
	}
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
