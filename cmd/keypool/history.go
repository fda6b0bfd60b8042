package main

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/keypool-go/keypool"
)

// The history is the last hour of each key, minute by minute, for the
// status page's charts: the requests sent with it, the vendor's 429s, its
// benches and the tokens counted, with the time of each bench. Each key
// keeps a ring of historyMinutes minutes and of historyBenchMarks bench
// times, made when the server starts: the memory is fixed by the keys
// configured, whatever the traffic. The pools' hooks feed it (OnAttempt,
// OnEvict, OnSettle; OnRoute for a route's own benches), on the history's
// clock, which is the server's.

const (
	// historyMinutes is how many minutes the history keeps: the last hour.
	historyMinutes = 60
	// historyBenchMarks is how many bench times a key (or a route) keeps;
	// older ones, and those over an hour old, are dropped.
	historyBenchMarks = 32
)

// minuteCounts is what happened to a key in one minute.
type minuteCounts struct {
	requests, rateLimited, benches, tokens int64
}

// minuteRing is the last historyMinutes minutes of a key: slot i holds the
// minute whose Unix minute is stamp[i], which is i modulo historyMinutes;
// a slot whose stamp is older than the hour counts nothing.
type minuteRing struct {
	mu      sync.Mutex // guards the fields below
	counts  [historyMinutes]minuteCounts
	stamp   [historyMinutes]int64
	benched benchMarks
}

// add adds to the counts of the minute of now what f adds.
func (r *minuteRing) add(now time.Time, f func(*minuteCounts)) {
	m := unixMinute(now)
	i := int(m % historyMinutes)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stamp[i] != m {
		r.stamp[i], r.counts[i] = m, minuteCounts{}
	}
	f(&r.counts[i])
}

// series returns the ring's counts of the hour up to the minute of now,
// oldest first.
func (r *minuteRing) series(now time.Time) keyHistoryView {
	last := unixMinute(now)
	v := keyHistoryView{
		Requests: make([]int64, historyMinutes), RateLimited: make([]int64, historyMinutes),
		Benches: make([]int64, historyMinutes), Tokens: make([]int64, historyMinutes),
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for j := range historyMinutes {
		m := last - historyMinutes + 1 + int64(j)
		i := int(m % historyMinutes)
		if r.stamp[i] != m {
			continue
		}
		c := r.counts[i]
		v.Requests[j], v.RateLimited[j], v.Benches[j], v.Tokens[j] = c.requests, c.rateLimited, c.benches, c.tokens
	}
	v.BenchTimes = r.benched.within(now)
	return v
}

// benchMarks is a ring of the latest bench times. Its owner guards it.
type benchMarks struct {
	at [historyBenchMarks]time.Time
	n  int // marks ever added
}

func (b *benchMarks) add(t time.Time) {
	b.at[b.n%historyBenchMarks] = t
	b.n++
}

// within returns the marks of the hour up to now, oldest first; never nil.
func (b *benchMarks) within(now time.Time) []time.Time {
	out := []time.Time{}
	from := now.Add(-historyMinutes * time.Minute)
	for i := max(0, b.n-historyBenchMarks); i < b.n; i++ {
		if t := b.at[i%historyBenchMarks]; t.After(from) && !t.After(now) {
			out = append(out, t.UTC())
		}
	}
	return out
}

func unixMinute(t time.Time) int64 { return t.Unix() / 60 }

// history is the last hour of every key of every route. Its maps are made
// once, by newHistory, and only read after, so a lookup takes no lock;
// each ring has its own. It is safe for concurrent use.
type history struct {
	now    func() time.Time
	routes []string // in the configuration's order
	keys   map[string]map[string]*minuteRing
	order  map[string][]string // each route's key IDs, in order
	mu     sync.Mutex          // guards routeBenched
	// routeBenched holds the times each route was benched by its own
	// answer.
	routeBenched map[string]*benchMarks
}

// newHistory makes the history of routes, whose keys are given by ID, on
// the clock now.
func newHistory(now func() time.Time, routes []string, keyIDs map[string][]string) *history {
	h := &history{now: now, routes: routes, keys: map[string]map[string]*minuteRing{}, order: keyIDs,
		routeBenched: map[string]*benchMarks{}}
	for _, r := range routes {
		h.keys[r] = map[string]*minuteRing{}
		for _, id := range keyIDs[r] {
			h.keys[r][id] = &minuteRing{}
		}
		h.routeBenched[r] = &benchMarks{}
	}
	return h
}

// ring returns the ring of a key of route, or nil for one the history
// does not have.
func (h *history) ring(route, key string) *minuteRing {
	if h == nil {
		return nil
	}
	return h.keys[route][key]
}

// attempted counts an attempt on a key (OnAttempt): a request sent with
// it, and a 429 when the vendor answered so.
func (h *history) attempted(_ context.Context, a keypool.Attempt) {
	if r := h.ring(a.Provider, a.KeyID); r != nil {
		r.add(h.now(), func(c *minuteCounts) {
			c.requests++
			if a.Status == http.StatusTooManyRequests {
				c.rateLimited++
			}
		})
	}
}

// benched counts a bench of a key of route, and marks its time (OnEvict).
func (h *history) benched(route string, e keypool.Eviction) {
	r := h.ring(route, e.KeyID)
	if r == nil {
		return
	}
	now := h.now()
	r.add(now, func(c *minuteCounts) { c.benches++ })
	r.mu.Lock()
	r.benched.add(now)
	r.mu.Unlock()
}

// settled counts the tokens an answer of a key used (OnSettle).
func (h *history) settled(s keypool.Settlement) {
	if r := h.ring(s.Provider, s.KeyID); r != nil {
		r.add(h.now(), func(c *minuteCounts) { c.tokens += s.Tokens })
	}
}

// routeBench marks the time a route was benched by its own answer.
func (h *history) routeBench(route string) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if b := h.routeBenched[route]; b != nil {
		b.add(h.now())
	}
}

// historyReport is the JSON of /history: for each route and key, the last
// historyMinutes minutes, oldest first, the last being the minute of Now,
// which began at Start + (Minutes-1) minutes.
type historyReport struct {
	Now     time.Time          `json:"now"`
	Start   time.Time          `json:"start"`
	Minutes int                `json:"minutes"`
	Routes  []routeHistoryView `json:"routes"`
}

// routeHistoryView is a route's hour: its keys', and the times it was
// benched by its own answers.
type routeHistoryView struct {
	Name       string           `json:"name"`
	BenchTimes []time.Time      `json:"bench_times"`
	Keys       []keyHistoryView `json:"keys"`
}

// keyHistoryView is a key's hour, a count a minute in each series.
type keyHistoryView struct {
	ID          string      `json:"id"`
	Requests    []int64     `json:"requests"`
	RateLimited []int64     `json:"rate_limited"`
	Benches     []int64     `json:"benches"`
	Tokens      []int64     `json:"tokens"`
	BenchTimes  []time.Time `json:"bench_times"`
}

// report returns the history of the hour up to now.
func (h *history) report(now time.Time) historyReport {
	start := time.Unix((unixMinute(now)-historyMinutes+1)*60, 0).UTC()
	out := historyReport{Now: now.UTC(), Start: start, Minutes: historyMinutes, Routes: make([]routeHistoryView, 0, len(h.routes))}
	for _, name := range h.routes {
		rv := routeHistoryView{Name: name, Keys: make([]keyHistoryView, 0, len(h.order[name]))}
		h.mu.Lock()
		rv.BenchTimes = h.routeBenched[name].within(now)
		h.mu.Unlock()
		for _, id := range h.order[name] {
			kv := h.keys[name][id].series(now)
			kv.ID = id
			rv.Keys = append(rv.Keys, kv)
		}
		out.Routes = append(out.Routes, rv)
	}
	return out
}

// historyJSON answers /history, unindented: a route of 50 keys is 12,000
// numbers.
func (s *server) historyJSON(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_ = json.NewEncoder(w).Encode(s.history.report(s.now()))
}
