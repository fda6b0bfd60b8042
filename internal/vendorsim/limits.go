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

// windows are the RPM, RPD, TPM and TPD windows one key is held to, or the
// keys of one account together, with the per-minute input and output token
// windows that Anthropic's headers report (both limited by TPM). Like
// slidingWindow it is pure arithmetic: its owner locks it.
type windows struct {
	rpm, rpd      *slidingWindow
	tpm, tpd      *slidingWindow
	inMin, outMin *slidingWindow
}

func newWindows(l Limits) windows {
	return windows{
		rpm:    newWindow(minute, l.RPM),
		rpd:    newWindow(day, l.RPD),
		tpm:    newWindow(minute, l.TPM),
		tpd:    newWindow(day, l.TPD),
		inMin:  newWindow(minute, l.TPM),
		outMin: newWindow(minute, l.TPM),
	}
}

// setLimits changes the windows' limits. A window that keeps a limit keeps
// what it counts: under a lower limit it may count more than the limit, and
// refuses until enough of it leaves. A window whose axis had no limit
// counted nothing, so it starts counting now. A zero limit drops its window.
func (ws *windows) setLimits(l Limits) {
	set := func(w **slidingWindow, span time.Duration, limit int64) {
		switch {
		case limit <= 0:
			*w = nil
		case *w == nil:
			*w = newWindow(span, limit)
		default:
			(*w).limit = limit
		}
	}
	set(&ws.rpm, minute, l.RPM)
	set(&ws.rpd, day, l.RPD)
	set(&ws.tpm, minute, l.TPM)
	set(&ws.tpd, day, l.TPD)
	set(&ws.inMin, minute, l.TPM)
	set(&ws.outMin, minute, l.TPM)
}

// refuse checks the RPM, RPD, TPM and TPD windows for one more request of
// total tokens, and returns the refusal that lifts last (one that never
// lifts, the request alone being over a token limit, first).
func (ws *windows) refuse(now time.Time, total int64) (refusal, bool) {
	var rf refusal
	refused := false
	check := func(axis string, w *slidingWindow, n int64) {
		if w.fits(now, n) {
			return
		}
		wait, ok := w.wait(now, n)
		c := refusal{axis: axis, limit: w.limit, used: w.used(now), requested: n, wait: wait, tooLarge: !ok}
		switch {
		case !refused, c.tooLarge && !rf.tooLarge, !rf.tooLarge && !c.tooLarge && c.wait > rf.wait:
			rf, refused = c, true
		}
	}
	check("RPM", ws.rpm, 1)
	check("RPD", ws.rpd, 1)
	check("TPM", ws.tpm, total)
	check("TPD", ws.tpd, total)
	return rf, refused
}

// record enters one accepted request of prompt plus completion tokens.
func (ws *windows) record(now time.Time, prompt, completion int64) {
	total := prompt + completion
	ws.rpm.add(now, 1)
	ws.rpd.add(now, 1)
	ws.tpm.add(now, total)
	ws.tpd.add(now, total)
	ws.inMin.add(now, prompt)
	ws.outMin.add(now, completion)
}

// report fills st's request and token axes as an answer at now states them.
func (ws *windows) report(st *state) {
	st.requests = binding(st.now, ws.rpm, ws.rpd)
	st.tokens = binding(st.now, ws.tpm, ws.tpd)
	st.input = report(st.now, ws.inMin)
	st.output = report(st.now, ws.outMin)
}

// report returns one window as a header reports it, or nil for no window.
func report(now time.Time, w *slidingWindow) *axis {
	if w == nil {
		return nil
	}
	return &axis{limit: w.limit, remaining: max(0, w.remaining(now)), reset: w.untilEmpty(now)}
}

// binding returns the window of a minute/day pair with less room left (the
// minute one on a tie), or nil when neither is limited.
func binding(now time.Time, minute, day *slidingWindow) *axis {
	m, d := report(now, minute), report(now, day)
	if m == nil || (d != nil && d.remaining < m.remaining) {
		return d
	}
	return m
}

// appendHistory appends e to a history of accepted requests, keeping the
// latest limit entries (all of them when limit is 0).
func appendHistory(h []entry, e entry, limit int) []entry {
	if limit > 0 && len(h) >= limit {
		h = h[len(h)-limit+1:]
	}
	return append(h, e)
}
