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
	// plan: the window is a subscription's plan window (Anthropic's
	// unified 5-hour and 7-day, the ChatGPT backend's slots, a 5-hour or
	// weekly window named in prose), which counts every model of the key.
	plan bool
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

// add notes one limit, l settled (see settled) as it is noted.
func (e *evidence) add(l *limitEvidence) {
	l.settle()
	switch {
	case l.spent:
		if !e.hasSpent || liftsLater(l, &e.spent) {
			e.spent, e.hasSpent = *l, true
		}
	case !e.hasFullest || fuller(l, &e.fullest):
		e.fullest, e.hasFullest = *l, true
	}
}

// claim notes the limit the vendor names as the binding one, l settled
// as it is noted.
func (e *evidence) claim(l *limitEvidence) {
	l.settle()
	e.claimed, e.hasClaimed = *l, true
}

// settle makes l what it says as it stands now. A limit whose reset has
// come has lifted: the window it counted has rolled over, so it names no
// window and its counts no longer say how full anything is; it still dates
// the lift as now. Settling a settled limit changes nothing.
func (l *limitEvidence) settle() {
	if l.hasReset && l.wait <= 0 {
		l.window, l.used, l.hasUsed = WindowNone, 0, false
	}
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
		e.spent.window, e.spent.plan = b.spent.window, b.spent.plan
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

// unbound is the limit binding returns when none binds: the zero
// limitEvidence, never written.
var unbound limitEvidence

// binding returns the limit whose window the Reset of use names: the spent
// one, else (as reported) the claimed or the fullest; unbound for none.
// It points into e (or at unbound) and is only read.
func (e *evidence) binding(use evidenceUse) *limitEvidence {
	switch {
	case use == asRetryOnly:
	case e.hasSpent:
		return &e.spent
	case use != asReported:
	case e.hasClaimed:
		return &e.claimed
	case e.hasFullest:
		return &e.fullest
	}
	return &unbound
}

// reset composes the Reset the evidence gives, as of now.
func (e *evidence) reset(now time.Time, use evidenceUse) Reset {
	out := Reset{RetryAfter: e.retryAfter, HasRetryAfter: e.hasRetryAfter}
	b := e.binding(use)
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
func liftsLater(a, b *limitEvidence) bool {
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
func fuller(a, b *limitEvidence) bool {
	if a.hasUsed != b.hasUsed {
		return a.hasUsed
	}
	if a.used != b.used {
		return a.used > b.used
	}
	return liftsLater(a, b)
}

// verdict is what the pool learns from one answer: its kind, its reading,
// whether the failure is a billing condition (a spent balance or credit),
// which benches the whole key for the billing bench rather than one model,
// and whether the request alone was too large for the limit it hit.
type verdict struct {
	kind    Kind
	reset   Reset
	billing bool
	// oversized: a rate answer to a request larger on its own than the
	// key's per-minute limit ("Request too large"). No wait and no other
	// key of that size serves it, so the pool neither benches the key nor
	// fails over: the answer goes back to the caller.
	oversized bool
	// quoted: the kind rests on words the request could have written (a
	// 400 or 403 whose prose alone says it; see quoted). It benches
	// nothing unless another key serves the same request.
	quoted bool
	// echo names the conditions of a quoted verdict its prose said: a
	// request without their words cannot have written it (mayHaveWritten).
	// Zero when the status alone gave the kind.
	echo signs
	// again: a bad moment (KindTransient) of a request whose earlier
	// attempt, on another key, had one: evidence of the request, or of the
	// vendor, more than of this key. It benches nothing, and the answer
	// goes back to the caller.
	again bool
	// plan: the window the reading names is a subscription's plan window,
	// spent on the key as a whole, so a bench holds every model of it.
	plan bool
	// stated is what the answer's headers state of the key's minute and
	// day windows: limits and counts the pool learns.
	stated statedWindows
}

// dailyRetry is the shortest retry-after that, with no other sign, is read
// as a daily quota rather than a throttle.
const dailyRetry = 24 * time.Hour

// Classify reads one vendor answer — its status, headers and (for failures)
// the start of its body — as of now, and says what kind of outcome it is and
// what it tells about when the limit lifts:
//
//   - rate: a 429 with no evidence of a long window; a 403 with a spent
//     window, a retry-after or a rate-limit message (GitHub); a short
//     window reported spent. A 429 saying the request alone is larger than
//     the per-minute limit ("Request too large") is rate too: it is the
//     rate limit that refuses it, but no wait cures it, so the pool neither
//     benches the key nor tries another and returns the answer as is.
//   - quota: a 429, 400, 402 or 403 that names or implies a 5-hour, daily,
//     weekly or monthly window; a spent balance, credit or spend limit; a
//     usage the plan does not include; a limit of 0 (no wait brings it
//     back); a router's own cooldown; a 429 whose only sign is a wait of a
//     day or more (its window is the shortest that fits the wait).
//   - auth: a 401; a 403 that is a permission failure; a 400 that refuses
//     the key (Gemini's "API key not valid").
//   - transient: a 5xx, 529 included, unless its body speaks of a spent
//     balance ("insufficient balance" in a 500: quota, billing); a 429 that
//     speaks of the vendor's overload ("engine overloaded") and names no
//     spent window.
//   - none: a success, a bad request, an unknown model, a 413.
//
// On a success the Reset is the full reading of the headers (see
// ParseRateLimitReset). On a rate or quota answer it counts only the windows
// that are spent, with the body filling what the headers leave unsaid; a
// limit of 0 dates no lift, and GitHub's secondary limit is dated by its
// x-ratelimit-reset. On any other answer window headers do not count: the
// Reset holds only the retry-after. It is pure: it holds no state and may be
// called from any goroutine.
func Classify(status int, h http.Header, body []byte, now time.Time) (Kind, Reset) {
	v := classify(status, h, body, now)
	return v.kind, v.reset
}

func classify(status int, h http.Header, body []byte, now time.Time) verdict {
	var v verdict
	classifyInto(&v, status, h, body, now)
	return v
}

// classifyInto is classify writing its verdict into v, which must be zero,
// where the caller keeps it: a verdict is some 200 bytes, and the transport
// classifies every answer.
func classifyInto(v *verdict, status int, h http.Header, body []byte, now time.Time) {
	var a answerHeaders
	scanHeaders(h, &a)
	if a.empty() && status < 400 {
		return // the common answer: a success without rate-limit headers
	}
	var e evidence
	readHeaders(h, &a, now, &e)
	judge(v, status, body, &e, now)
	v.stated = e.stated
}

// judge says into v, which must be zero, what an answer of status, with
// headers read into e, is — its kind and reading — reading the body of a
// failure that may say more.
func judge(v *verdict, status int, body []byte, e *evidence, now time.Time) {
	switch {
	case status < 400:
		// The common answer: its fields written where v is, not built
		// and copied.
		v.kind, v.reset, v.plan = KindNone, e.reset(now, asReported), e.binding(asReported).plan
		return
	case status == http.StatusUnauthorized:
		*v = verdict{kind: KindAuth, reset: e.reset(now, asRetryOnly)}
		if len(body) > 0 && readBody(body, now).billing {
			// A key refused for its spent credits (ElevenLabs' 401
			// quota_exceeded): out for every model all the same.
			v.kind, v.billing = KindQuota, true
		}
		return
	case status < 500 && status != http.StatusBadRequest && status != http.StatusPaymentRequired &&
		status != http.StatusForbidden && status != http.StatusTooManyRequests:
		*v = verdict{kind: KindNone, reset: e.reset(now, asRetryOnly)}
		return
	}

	b := readBody(body, now)
	vendor := b.coded | e.signs() // before the body's prose adds to e
	e.fill(b.evidence)
	*v = weigh(status, &b, e, now)
	if l := e.binding(asLimited); v.kind == KindQuota && l.plan && l.window == v.reset.Window {
		v.plan = true
	}
	quote(status, v, &b, vendor)
}

// weigh says what a failure of status is, with its headers and body read
// into e and b.
func weigh(status int, b *bodyEvidence, e *evidence, now time.Time) verdict {
	// named: the body names a long window or a usage limit.
	named := b.quota || (b.hasSpent && b.spent.window != WindowNone)
	switch {
	case status >= 500 && !b.billing:
		// The vendor's bad moment, unless its body speaks of money
		// ("insufficient balance" in a 500).
		return verdict{kind: KindTransient, reset: e.reset(now, asRetryOnly)}
	case status == http.StatusPaymentRequired, b.billing, e.creditsSpent:
		return verdict{kind: KindQuota, billing: true, reset: e.reset(now, asLimited)}
	case status == http.StatusBadRequest && b.auth,
		status == http.StatusForbidden && !e.hasSpent && !e.hasRetryAfter && !b.throttled:
		return verdict{kind: KindAuth, reset: e.reset(now, asRetryOnly)}
	case b.oversized:
		return verdict{kind: KindRate, oversized: true, reset: e.reset(now, asLimited)}
	case b.overloaded && status == http.StatusTooManyRequests && !named && !e.hasSpent:
		// Overload dressed as a 429 ("engine overloaded"): the vendor's
		// bad moment, which another key on the same engine shares.
		return verdict{kind: KindTransient, reset: e.reset(now, asRetryOnly)}
	case status == http.StatusBadRequest && !named:
		return verdict{kind: KindNone, reset: e.reset(now, asRetryOnly)}
	case b.noAllowance:
		// No wait brings a limit of 0 back: nothing dates the lift, and no
		// window is what stands in the way.
		return verdict{kind: KindQuota, reset: Reset{RetryAfter: e.retryAfter, HasRetryAfter: e.hasRetryAfter}}
	case named, e.spent.window != WindowNone:
		return verdict{kind: KindQuota, reset: e.reset(now, asLimited)}
	case e.hasRetryAfter && e.retryAfter >= dailyRetry:
		r := e.reset(now, asLimited)
		r.Window = windowOfRetry(e.retryAfter)
		return verdict{kind: KindQuota, reset: r}
	}
	r := e.reset(now, asLimited)
	if b.secondary && r.ResetAt.IsZero() && e.hasFullest && e.fullest.hasReset {
		// GitHub's secondary limit: the primary window's reset dates it
		// although that window has room.
		r.ResetAt = now.Add(e.fullest.wait)
	}
	return verdict{kind: KindRate, reset: r}
}

// windowOfRetry names the window a retry-after of a day or more implies
// when nothing else names one: the shortest window that fits the wait (a
// day and an hour, for a wait rounded up), the daily one for a day.
func windowOfRetry(d time.Duration) Window {
	switch {
	case d <= dailyRetry+time.Hour:
		return WindowDaily
	case d <= 7*dailyRetry+time.Hour:
		return WindowWeekly
	}
	return WindowMonthly
}

// longThrottle is the longest wait a throttle of a short window takes; a
// spent window that lifts later is a quota.
const longThrottle = 10 * time.Minute

// exhausted reports that a reading says its binding window is full and
// dates when it resets.
func (r Reset) exhausted(now time.Time) bool {
	return r.HasUtilization && r.Utilization >= 1 && r.ResetAt.After(now)
}
