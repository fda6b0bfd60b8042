package keypool

import (
	"net/http"
	"time"
)

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
	var a answerHeaders
	scanHeaders(h, &a)
	if a.empty() && status < 400 {
		return verdict{} // the common answer: a success without rate-limit headers
	}
	var e evidence
	readHeaders(h, &a, now, &e)
	v := judge(status, body, &e, now)
	v.stated = e.stated
	return v
}

// judge says what an answer of status, with headers read into e, is — its
// kind and reading — reading the body of a failure that may say more.
func judge(status int, body []byte, e *evidence, now time.Time) verdict {
	switch {
	case status < 400:
		return verdict{kind: KindNone, reset: e.reset(now, asReported)}
	case status == http.StatusUnauthorized:
		v := verdict{kind: KindAuth, reset: e.reset(now, asRetryOnly)}
		if len(body) > 0 && readBody(body, now).billing {
			// A key refused for its spent credits (ElevenLabs' 401
			// quota_exceeded): out for every model all the same.
			v.kind, v.billing = KindQuota, true
		}
		return v
	case status < 500 && status != http.StatusBadRequest && status != http.StatusPaymentRequired &&
		status != http.StatusForbidden && status != http.StatusTooManyRequests:
		return verdict{kind: KindNone, reset: e.reset(now, asRetryOnly)}
	}

	b := readBody(body, now)
	vendor := b.coded | e.signs() // before the body's prose adds to e
	e.fill(b.evidence)
	v := weigh(status, &b, e, now)
	quote(status, &v, &b, vendor)
	return v
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
