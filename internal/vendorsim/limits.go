package vendorsim

import "time"

// entry is one accepted request in a window: when it was accepted and how
// much of the window's axis it used (1 for a request window, its tokens for a
// token window).
type entry struct {
	at time.Time
	n  int64
}

// slidingWindow is an exact sliding window over accepted requests: an entry
// accepted at t counts at now while now-t < span, and the window admits n more
// only while the entries it counts plus n stay within limit. It therefore
// never holds more than limit in any half-open span [a, a+span).
//
// It keeps only the entries it still counts, and every entry is at least 1,
// so it never holds more than limit entries. It is pure arithmetic on the
// times it is given: no clock, no locks. Callers pass non-decreasing times.
type slidingWindow struct {
	span  time.Duration
	limit int64
	q     []entry // oldest first
	sum   int64   // sum of q[i].n
}

// newWindow returns a window of the given span and limit, or nil when limit
// is 0 (no limit on that axis). A nil window admits everything.
func newWindow(span time.Duration, limit int64) *slidingWindow {
	if limit <= 0 {
		return nil
	}
	return &slidingWindow{span: span, limit: limit}
}

// expire drops the entries that no longer count at now.
func (w *slidingWindow) expire(now time.Time) {
	i := 0
	for i < len(w.q) && now.Sub(w.q[i].at) >= w.span {
		w.sum -= w.q[i].n
		i++
	}
	if i == 0 {
		return
	}
	w.q = w.q[i:]
	if len(w.q) == 0 {
		w.q = w.q[:0:0] // let the old array go
	}
}

// used returns what the window counts at now.
func (w *slidingWindow) used(now time.Time) int64 {
	if w == nil {
		return 0
	}
	w.expire(now)
	return w.sum
}

// remaining returns what the window still admits at now.
func (w *slidingWindow) remaining(now time.Time) int64 {
	return w.limit - w.used(now)
}

// fits reports whether the window admits n more at now.
func (w *slidingWindow) fits(now time.Time, n int64) bool {
	if w == nil {
		return true
	}
	return w.used(now)+n <= w.limit
}

// wait returns how long after now the window first admits n more, and false
// when it never will (n alone exceeds the limit). It is 0 when the window
// admits n now.
func (w *slidingWindow) wait(now time.Time, n int64) (time.Duration, bool) {
	if w == nil {
		return 0, true
	}
	if n > w.limit {
		return 0, false
	}
	sum := w.used(now)
	for _, e := range w.q {
		if sum+n <= w.limit {
			break
		}
		sum -= e.n
		if sum+n <= w.limit {
			return e.at.Add(w.span).Sub(now), true
		}
	}
	return 0, true
}

// untilEmpty returns how long after now the window is fully replenished:
// when the newest entry it counts stops counting; 0 when it counts none.
func (w *slidingWindow) untilEmpty(now time.Time) time.Duration {
	if w == nil {
		return 0
	}
	w.expire(now)
	if len(w.q) == 0 {
		return 0
	}
	return w.q[len(w.q)-1].at.Add(w.span).Sub(now)
}

// untilOldestLeaves returns how long after now the oldest entry the window
// counts stops counting; span when it counts none (a window that starts now
// lifts after its span).
func (w *slidingWindow) untilOldestLeaves(now time.Time) time.Duration {
	w.expire(now)
	if len(w.q) == 0 {
		return w.span
	}
	return w.q[0].at.Add(w.span).Sub(now)
}

// add records n accepted at now. The caller has checked fits.
func (w *slidingWindow) add(now time.Time, n int64) {
	if w == nil {
		return
	}
	w.expire(now)
	w.q = append(w.q, entry{at: now, n: n})
	w.sum += n
}

// maxInSpan returns the largest sum of entries (sorted by time) that fall in
// one half-open span [a, a+span) of the given length.
func maxInSpan(es []entry, span time.Duration) int64 {
	var best, sum int64
	i := 0
	for j := range es {
		sum += es[j].n
		for es[j].at.Sub(es[i].at) >= span {
			sum -= es[i].n
			i++
		}
		best = max(best, sum)
	}
	return best
}
