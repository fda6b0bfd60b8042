package keypool

import (
	"net/http"
	"time"
)

// Window names the vendor window a reading speaks of. The empty Window means
// the answer gave no evidence of a long window: an ordinary throttle, never
// assumed short.
type Window string

// The windows a vendor answer can name or imply.
const (
	WindowNone    Window = ""
	Window5h      Window = "5h"
	WindowDaily   Window = "daily"
	WindowWeekly  Window = "weekly"
	WindowMonthly Window = "monthly"
)

// Reset is what one vendor answer says about when a limit lifts.
//
// RetryAfter answers "how long do I sleep"; ResetAt answers "when does the
// caller get the key back". They differ: a retry-after of 60 s next to a weekly
// window that lifts in three days gives RetryAfter 60 s and ResetAt in three
// days.
//
// No wait or horizon in a Reset is negative or further than 31 days away
// (maxHorizon), and ResetAt is never before the now it was read at.
type Reset struct {
	// RetryAfter is the wait the answer asks for — in a Retry-After header,
	// else in the body ("Please try again in 26.604s", Gemini's retryDelay);
	// meaningful when HasRetryAfter.
	RetryAfter    time.Duration
	HasRetryAfter bool
	// ResetAt is the horizon: when the binding limit lifts. It is set whenever
	// anything dates the lift — a spent window's reset, a vendor's reset
	// header, or, where only a retry-after speaks, now plus that wait. A spent
	// window's reset outranks the retry-after. Zero if unknown.
	ResetAt time.Time
	// Window is the window the answer names or implies; empty when there is
	// no evidence of one, or when its reset has already come. When several
	// windows are spent it is the one that lifts last.
	Window Window
	// Utilization is the fraction of the binding window used (1 = full; it
	// may exceed 1); meaningful when HasUtilization. It is set only where the
	// answer states numbers: a remaining count and limit, a utilization or a
	// used percent.
	Utilization    float64
	HasUtilization bool
}

// ParseRateLimitReset reads a vendor's rate-limit headers as of now, as they
// stand, whatever the status of the answer. The binding window is the spent
// one that lifts last; when none is spent, the one the vendor's
// representative claim names (Anthropic's subscriptions), else the
// most-utilized one (ties go to the later reset), so that a caller can warn
// before a window fills. A reset header without a count dates a limit
// without saying how full it is. A window whose reset has already come has
// rolled over: it names no window and states no utilization. An answer
// without rate-limit headers gives the zero Reset.
//
// The header map must have canonical keys, as net/http gives them. It is
// pure and safe to call from any goroutine.
func ParseRateLimitReset(h http.Header, now time.Time) Reset {
	var a answerHeaders
	scanHeaders(h, &a)
	if a.empty() {
		return Reset{}
	}
	var e evidence
	readHeaders(h, &a, now, &e)
	return e.reset(now, asReported)
}

// ParseUsageLimitBody reads what an error body says about when a limit lifts,
// as of now: a delay stated in prose ("try again in 7m12s", "644ms", "retry
// after 86400 seconds"), Gemini's RetryInfo and QuotaFailure, the ChatGPT
// backend's usage_limit_reached resets (a horizon, whose length implies the
// window), OpenRouter's rate-limit fields, a router's cooldown reset, a reset
// date stated in prose. A body that says nothing of the kind gives the zero
// Reset. It is pure and safe to call from any goroutine.
func ParseUsageLimitBody(body []byte, now time.Time) Reset {
	b := readBody(body, now)
	return b.reset(now, asReported)
}

// RetryAfterFromHeaders returns how long the answer asks the caller to sleep,
// and whether it asks at all: retry-after-ms, then Azure's
// x-ms-retry-after-ms, then Retry-After in seconds or as an HTTP-date. A date
// already past is a wait of 0; a wait beyond 31 days is 31 days. It is pure
// and safe to call from any goroutine.
func RetryAfterFromHeaders(h http.Header, now time.Time) (time.Duration, bool) {
	if d, ok := parseMillis(first(h, headerRetryAfterMs)); ok {
		return d, true
	}
	if d, ok := parseMillis(first(h, headerMsRetryAfterMs)); ok {
		return d, true
	}
	return parseWait(first(h, headerRetryAfter), now)
}

// limitEvidence is what an answer says about one limit it reports.
type limitEvidence struct {
	window   Window        // the window the limit counts; "" for a short or unknown one
	used     float64       // the fraction used; meaningful when hasUsed
	hasUsed  bool          // the limit states how much of it is used
	spent    bool          // the limit admits nothing more until it lifts
	wait     time.Duration // until the limit lifts; meaningful when hasReset
	hasReset bool          // the answer dates the lift
	// limit and remaining are the counts the answer states, when it does
	// (limit 0: not stated).
	limit, remaining float64
}

// evidence gathers what one answer reports and keeps the limits that bind:
// the spent one that lifts last, the one the vendor names as binding, and
// the most-used of the others.
type evidence struct {
	retryAfter    time.Duration
	hasRetryAfter bool
	spent         limitEvidence // valid when hasSpent
	hasSpent      bool
	fullest       limitEvidence // valid when hasFullest
	hasFullest    bool
	// claimed is the limit the vendor's representative claim names as the
	// one that binds (Anthropic's subscriptions); valid when hasClaimed.
	claimed    limitEvidence
	hasClaimed bool
	// creditsSpent: the headers say the account's credits are spent.
	creditsSpent bool
	// stated is what the headers state of the key's minute and day
	// windows, by axis.
	stated statedWindows
}

// add notes one limit.
func (e *evidence) add(l limitEvidence) {
	l = l.settled()
	switch {
	case l.spent:
		if !e.hasSpent || liftsLater(l, e.spent) {
			e.spent, e.hasSpent = l, true
		}
	case !e.hasFullest || fuller(l, e.fullest):
		e.fullest, e.hasFullest = l, true
	}
}

// claim notes the limit the vendor names as the binding one.
func (e *evidence) claim(l limitEvidence) {
	e.claimed, e.hasClaimed = l.settled(), true
}

// settled returns l as it stands now. A limit whose reset has come has
// lifted: the window it counted has rolled over, so it names no window and
// its counts no longer say how full anything is; it still dates the lift as
// now.
func (l limitEvidence) settled() limitEvidence {
	if l.hasReset && l.wait <= 0 {
		l.window, l.used, l.hasUsed = WindowNone, 0, false
	}
	return l
}

// fill completes what e (read from headers) leaves unsaid with what b (read
// from the body) says: headers outrank the body where both speak.
func (e *evidence) fill(b evidence) {
	if !e.hasRetryAfter {
		e.retryAfter, e.hasRetryAfter = b.retryAfter, b.hasRetryAfter
	}
	if !b.hasSpent {
		return
	}
	if !e.hasSpent {
		e.spent, e.hasSpent = b.spent, true
		return
	}
	if e.spent.window == WindowNone {
		e.spent.window = b.spent.window
	}
	if !e.spent.hasUsed {
		e.spent.used, e.spent.hasUsed = b.spent.used, b.spent.hasUsed
	}
	if !e.spent.hasReset {
		e.spent.wait, e.spent.hasReset = b.spent.wait, b.spent.hasReset
	}
}

// evidenceUse says which part of the evidence an answer lets count.
type evidenceUse int

const (
	// asReported counts every limit reported: a success, or a bare parse.
	asReported evidenceUse = iota
	// asLimited counts only spent limits: a rate or quota answer, where a
	// limit with room left is not what refused the request.
	asLimited
	// asRetryOnly counts only the retry-after: an answer that is no limit's
	// doing (a 5xx, an auth failure, a bad request), whose window headers
	// must not bench a key.
	asRetryOnly
)

// reset composes the Reset the evidence gives, as of now.
func (e *evidence) reset(now time.Time, use evidenceUse) Reset {
	out := Reset{RetryAfter: e.retryAfter, HasRetryAfter: e.hasRetryAfter}
	var b limitEvidence
	switch {
	case use == asRetryOnly:
	case e.hasSpent:
		b = e.spent
	case use != asReported:
	case e.hasClaimed:
		b = e.claimed
	case e.hasFullest:
		b = e.fullest
	}
	out.Window = b.window
	out.Utilization, out.HasUtilization = b.used, b.hasUsed
	switch {
	case b.hasReset && b.spent && b.wait > 0:
		out.ResetAt = now.Add(b.wait)
	case e.hasRetryAfter:
		out.ResetAt = now.Add(e.retryAfter)
	case b.hasReset:
		out.ResetAt = now.Add(b.wait)
	}
	return out
}

// windowRank orders windows by length: none, 5h, daily, weekly, monthly.
func windowRank(w Window) int {
	switch w {
	case Window5h:
		return 1
	case WindowDaily:
		return 2
	case WindowWeekly:
		return 3
	case WindowMonthly:
		return 4
	}
	return 0
}

// liftsLater reports whether a lifts after b: the later known reset; between
// unknown or equal resets, the longer window; else the one with a known reset.
func liftsLater(a, b limitEvidence) bool {
	if a.hasReset && b.hasReset && a.wait != b.wait {
		return a.wait > b.wait
	}
	if ra, rb := windowRank(a.window), windowRank(b.window); ra != rb {
		return ra > rb
	}
	return a.hasReset && !b.hasReset
}

// fuller reports whether a binds before b on an answer where neither is
// spent: the more used (a stated fraction beats none); ties go to the one
// that lifts later.
func fuller(a, b limitEvidence) bool {
	if a.hasUsed != b.hasUsed {
		return a.hasUsed
	}
	if a.used != b.used {
		return a.used > b.used
	}
	return liftsLater(a, b)
}
