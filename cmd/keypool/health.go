package main

import (
	"context"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/keypool-go/keypool"
)

// While the state store fails — a Badger directory gone, read-only or
// full; Redis out of reach — the proxy serves on (from memory, or refusing
// requests, as replicas says) and says so: /healthz and /status carry the
// reason, the status page shows a banner, the gauge keypool.store.healthy
// is 0, and the log has one line when the failure starts and one when it
// ends. A store says it fails through a Health method, and tells of each
// change through NotifyHealth (BadgerStore and redisstore.Store do both),
// so nothing polls it; a store without Health never fails.

// storeSpell is a failure of the store: since when, and why.
type storeSpell struct {
	since  time.Time
	reason string
}

// watcher hears the store's health change (keypool.HealthNotifier), to log
// when a failure starts and ends, until stopped. A store that tells no
// changes is read when /healthz or /status asks, and logs nothing.
type watcher struct {
	remove  func() // stops the store's notices; nil for a store that gives none
	once    sync.Once
	mu      sync.Mutex                 // orders the checks: the store's goroutine, and the first
	stopped bool                       // guarded by mu
	spell   atomic.Pointer[storeSpell] // the failure going on; nil when the store works
}

// storeHealth returns the store's failure, or nil while it works.
func (s *server) storeHealth() error {
	if h, ok := s.store.(keypool.HealthReporter); ok {
		return h.Health()
	}
	return nil
}

// startWatch starts the server's watcher, which stopWatch ends: it checks
// the store now, and again at each change it tells of.
func (s *server) startWatch() {
	s.watch = &watcher{}
	if n, ok := s.store.(keypool.HealthNotifier); ok {
		s.watch.remove = n.NotifyHealth(func() { s.checkStore(time.Now()) })
	}
	s.checkStore(time.Now())
}

// stopWatch stops the watcher: nothing is logged of the store's health
// after it returns. It may be called more than once, and without a
// watcher.
func (s *server) stopWatch() {
	w := s.watch
	if w == nil {
		return
	}
	w.once.Do(func() {
		if w.remove != nil {
			w.remove()
		}
		w.mu.Lock()
		w.stopped = true
		w.mu.Unlock()
	})
}

// checkStore asks the store's health at now, and logs a failure when it
// starts and when it ends: once each, however long it lasts and whatever
// it says meanwhile.
func (s *server) checkStore(now time.Time) {
	w := s.watch
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	err := s.storeHealth()
	spell := s.watch.spell.Load()
	switch {
	case err != nil && spell == nil:
		reason := s.reason(err)
		s.watch.spell.Store(&storeSpell{since: now, reason: reason})
		s.log.Warn("state store failing", "state", displayState(s.settings.state), "reason", reason)
	case err == nil && spell != nil:
		s.watch.spell.Store(nil)
		s.log.Info("state store working again", "state", displayState(s.settings.state), "failed_for", now.Sub(spell.since).Round(time.Second).String())
	}
}

// failingSince returns when the watcher first saw the store's failure
// going on, or now when it has not seen it.
func (s *server) failingSince() time.Time {
	if s.watch != nil {
		if spell := s.watch.spell.Load(); spell != nil {
			return spell.since
		}
	}
	return time.Now()
}

// storeView is the store's health as /status shows it.
type storeView struct {
	Healthy bool `json:"healthy"`
	// Reason is why it fails: one line, without a secret; empty while it
	// works.
	Reason string `json:"reason,omitempty"`
	// Since is when the server first saw it fail; zero when it has not
	// seen it yet.
	Since time.Time `json:"since,omitzero"`
}

// viewStoreHealth reads the store's health now.
func (s *server) viewStoreHealth() storeView {
	err := s.storeHealth()
	if err == nil {
		return storeView{Healthy: true}
	}
	v := storeView{Reason: s.reason(err)}
	if s.watch != nil && s.watch.spell.Load() != nil {
		v.Since = s.failingSince().UTC()
	}
	return v
}

// registerStoreGauge reports the store's health as the gauge
// keypool.store.healthy: 1 while it works, 0 while it fails. The reason is
// not a label — its text would make a series of each — but is on /status.
func (s *server) registerStoreGauge(m metric.Meter) error {
	g, err := m.Int64ObservableGauge("keypool.store.healthy",
		metric.WithDescription("1 while the proxy's state store works, 0 while it fails; /status and /healthz say why."))
	if err != nil {
		return err
	}
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		v := int64(1)
		if s.storeHealth() != nil {
			v = 0
		}
		o.ObserveInt64(g, v)
		return nil
	}, g)
	return err
}

// maxReason bounds the text of a reason /healthz and /status show.
const maxReason = 300

// reason returns the text of err for an open endpoint or the log: one
// line, bounded, without the password of a redis:// state URL or any
// secret.
func (s *server) reason(err error) string {
	msg := s.redact.String(oneLine.Replace(err.Error()))
	msg = withoutPassword(s.settings.state, msg)
	if len(msg) > maxReason {
		msg = strings.ToValidUTF8(msg[:maxReason], "") + "…"
	}
	return msg
}

// withoutPassword returns msg without the password of the state URL, if it
// has one.
func withoutPassword(state, msg string) string {
	if u, err := url.Parse(state); err == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok && pw != "" {
			msg = strings.ReplaceAll(msg, pw, "xxxxx")
		}
	}
	return msg
}

// displayState is the state as the log and messages show it: a redis://
// URL without its password, a directory in full.
func displayState(state string) string {
	if isRedisURL(state) {
		if u, err := url.Parse(state); err == nil {
			return u.Redacted()
		}
		return "a Redis URL that does not parse"
	}
	return absolute(state)
}
