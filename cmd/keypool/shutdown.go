package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A shutdown takes at most shutdown_timeout: requests in flight get two
// thirds of it to finish, and are then cut (connections whose first
// request is not in are closed at once); saving the state — flushing
// each pool's windows and benches to the store, then closing the store —
// gets the rest. State not saved in time is named on one line, and the
// command exits with status 1.

// shutdown stops hs — whose Serve returns on errc — and saves the state,
// all within the settings' shutdown timeout.
func (s *server) shutdown(hs *http.Server, errc <-chan error) error {
	start := time.Now()
	total := s.settings.shutdownTimeout
	drain, cancel := context.WithTimeout(context.Background(), total*2/3)
	shut := make(chan error, 1)
	go func() { shut <- hs.Shutdown(drain) }()
	s.pending.close() // no request on them to wait for
	err := <-shut
	cancel()
	if err != nil {
		s.log.Warn("requests still in flight at the end of their share of shutdown_timeout: cut", "in_flight", s.inFlight.count())
		_ = hs.Close()
	}
	<-errc // Serve has returned
	deadline := start.Add(total)
	if !s.inFlight.wait(deadline) {
		s.log.Warn("handlers still running after their connections closed", "in_flight", s.inFlight.count())
	}
	if err := s.save(deadline); err != nil {
		return err
	}
	s.milestoneLog().Info("stopped", "after", time.Since(start).Round(time.Millisecond).String())
	return nil
}

// save stops the watcher, flushes the pools and closes the state store and
// the meters, by deadline. It returns an error that names what was not saved: what failed,
// or what was still being saved at the deadline. Only its first call does
// anything.
func (s *server) save(deadline time.Time) error {
	s.saveOnce.Do(func() {
		s.stopReloads()
		s.stopWatch()
		s.saveErr = s.saveBy(deadline)
	})
	return s.saveErr
}

func (s *server) saveBy(deadline time.Time) error {
	var step atomic.Pointer[string] // what is being saved now
	done := make(chan []string, 1)
	go func() {
		var failed []string
		say := func(what string) { step.Store(&what) }
		pools, names := s.openPools()
		for i, p := range pools {
			say("the windows and benches of " + strings.Join(names[i:], ", "))
			if err := p.Close(); err != nil {
				failed = append(failed, fmt.Sprintf("%s (%v)", names[i], err))
			}
		}
		if err := s.storeHealth(); err != nil && isRedisURL(s.settings.state) {
			// Redis's store drops, at Close, what it could not send while
			// out of reach (a bench set on local windows): say so.
			failed = append(failed, fmt.Sprintf("the state store %s (out of reach: what changed since %s is not saved)",
				displayState(s.settings.state), s.failingSince().UTC().Format(time.RFC3339)))
		}
		if s.state != nil {
			say("the state store " + displayState(s.settings.state) + " (not closed)")
			if err := s.state.Close(); err != nil {
				failed = append(failed, fmt.Sprintf("the state store %s (%s)", displayState(s.settings.state), s.reason(err)))
			}
		}
		if s.meters != nil {
			ctx, cancel := context.WithDeadline(context.Background(), deadline)
			_ = s.meters.Shutdown(ctx)
			cancel()
		}
		done <- failed
	}()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case failed := <-done:
		if len(failed) > 0 {
			return fmt.Errorf("state not saved: %s", strings.Join(failed, "; "))
		}
		return nil
	case <-timer.C:
		what := "the state"
		if p := step.Load(); p != nil {
			what = *p
		}
		return fmt.Errorf("shutdown_timeout (%v) passed: not saved: %s", s.settings.shutdownTimeout, what)
	}
}

// routeNames returns the names of the routes, in order.
func (s *server) routeNames() []string {
	names := make([]string, 0, len(s.settings.routes))
	for _, r := range s.settings.routes {
		names = append(names, r.name)
	}
	return names
}

// inFlight counts the requests being handled, so that a shutdown can wait
// for their handlers to return before it closes what they use. Starting and
// ending a request are an atomic add each.
type inFlight struct {
	n        atomic.Int64
	draining atomic.Bool
	zero     chan struct{} // a token when n falls to zero while draining
	once     sync.Once
}

func (f *inFlight) init() { f.once.Do(func() { f.zero = make(chan struct{}, 1) }) }

// track counts the requests next handles.
func (f *inFlight) track(next http.Handler) http.Handler {
	f.init()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.n.Add(1)
		defer f.end()
		next.ServeHTTP(w, r)
	})
}

func (f *inFlight) end() {
	if f.n.Add(-1) == 0 && f.draining.Load() {
		select {
		case f.zero <- struct{}{}:
		default:
		}
	}
}

func (f *inFlight) count() int64 { return f.n.Load() }

// wait waits until no request is in flight, or until deadline; it reports
// whether none is.
func (f *inFlight) wait(deadline time.Time) bool {
	f.init()
	f.draining.Store(true)
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for f.n.Load() > 0 {
		select {
		case <-f.zero:
		case <-timer.C:
			return f.n.Load() == 0
		}
	}
	return true
}
