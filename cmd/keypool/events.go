package main

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/keypool-go/keypool"
)

// eventRingSize is how many events the proxy remembers for the status page.
const eventRingSize = 128

// eventView is one thing that happened to a route or a key, as /status
// shows it.
type eventView struct {
	At time.Time `json:"at"`
	// Kind is "bench", "back" (a bench ended), "unbench" (an operator
	// lifted one), "reset-spend" (an operator reset a key's spend),
	// "disable" and "enable" (an operator took a key out of rotation and
	// back), "failover" (a request went past a route) or "route" (a
	// route's own failure benched it).
	Kind  string `json:"kind"`
	Route string `json:"route,omitempty"`
	Key   string `json:"key,omitempty"`
	Model string `json:"model,omitempty"`
	// Text says what happened in words.
	Text  string    `json:"text"`
	Until time.Time `json:"until,omitzero"`
	// Count is how many times it happened in a row, up to At; 1 or more.
	Count int `json:"count"`
}

// eventRing keeps the latest events: benches from OnEvict, routes passed
// over from OnRoute, unbenches. An event the same as the one before it
// counts up instead of taking a slot, so a failover on every request keeps
// one line. The zero value is ready to use; it is safe for concurrent use.
type eventRing struct {
	mu  sync.Mutex // guards buf and n
	buf [eventRingSize]eventView
	n   int              // events ever added; the latest is buf[(n-1)%size]
	now func() time.Time // nil: time.Now
}

func (r *eventRing) clock() time.Time {
	if r.now != nil {
		return r.now()
	}
	return time.Now()
}

// add records e at now, or counts it up when it repeats the latest event.
func (r *eventRing) add(e eventView) {
	e.At, e.Count = r.clock(), 1
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n > 0 {
		last := &r.buf[(r.n-1)%eventRingSize]
		if last.Kind == e.Kind && last.Route == e.Route && last.Key == e.Key && last.Model == e.Model && last.Text == e.Text {
			last.At, last.Until = e.At, e.Until
			last.Count++
			return
		}
	}
	r.buf[r.n%eventRingSize] = e
	r.n++
}

// benched records a bench of a key of route.
func (r *eventRing) benched(route string, e keypool.Eviction) {
	text := fmt.Sprintf("%s benched (%s: %s) for %s", e.KeyID, e.Kind, benchReason(e.Kind), span(e.For))
	if e.Model != "" {
		text = fmt.Sprintf("%s benched for %s (%s: %s) for %s", e.KeyID, e.Model, e.Kind, benchReason(e.Kind), span(e.For))
	}
	r.add(eventView{Kind: "bench", Route: route, Key: e.KeyID, Model: e.Model, Text: text, Until: e.Until})
}

// routed records how a request was routed, when it was anything but the
// first route answering well: routes passed over, or the answering route
// benched by its own failure. It reports whether the answering route was
// benched.
func (r *eventRing) routed(e keypool.RouteEvent) (benched bool) {
	if len(e.Skipped) > 0 {
		var why []string
		until := e.Skipped[0].Until
		for _, sk := range e.Skipped {
			if sk.Until.IsZero() && sk.Disabled > 0 {
				why = append(why, sk.Route+" passed over (its keys disabled)")
				continue
			}
			if sk.Until.IsZero() {
				// A failure in words the request could have written
				// benches no route.
				why = append(why, sk.Route+" failed it ("+sk.Kind.String()+" in its message's words only, no bench)")
				continue
			}
			why = append(why, sk.Route+" benched ("+sk.Kind.String()+")")
			until = earlier(until, sk.Until)
		}
		ev := eventView{Kind: "failover", Route: e.Route, Until: until}
		if e.Route == "" {
			ev.Text = "no route could take a request (" + strings.Join(why, "; ") + ")"
		} else {
			ev.Text = "failover to " + e.Route + " (" + strings.Join(why, "; ") + ")"
		}
		r.add(ev)
	}
	if b := e.Benched; b.Route != "" {
		r.add(eventView{Kind: "route", Route: b.Route, Until: b.Until,
			Text: fmt.Sprintf("route %s benched by its own answer (%s: %s) for %s", b.Route, b.Kind, benchReason(b.Kind), span(b.Until.Sub(r.clock())))})
		return true
	}
	return false
}

// operated records an operator's action on a key (keyActions): kind
// "unbench", "reset-spend", "disable" or "enable".
func (r *eventRing) operated(kind, route, key, by string) {
	text := map[string]string{"unbench": " unbenched by ", "reset-spend": "'s spend reset by ",
		"disable": " disabled by ", "enable": " enabled by "}[kind]
	r.add(eventView{Kind: kind, Route: route, Key: key, Text: key + text + by})
}

func earlier(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// latest returns up to n events, newest first, at now: with a "back" event
// for each bench that has ended since, dated by its end.
func (r *eventRing) latest(n int, now time.Time) []eventView {
	r.mu.Lock()
	events := make([]eventView, 0, min(r.n, eventRingSize))
	for i := r.n - 1; i >= 0 && i >= r.n-eventRingSize; i-- {
		events = append(events, r.buf[i%eventRingSize])
	}
	r.mu.Unlock()
	// events runs newest first. A bench has ended when its time is past and
	// no later bench or unbench of the same key and model came before it
	// ended.
	type scope struct{ route, key, model string }
	next := map[scope]time.Time{} // the start of the next bench or unbench of a scope
	var back []eventView
	for _, e := range events {
		s := scope{e.Route, e.Key, e.Model}
		switch e.Kind {
		case "unbench":
			next[scope{e.Route, e.Key, ""}] = e.At
			next[scope{e.Route, "", ""}] = e.At // Pool.Unbench ends the route's bench too
		case "bench", "route":
			end, seen := next[s]
			if whole, ok := next[scope{e.Route, e.Key, ""}]; ok && (!seen || whole.Before(end)) {
				end, seen = whole, true
			}
			if !e.Until.After(now) && (!seen || e.Until.Before(end)) {
				what := e.Key
				if e.Kind == "route" {
					what = "route " + e.Route
				}
				if e.Model != "" {
					what += " for " + e.Model
				}
				back = append(back, eventView{At: e.Until, Kind: "back", Route: e.Route, Key: e.Key, Model: e.Model, Text: what + " back in rotation", Count: 1})
			}
			next[s] = e.At
		}
	}
	events = append(events, back...)
	slices.SortStableFunc(events, func(a, b eventView) int { return b.At.Compare(a.At) })
	return events[:min(n, len(events))]
}

// routed records how a request was routed, and logs a route it found
// benched — with no key free, or by its own answer, which no key's bench
// reports.
func (s *server) routed(e keypool.RouteEvent) {
	for _, sk := range e.Skipped {
		if !sk.Earlier && !sk.Until.IsZero() { // this request found the route with no key free
			s.log.Info("route benched", "route", sk.Route, "kind", sk.Kind.String(), "until", sk.Until.Format(time.RFC3339))
		}
	}
	if s.events.routed(e) {
		b := e.Benched
		s.history.routeBench(b.Route)
		s.log.Info("route benched", "route", b.Route, "kind", b.Kind.String(), "until", b.Until.Format(time.RFC3339))
	}
}

// back logs a key of route back in rotation: its bench ended (OnBenchEnd).
// A key an operator unbenched is back at once, by hand, and not logged
// again.
func (s *server) back(route string, e keypool.Eviction) {
	s.log.Info("back in rotation", "route", route, "key", e.KeyID, "model", e.Model, "kind", e.Kind.String(), "benched_until", e.Until.Format(time.RFC3339))
}

// routeBack logs a route back in rotation: the Fallback's bench of it
// ended.
func (s *server) routeBack(e keypool.Eviction) {
	s.log.Info("route back in rotation", "route", e.Provider, "kind", e.Kind.String(), "benched_until", e.Until.Format(time.RFC3339))
}
