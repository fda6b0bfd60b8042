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
	tally      tally // an accepted request's tokens; zero otherwise
	// cached and written are an accepted request's prompt tokens read from
	// the prompt cache and written to it.
	cached, written int64
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
	// cacheReadsFree leaves the prompt tokens read from the cache out of
	// the token windows, as Anthropic does.
	cacheReadsFree bool
}

// decide decides the answer to one request, records it in the key's windows
// and counters, and returns it. Its order: the script first, then a revoked
// key, a malformed request, a spent balance, a spent subscription window, a
// fault, the RPM/RPD/TPM/TPD windows (the account's, for a key of an
// account); what passes them all is accepted.
//
// It holds the key's lock, and the account's after it, for the whole
// decision, so that checking and recording a request in the windows is one
// step however many keys share them.
func (ks *keyState) decide(q ask) decision {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	now := later(q.now, ks.last) // windows need times that never go back
	if a := ks.account; a != nil {
		a.mu.Lock()
		defer a.mu.Unlock()
		now = later(now, a.last) // another key of the account may have read the clock later
		a.last = now
	}
	ks.last = now
	d := ks.decideLocked(now, q)
	d.now = now
	ks.counts.add(d.class, d.out == outScript, d.tally)
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
	cached, written := ks.cacheLookup(now, q.req)
	prompt := q.req.prompt // as the token windows count it
	if q.cacheReadsFree {
		prompt -= cached
	}
	total := prompt + completion
	if rf, refused := ks.windows().refuse(now, total); refused {
		return decision{out: outRateLimit, class: classRateLimited, refusal: rf, st: ks.state(now, q.start, "")}
	}
	ks.record(now, prompt, completion, q.history)
	if pc := ks.promptCache(); pc != nil {
		pc.store(now, q.req.prefixes)
	}
	return decision{
		out: outServe, class: classServed, completion: completion, truncated: truncated, st: ks.state(now, q.start, ""),
		tally:  tally{tokens: total, input: q.req.prompt, cached: cached},
		cached: cached, written: written,
	}
}

// cacheLookup returns how many of req's prompt tokens the key's prompt
// cache holds at now (its longest cached prefix), and how many more its
// messages hold, which serving req writes to the cache; both 0 when the
// cache is off. Neither is more than the prompt.
func (ks *keyState) cacheLookup(now time.Time, req request) (cached, written int64) {
	pc := ks.promptCache()
	if pc == nil || len(req.prefixes) == 0 {
		return 0, 0
	}
	if n := pc.lookup(now, req.prefixes); n > 0 {
		cached = min(req.prefixes[n-1].tokens, req.prompt)
	}
	all := min(req.prefixes[len(req.prefixes)-1].tokens, req.prompt)
	return cached, all - cached
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

// record enters an accepted request in the windows the key is held to (its
// own or its account's), its subscription windows and the histories.
func (ks *keyState) record(now time.Time, prompt, completion int64, history int) {
	ks.windows().record(now, prompt, completion)
	ks.five.add(now, 1)
	ks.seven.add(now, 1)
	e := entry{at: now, n: prompt + completion}
	ks.history = appendHistory(ks.history, e, history)
	if a := ks.account; a != nil {
		a.history = appendHistory(a.history, e, history)
	}
}

// The representative claims of Anthropic's unified windows.
const (
	claimFiveHour = "five_hour"
	claimSevenDay = "seven_day"
)

// state returns the windows the key is held to as an answer reports them at
// now; refused names the subscription window that refused this request, or
// is "".
func (ks *keyState) state(now, start time.Time, refused string) *state {
	st := &state{now: now}
	ks.windows().report(st)
	if ks.subscription() {
		st.unified = ks.unified(now, start, refused)
	}
	return st
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

// later returns the later of two times.
func later(a, b time.Time) time.Time {
	if a.Before(b) {
		return b
	}
	return a
}
