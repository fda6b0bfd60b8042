package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/keypool-go/keypool"
)

// Reloading: on SIGHUP, or POST /reload from an operator, serve re-reads
// its configuration file and, when it has no mistake, builds a successor
// server from it — pools, routes, tokens, limits — over the same state
// store, and swaps it in. The library keeps a key's windows, benches and
// spend in the store by route and key ID, so a key the file leaves as it
// was keeps them; a key removed is simply no longer asked for.
//
// Each request runs on the server that was live when it came in: a
// generation counts the requests on it, and once it is retired and the
// last of them is done, its pools are closed (flushed; their gauges
// unregistered) and its upstreams' idle connections with them. A file
// with a mistake, or one that changes what only a restart can (listen,
// state, …), changes nothing: the mistakes are logged once each, shown on
// the status page, and answered to keypool reload.

// reloads re-reads the configuration of a running proxy. It is safe for
// concurrent use.
type reloads struct {
	path  string  // the configuration file
	first *server // the server serve runs: what a restart alone changes is its

	live atomic.Pointer[generation] // the server requests go to now

	mu      sync.Mutex // guards last and stopped; held through a reload, so one runs at a time
	last    *reloadView
	stopped bool

	poolsMu  sync.Mutex           // guards draining and closing, and orders closers.Add before closers.Wait
	draining map[*generation]bool // retired, with requests still on them or their pools being closed
	closing  bool                 // the shutdown has taken over closing the pools
	closers  sync.WaitGroup       // the goroutines closing drained generations' pools

	hangups chan os.Signal // SIGHUP; nil when not listening
	quit    chan struct{}  // closed to stop the listener
	done    chan struct{}  // closed when the listener has stopped
}

// reloadView is the outcome of the last reload, as /status, the status
// page and keypool reload show it.
type reloadView struct {
	At time.Time `json:"at"`
	OK bool      `json:"ok"`
	// By is who asked: "SIGHUP", or the operator token's field.
	By string `json:"by,omitempty"`
	// Upstreams are the routes served after it, with their keys' count:
	// "openai (3 keys)".
	Upstreams []string `json:"upstreams,omitempty"`
	// Mistakes are the file's, a line each, when it was refused.
	Mistakes []string `json:"mistakes,omitempty"`
}

// generation is a server and the requests that run on it.
type generation struct {
	srv     *server
	handler http.Handler
	r       *reloads
	n       atomic.Int64 // requests on it now
	retired atomic.Bool  // a successor is live: the last request to leave closes it
	once    sync.Once
}

// newReloads returns what reloads s's configuration from path; s serves
// the first generation.
func newReloads(s *server, path string) *reloads {
	return &reloads{path: path, first: s, draining: map[*generation]bool{}}
}

// reloadFrom makes s re-read its configuration at path on SIGHUP and on
// POST /reload, until its shutdown.
func (s *server) reloadFrom(path string) {
	r := newReloads(s, path)
	s.reloads = r
	r.hangups, r.quit, r.done = make(chan os.Signal, 1), make(chan struct{}), make(chan struct{})
	signal.Notify(r.hangups, syscall.SIGHUP)
	go func() {
		defer close(r.done)
		for {
			select {
			case <-r.hangups:
				r.reload("SIGHUP")
			case <-r.quit:
				return
			}
		}
	}()
}

// stopReloads stops s's reloads: it waits for one under way, and stops
// listening for SIGHUP. It may be called more than once, and on a server
// that never reloads.
func (s *server) stopReloads() {
	r := s.reloads
	if r == nil || s.successor {
		return
	}
	r.mu.Lock()
	already := r.stopped
	r.stopped = true
	r.mu.Unlock()
	if r.hangups != nil && !already {
		// Ignored rather than stopped: a SIGHUP while the state is saved
		// must not end the process as an unheard one would.
		signal.Ignore(syscall.SIGHUP)
		close(r.quit)
		<-r.done
	}
}

// live returns the handler that sends each request to the generation
// live when it comes in; without reloads, s's own.
func (s *server) live() http.Handler {
	r := s.reloads
	if r == nil || s.successor {
		return s.configured()
	}
	r.live.CompareAndSwap(nil, &generation{srv: s, handler: s.configured(), r: r})
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		g := r.enter()
		defer g.leave()
		g.handler.ServeHTTP(w, req)
	})
}

// current returns the server live now: s, without reloads.
func (s *server) current() *server {
	if s.reloads != nil {
		if g := s.reloads.live.Load(); g != nil {
			return g.srv
		}
	}
	return s
}

// enter counts a request on the live generation and returns it. It counts
// first and checks after that the generation is still live: a reload
// that retired it in between then either sees the count, or is seen, and
// the request goes to the successor.
func (r *reloads) enter() *generation {
	for {
		g := r.live.Load()
		g.n.Add(1)
		if r.live.Load() == g {
			return g
		}
		g.leave()
	}
}

// leave ends a request on g: the last one on a retired generation closes
// it.
func (g *generation) leave() {
	if g.n.Add(-1) == 0 && g.retired.Load() {
		g.drained()
	}
}

// retire marks g as no longer live: it is closed once no request is on
// it, now if none is.
func (g *generation) retire() {
	g.retired.Store(true)
	if g.n.Load() == 0 {
		g.drained()
	}
}

// drained closes g's pools, once, on a goroutine of its own: the request
// that found g drained is still being answered.
func (g *generation) drained() {
	g.once.Do(func() {
		r := g.r
		r.poolsMu.Lock()
		defer r.poolsMu.Unlock()
		if r.closing {
			return // the shutdown closes them
		}
		r.closers.Add(1)
		go func() {
			defer r.closers.Done()
			g.srv.closePools()
			r.poolsMu.Lock()
			delete(r.draining, g)
			r.poolsMu.Unlock()
		}()
	})
}

// pool returns s's pool of the route named name, nil when s has none (the
// server a first start builds on has no settings and no pools).
func (s *server) pool(name string) *keypool.Pool {
	if s.settings == nil {
		return nil
	}
	for i, r := range s.settings.routes {
		if r.name == name && i < len(s.pools) {
			return s.pools[i]
		}
	}
	return nil
}

// closePools closes s's pools — flushing them to the store and
// unregistering their gauges — and its upstreams' idle connections; the
// store stays open.
func (s *server) closePools() {
	for i, p := range s.pools {
		if err := p.Close(); err != nil {
			s.log.Warn("closing a replaced route", "route", s.settings.routes[i].name, "err", s.redact.String(err.Error()))
		}
	}
	if s.fallback != nil {
		s.fallback.CloseIdleConnections()
	}
}

// openPools returns the pools a shutdown closes, with their routes'
// names: the live generation's and those of retired ones not closed yet.
// It first waits for the pools being closed.
func (s *server) openPools() ([]*keypool.Pool, []string) {
	r := s.reloads
	if r == nil || s.successor {
		return s.pools, s.routeNames()
	}
	r.poolsMu.Lock()
	r.closing = true
	r.poolsMu.Unlock()
	r.closers.Wait()
	cur := s.current()
	pools, names := cur.pools, cur.routeNames()
	r.poolsMu.Lock()
	defer r.poolsMu.Unlock()
	for g := range r.draining {
		pools = append(pools, g.srv.pools...)
		names = append(names, g.srv.routeNames()...)
	}
	return pools, names
}

// reload re-reads the configuration file and, when it has no mistake,
// makes a server of it live; by says who asked. It returns the outcome,
// which it logs — each mistake once, on a line of its own — and keeps for
// /status.
func (r *reloads) reload(by string) reloadView {
	r.mu.Lock()
	defer r.mu.Unlock()
	view := reloadView{At: time.Now().UTC(), By: by}
	log := r.first.milestoneLog()
	if r.stopped {
		view.Mistakes = []string{"the proxy is shutting down"}
		return view
	}
	cur := r.live.Load()
	all, read := r.successor(cur)
	if len(all) == 0 {
		view.OK = true
		for _, rt := range r.live.Load().srv.settings.routes {
			view.Upstreams = append(view.Upstreams, fmt.Sprintf("%s (%s)", rt.name, count(len(rt.keys), "key")))
		}
		log.Info("reloaded", "config", r.path, "by", by, "upstreams", strings.Join(view.Upstreams, ", "))
	} else {
		// A value in the wrong field is quoted by its mistake, and may be a
		// secret pasted there: the log and the page carry none, of the
		// live configuration or of the file refused.
		redact := mistakeRedactor(read)
		for _, m := range all {
			view.Mistakes = append(view.Mistakes, cur.srv.redact.String(redact.String(m.Error())))
		}
		log.Error("reload refused: nothing changed, serving on as before", "config", r.path, "by", by, "mistakes", len(all))
		for _, m := range view.Mistakes {
			log.Error("reload mistake", "mistake", m)
		}
	}
	r.last = &view
	return view
}

// mistakeRedactor returns a redactor of the secrets of the settings read
// from a refused file (nil: none read), named by their upstream and place.
func mistakeRedactor(read *settings) *redactor {
	var secrets []secretKey
	if read != nil {
		for _, rt := range read.routes {
			for i, k := range rt.keys {
				secrets = append(secrets, secretKey{secret: k.Secret, id: fmt.Sprintf("%s key %d", rt.name, i)})
			}
		}
		for _, t := range slices.Concat(read.tokens, read.operatorTokens) {
			secrets = append(secrets, secretKey{secret: string(t), id: "token"})
		}
		for _, c := range read.clients {
			secrets = append(secrets, secretKey{secret: string(c.token), id: "client token"})
		}
	}
	return newRedactor(secrets)
}

// successor reads the file and builds, checks and swaps in the server it
// makes, after cur; it returns the mistakes that stopped it, or none, and
// the settings it read, if it read any.
func (r *reloads) successor(cur *generation) (mistakes, *settings) {
	s, err := loadConfig(r.path, os.LookupEnv)
	var all mistakes
	all.merge(err)
	if s != nil {
		for _, f := range restartOnly {
			if !f.same(r.first.settings, s) && !all.covers(f.field) {
				all.addf(f.field, "changes need a restart")
			}
		}
	}
	if len(all) > 0 {
		return all, s
	}
	s.clock = r.first.settings.clock // tests set it; the file cannot
	next, err := nextServer(cur.srv, s)
	if err != nil {
		all.merge(err)
		return all, s
	}
	for _, w := range s.warnings {
		next.log.Warn(w)
	}
	next.history.keep(cur.srv.history)
	next.keepUse(cur.srv)
	next.renewed(cur.srv)
	r.poolsMu.Lock()
	r.draining[cur] = true
	r.poolsMu.Unlock()
	r.live.Store(&generation{srv: next, handler: next.configured(), r: r})
	cur.retire()
	return nil, s
}

// keepUse takes over what each client prev has too, by name, used today
// and this month in this process, for /status; its windows and budget are
// in the store already. s is not in use yet.
func (s *server) keepUse(prev *server) {
	for _, c := range s.clients {
		for _, p := range prev.clients {
			if p.name == c.name {
				c.use = p.use
				break
			}
		}
	}
}

// renewed lifts the benches of each key whose ID prev has too, under the
// same route, with another secret: a key renewed in place, which is not
// the key its benches were set on — a revoked one, most often. The rest of
// what the store keeps by ID stays, as for any key the file leaves as it
// was.
func (s *server) renewed(prev *server) {
	secrets := map[[2]string]string{}
	for _, r := range prev.settings.routes {
		for _, k := range r.keys {
			secrets[[2]string{r.name, k.ID}] = k.Secret
		}
	}
	for i, r := range s.settings.routes {
		for _, k := range r.keys {
			old, ok := secrets[[2]string{r.name, k.ID}]
			if !ok || old == k.Secret {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), renewTimeout)
			err := s.pools[i].Unbench(ctx, k.ID)
			cancel()
			if err != nil {
				s.log.Warn("a renewed key's benches could not be lifted", "route", r.name, "key", k.ID, "err", s.redact.String(err.Error()))
				continue
			}
			s.milestoneLog().Info("renewed: its benches lifted", "route", r.name, "key", k.ID)
		}
	}
}

// renewTimeout bounds lifting a renewed key's benches in the store.
const renewTimeout = 5 * time.Second

// view returns the outcome of the last reload; nil before any, or for a
// proxy that does not reload.
func (r *reloads) view() *reloadView {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// restartOnly are the settings that a running proxy cannot change: the
// listener and its bounds, the state store, the log, the shutdown.
var restartOnly = []struct {
	field string
	same  func(a, b *settings) bool
}{
	{"listen", func(a, b *settings) bool { return a.listen == b.listen }},
	{"state", func(a, b *settings) bool { return a.state == b.state }},
	{"replicas", func(a, b *settings) bool { return a.replicas == b.replicas }},
	{"state_timeout", func(a, b *settings) bool { return a.stateTimeout == b.stateTimeout }},
	{"log_level", func(a, b *settings) bool { return a.logLevel == b.logLevel }},
	{"max_header_bytes", func(a, b *settings) bool { return a.maxHeaderBytes == b.maxHeaderBytes }},
	{"max_pending_conns", func(a, b *settings) bool { return a.maxPendingConns == b.maxPendingConns }},
	{"header_timeout", func(a, b *settings) bool { return a.headerTimeout == b.headerTimeout }},
	{"idle_timeout", func(a, b *settings) bool { return a.idleTimeout == b.idleTimeout }},
	{"shutdown_timeout", func(a, b *settings) bool { return a.shutdownTimeout == b.shutdownTimeout }},
}

// keep takes over old's record of each route and key h has too, so that
// the page's charts go on across a reload. h is not in use yet.
func (h *history) keep(old *history) {
	if h == nil || old == nil {
		return
	}
	old.mu.Lock()
	defer old.mu.Unlock()
	for route, keys := range h.keys {
		for id := range keys {
			if ring := old.ring(route, id); ring != nil {
				keys[id] = ring
			}
		}
		if b := old.routeBenched[route]; b != nil {
			h.routeBenched[route] = b
		}
	}
}

// reloadNow answers POST /reload: 200 with the outcome when the new
// configuration is live, 422 with its mistakes when nothing changed.
func (s *server) reloadNow(w http.ResponseWriter, r *http.Request) {
	if s.reloads == nil {
		writeError(w, http.StatusNotFound, "not_found_error", "keypool: this proxy was not started from a configuration file: it has none to reload", nil)
		return
	}
	view := s.reloads.reload(caller(r))
	if view.OK {
		writeJSON(w, http.StatusOK, view)
		return
	}
	writeError(w, http.StatusUnprocessableEntity, "invalid_request_error",
		"the configuration was not reloaded: nothing changed, the proxy serves on as before:\n"+strings.Join(view.Mistakes, "\n"),
		map[string]any{"reload": view})
}

func runReload(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("reload", "keypool reload -url URL",
		"Makes a running proxy re-read its configuration file, as SIGHUP does: keys, limits and upstreams\n"+
			"added, removed or changed take effect without a restart, and unchanged keys keep their windows,\n"+
			"benches and spend. A file with a mistake changes nothing: its mistakes are printed, one a line,\n"+
			"and the exit status is 1.")
	addr := fs.String("url", "", "a running proxy's base URL, as its clients use it: http://127.0.0.1:8787 or http://127.0.0.1:8787/v1")
	token := fs.String("token", "", "an operator token (default: $KEYPOOL_OPERATOR_TOKEN, else $KEYPOOL_PROXY_TOKEN)")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	if *addr == "" {
		return usageError{errors.New("-url URL is required: the proxy's base URL")}
	}
	var view reloadView
	if err := callProxy(ctx, http.MethodPost, *addr, "reload", givenToken(*token), &view); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "Reloaded: serving %s.\n", strings.Join(view.Upstreams, ", "))
	return nil
}
