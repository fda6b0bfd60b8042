package vendorsim

import "time"

// outcome is what the sim decided to answer one request on a known key.
type outcome int

const (
	outServe      outcome = iota // accepted: a 200 with usage
	outScript                    // the key's next scripted answer
	outRevoked                   // an authentication error
	outBadRequest                // a malformed request
	outNoCredit                  // the dialect's billing error
	outUsageLimit                // a spent subscription (5-hour or 7-day) window
	outFault                     // a 5xx or 529
	outRateLimit                 // a full RPM, RPD, TPM or TPD window
)

// decision is the sim's answer to one request on a known key, decided under
// the key's lock and written after it is released.
type decision struct {
	out        outcome
	class      class
	now        time.Time // the key's clock reading for this request
	script     Answer
	status     int    // fault or bad-request status
	msg        string // bad-request message
	refusal    refusal
	usage      usageLimit
	st         *state // the windows the rate-limit headers report; nil for none
	completion int64
	truncated  bool
	tokens     int64 // an accepted request's total tokens; 0 otherwise
}

// ask is one request as the key sees it.
type ask struct {
	now         time.Time // the sim's clock
	start       time.Time // when the server started, on its clock
	req         request
	badStatus   int // 400 or 413 when the body could not be read or parsed
	badMsg      string
	output      int64 // the length of the sim's answers, in tokens
	faultStatus int   // the dialect's default fault status
	history     int   // how many accepted requests the key remembers
}

// decide decides the answer to one request, records it in the key's windows
// and counters, and returns it. Its order: the script first, then a revoked
// key, a malformed request, a spent balance, a spent subscription window, a
// fault, the RPM/RPD/TPM/TPD windows; what passes them all is accepted.
func (ks *keyState) decide(q ask) decision {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	now := q.now
	if now.Before(ks.last) {
		now = ks.last // windows need times that never go back
	}
	ks.last = now
	d := ks.decideLocked(now, q)
	d.now = now
	if d.out == outServe {
		d.tokens = q.req.prompt + d.completion
	}
	ks.counts.add(d.class, d.out == outScript, d.tokens)
	return d
}

func (ks *keyState) decideLocked(now time.Time, q ask) decision {
	if ks.script < len(ks.cfg.Script) {
		step := ks.cfg.Script[ks.script]
		ks.script++
		if step.Status != 0 {
			return decision{out: outScript, class: classOfStatus(step.Status), script: step}
		}
	}
	if ks.cfg.Revoked {
		return decision{out: outRevoked, class: classUnauthorized}
	}
	if q.badStatus != 0 {
		return decision{out: outBadRequest, class: classBadRequest, status: q.badStatus, msg: q.badMsg}
	}
	if ks.cfg.NoCredit {
		return decision{out: outNoCredit, class: classBilling}
	}
	if ul, spent := ks.usageLimit(now, q.start); spent {
		return decision{out: outUsageLimit, class: classRateLimited, usage: ul, st: ks.state(now, q.start, ul.claim)}
	}
	if ks.faulty() {
		status := ks.cfg.FaultStatus
		if status == 0 {
			status = q.faultStatus
		}
		return decision{out: outFault, class: classServerError, status: status, st: ks.state(now, q.start, "")}
	}
	completion, truncated := completionTokens(q.req, q.output)
	total := q.req.prompt + completion
	if rf, refused := ks.refuse(now, total); refused {
		return decision{out: outRateLimit, class: classRateLimited, refusal: rf, st: ks.state(now, q.start, "")}
	}
	ks.record(now, q.req.prompt, completion, q.history)
	return decision{out: outServe, class: classServed, completion: completion, truncated: truncated, st: ks.state(now, q.start, "")}
}

// faulty reports whether this request answers with a fault, consuming the
// burst first, then drawing from the key's generator.
func (ks *keyState) faulty() bool {
	if ks.faultsLeft > 0 {
		ks.faultsLeft--
		return true
	}
	return ks.cfg.FaultRate > 0 && ks.rng.Float64() < ks.cfg.FaultRate
}

// usageLimit returns the spent subscription window that lifts last, if any:
// the configured spent week, a full 7-day budget, a full 5-hour budget.
func (ks *keyState) usageLimit(now, start time.Time) (usageLimit, bool) {
	var ul usageLimit
	spent := false
	consider := func(claim string, resetAt time.Time) {
		if !spent || resetAt.After(ul.resetAt) {
			ul = usageLimit{claim: claim, resetAt: resetAt, wait: resetAt.Sub(now)}
			spent = true
		}
	}
	if lift, ok := ks.weeklyLift(now, start); ok {
		consider(claimSevenDay, lift)
	}
	if w := ks.seven; !w.fits(now, 1) {
		wait, _ := w.wait(now, 1)
		consider(claimSevenDay, now.Add(wait))
	}
	if w := ks.five; !w.fits(now, 1) {
		wait, _ := w.wait(now, 1)
		consider(claimFiveHour, now.Add(wait))
	}
	return ul, spent
}

// weeklyLift returns when the configured spent week lifts, and whether it
// is still spent at now.
func (ks *keyState) weeklyLift(now, start time.Time) (time.Time, bool) {
	if ks.cfg.WeeklySpent <= 0 {
		return time.Time{}, false
	}
	lift := start.Add(ks.cfg.WeeklySpent)
	return lift, now.Before(lift)
}

// refuse checks the RPM, RPD, TPM and TPD windows for one more request of
// total tokens, and returns the refusal that lifts last (one that never
// lifts, the request alone being over a token limit, first).
func (ks *keyState) refuse(now time.Time, total int64) (refusal, bool) {
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
	check("RPM", ks.rpm, 1)
	check("RPD", ks.rpd, 1)
	check("TPM", ks.tpm, total)
	check("TPD", ks.tpd, total)
	return rf, refused
}

// record enters an accepted request in the key's windows and history.
func (ks *keyState) record(now time.Time, prompt, completion int64, history int) {
	total := prompt + completion
	ks.rpm.add(now, 1)
	ks.rpd.add(now, 1)
	ks.tpm.add(now, total)
	ks.tpd.add(now, total)
	ks.inMin.add(now, prompt)
	ks.outMin.add(now, completion)
	ks.five.add(now, 1)
	ks.seven.add(now, 1)
	if history > 0 && len(ks.history) >= history {
		ks.history = ks.history[len(ks.history)-history+1:]
	}
	ks.history = append(ks.history, entry{at: now, n: total})
}

// The representative claims of Anthropic's unified windows.
const (
	claimFiveHour = "five_hour"
	claimSevenDay = "seven_day"
)

// state returns the key's windows as an answer reports them at now; refused
// names the subscription window that refused this request, or is "".
func (ks *keyState) state(now, start time.Time, refused string) *state {
	st := &state{
		now:      now,
		requests: binding(now, ks.rpm, ks.rpd),
		tokens:   binding(now, ks.tpm, ks.tpd),
		input:    report(now, ks.inMin),
		output:   report(now, ks.outMin),
	}
	if ks.subscription() {
		st.unified = ks.unified(now, start, refused)
	}
	return st
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

// unified returns the key's 5-hour and 7-day windows as Anthropic's unified
// headers report them.
func (ks *keyState) unified(now, start time.Time, refused string) *unified {
	window := func(w *slidingWindow, span time.Duration) claimWindow {
		if w == nil {
			return claimWindow{reset: now.Add(span)} // a window that would start now
		}
		return claimWindow{
			utilization: float64(w.used(now)) / float64(w.limit),
			reset:       now.Add(w.untilOldestLeaves(now)),
		}
	}
	u := &unified{five: window(ks.five, fiveHour), seven: window(ks.seven, sevenDay)}
	if lift, ok := ks.weeklyLift(now, start); ok {
		// The spent week lifts at lift, unless a full 7-day budget lifts later.
		u.seven.utilization = max(u.seven.utilization, 1)
		if ks.seven.fits(now, 1) || lift.After(u.seven.reset) {
			u.seven.reset = lift
		}
	}
	status := func(util float64) string {
		switch {
		case refused != "" && util >= 1:
			return "rejected"
		case util >= 0.8:
			return "allowed_warning"
		}
		return "allowed"
	}
	u.five.status, u.seven.status = status(u.five.utilization), status(u.seven.utilization)
	switch {
	case refused != "":
		u.claim, u.status = refused, "rejected"
	case u.seven.utilization > u.five.utilization:
		u.claim = claimSevenDay
	default:
		u.claim = claimFiveHour
	}
	if u.status == "" {
		u.status = "allowed"
		if u.five.status == "allowed_warning" || u.seven.status == "allowed_warning" {
			u.status = "allowed_warning"
		}
	}
	u.reset = u.five.reset
	if u.claim == claimSevenDay {
		u.reset = u.seven.reset
	}
	return u
}
