package keypool

import (
	"net/http"
	"time"
)

// verdict is what the pool learns from one answer: its kind, its reading, and
// whether the failure is a billing condition (a spent balance or credit),
// which benches the whole key for the billing bench rather than one model.
type verdict struct {
	kind    Kind
	reset   Reset
	billing bool
}

// Classify reads one vendor answer — its status, headers and (for failures)
// the start of its body — as of now, and says what kind of outcome it is and
// what it tells about when the limit lifts:
//
//   - rate: a 429 with no evidence of a long window; a 403 with a spent
//     window, a retry-after or a rate-limit message (GitHub); a short
//     window reported spent.
//   - quota: a 429, 400, 402 or 403 that names or implies a 5-hour, daily,
//     weekly or monthly window, or a spent balance, credit or spend limit.
//   - auth: a 401; a 403 that is a permission failure; a 400 that refuses
//     the key (Gemini's "API key not valid").
//   - transient: a 5xx, 529 included.
//   - none: a success, a bad request, an unknown model, a request too large.
//
// On a success the Reset is the full reading of the headers (see
// ParseRateLimitReset). On a rate or quota answer it counts only the windows
// that are spent, with the body filling what the headers leave unsaid. On
// any other answer window headers do not count: the Reset holds only the
// retry-after. It is pure: it holds no state and may be called from any
// goroutine.
func Classify(status int, h http.Header, body []byte, now time.Time) (Kind, Reset) {
	v := classify(status, h, body, now)
	return v.kind, v.reset
}

func classify(status int, h http.Header, body []byte, now time.Time) verdict {
	g := headerGroups(h)
	if g == 0 && status < 400 {
		return verdict{} // the common answer: a success without rate-limit headers
	}
	var e evidence
	readHeaders(h, g, now, &e)
	switch {
	case status < 400:
		return verdict{kind: KindNone, reset: e.reset(now, asReported)}
	case status >= 500:
		return verdict{kind: KindTransient, reset: e.reset(now, asRetryOnly)}
	case status == http.StatusUnauthorized:
		return verdict{kind: KindAuth, reset: e.reset(now, asRetryOnly)}
	case status == http.StatusPaymentRequired:
		return verdict{kind: KindQuota, billing: true, reset: e.reset(now, asLimited)}
	case status != http.StatusBadRequest && status != http.StatusForbidden && status != http.StatusTooManyRequests:
		return verdict{kind: KindNone, reset: e.reset(now, asRetryOnly)}
	}

	b := readBody(body, now)
	// named: the body names a long window or a usage limit.
	named := b.quota || (b.hasSpent && b.spent.window != WindowNone)
	e.fill(b.evidence)
	switch {
	case b.billing:
		return verdict{kind: KindQuota, billing: true, reset: e.reset(now, asLimited)}
	case status == http.StatusBadRequest && b.auth,
		status == http.StatusForbidden && !e.hasSpent && !e.hasRetryAfter && !b.throttled:
		return verdict{kind: KindAuth, reset: e.reset(now, asRetryOnly)}
	case b.tooLarge, status == http.StatusBadRequest && !named:
		return verdict{kind: KindNone, reset: e.reset(now, asRetryOnly)}
	case named, e.spent.window != WindowNone:
		return verdict{kind: KindQuota, reset: e.reset(now, asLimited)}
	}
	return verdict{kind: KindRate, reset: e.reset(now, asLimited)}
}
