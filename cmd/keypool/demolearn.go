package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/keypool-go/keypool"
)

// The demo shows a key the pool was told too much of — 20 requests a
// minute where the vendor allows 12 — corrected from the vendor's answers:
// the pool learns the limit the headers state, and from then on sends the
// key no request the vendor would refuse. To show that, the demo notes
// each attempt the pool makes (its key, when it was sent, its status) and
// when the pool had read a key's answers, and counts the vendor's 429s of
// each key before and after the pool learned its limit.

// learning watches the pool's attempts, as the base transport under it,
// for what the pool learns of the keys marked learns.
type learning struct {
	base    http.RoundTripper
	byAuth  map[string]string // key ID by the Authorization header the pool puts on
	watched map[string]bool   // the keys marked learns, by ID
	start   time.Time         // the demo's start, for events

	mu      sync.Mutex // guards the fields below
	learned map[string]learnedLimit
	settled map[string]bool  // keys whose learned limits were read
	before  map[string]int64 // 429s of requests sent before the limit was learned, by key
	after   map[string]int64 // and after
}

// learnedLimit is a limit the pool learned below the one it was told.
type learnedLimit struct {
	rpm, configured int64
	at              time.Time // when the pool had read the answer that stated it
}

func newLearning(keys []demoKey) *learning {
	l := &learning{base: http.DefaultTransport, byAuth: map[string]string{}, watched: map[string]bool{},
		learned: map[string]learnedLimit{}, settled: map[string]bool{}, before: map[string]int64{}, after: map[string]int64{}}
	for _, k := range keys {
		l.byAuth["Bearer "+k.vendor.Secret] = k.id
		l.watched[k.id] = k.learns
	}
	return l
}

// answeredKeys is the set of keys whose answers one request's attempts
// got, carried in its context.
type answeredKeys struct {
	mu  sync.Mutex // guards ids
	ids []string
}

type answeredKey struct{}

// RoundTrip sends one attempt, counts a 429 as before or after its key's
// limit was learned, and notes the key as answered for its request.
func (l *learning) RoundTrip(req *http.Request) (*http.Response, error) {
	id := l.byAuth[req.Header.Get("Authorization")]
	sent := time.Now()
	resp, err := l.base.RoundTrip(req)
	if err != nil || id == "" {
		return resp, err
	}
	if a, ok := req.Context().Value(answeredKey{}).(*answeredKeys); ok {
		a.mu.Lock()
		a.ids = append(a.ids, id)
		a.mu.Unlock()
	}
	if resp.StatusCode == http.StatusTooManyRequests {
		l.mu.Lock()
		if ll, ok := l.learned[id]; ok && sent.After(ll.at) {
			l.after[id]++
		} else {
			l.before[id]++
		}
		l.mu.Unlock()
	}
	return resp, nil
}

// track returns ctx carrying a new set of answered keys, and a function to
// call once the request's answer is in: by then the pool has read what
// each attempt's answer stated.
func (l *learning) track(ctx context.Context, pool *keypool.Pool, events *eventLog) (context.Context, func()) {
	a := &answeredKeys{}
	return context.WithValue(ctx, answeredKey{}, a), func() {
		a.mu.Lock()
		ids := a.ids
		a.mu.Unlock()
		l.read(ids, pool, events, time.Now())
	}
}

// read looks, for each watched key of ids not read yet, at what the pool
// learned from its answers, read by now; a limit below the configured one
// is noted, with an event.
func (l *learning) read(ids []string, pool *keypool.Pool, events *eventLog, now time.Time) {
	l.mu.Lock()
	unread := slices.ContainsFunc(ids, func(id string) bool { return l.watched[id] && !l.settled[id] })
	l.mu.Unlock()
	if !unread {
		return
	}
	for _, st := range pool.Stats() {
		if !l.watched[st.ID] || !slices.Contains(ids, st.ID) {
			continue
		}
		for _, m := range viewKey(st, now).Models {
			if m.Learned.RPM != 0 {
				l.settle(st.ID, m, events, now)
			}
		}
	}
}

// settle notes what the pool learned of key id's limits for the model of
// m, once: a limit below the configured one, with an event.
func (l *learning) settle(id string, m modelView, events *eventLog, now time.Time) {
	l.mu.Lock()
	if l.settled[id] {
		l.mu.Unlock()
		return
	}
	l.settled[id] = true
	below := m.Configured.RPM > m.Learned.RPM
	if below {
		l.learned[id] = learnedLimit{rpm: m.Learned.RPM, configured: m.Configured.RPM, at: now}
	}
	l.mu.Unlock()
	if below {
		events.add(fmt.Sprintf("%5.1fs  learned %s's limit from the vendor's headers: %d a minute (configured %d)",
			now.Sub(l.start).Seconds(), id, m.Learned.RPM, m.Configured.RPM))
	}
}

// learnedOf returns the limit learned of a key, if one below its
// configured limit was, with the 429s of its requests sent before and
// after.
func (l *learning) learnedOf(id string) (ll learnedLimit, ok bool, before, after int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ll, ok = l.learned[id]
	return ll, ok, l.before[id], l.after[id]
}
