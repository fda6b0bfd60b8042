package keypool

import (
	"bytes"
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
// what it tells about when the limit lifts. It is pure: it holds no state and
// may be called from any goroutine.
func Classify(status int, h http.Header, body []byte, now time.Time) (Kind, Reset) {
	v := classify(status, h, body, now)
	return v.kind, v.reset
}

func classify(status int, h http.Header, body []byte, now time.Time) verdict {
	v := verdict{reset: ParseRateLimitReset(h, now)}
	switch {
	case status == http.StatusTooManyRequests:
		v.kind = KindRate
		if bytes.Contains(body, []byte("insufficient_quota")) {
			v.kind, v.billing = KindQuota, true
		}
	case status == http.StatusPaymentRequired:
		v.kind, v.billing = KindQuota, true
	case status == http.StatusUnauthorized:
		v.kind = KindAuth
	case status == http.StatusForbidden:
		v.kind = KindAuth
		if h.Get("X-Ratelimit-Remaining") == "0" {
			v.kind = KindRate
		}
	case status == http.StatusBadRequest && bytes.Contains(body, []byte("credit balance is too low")):
		v.kind, v.billing = KindQuota, true
	case status >= 500:
		v.kind = KindTransient
	}
	if v.kind == KindNone || v.kind == KindTransient {
		// Window readings count only on a rate or quota answer.
		if v.kind == KindTransient {
			v.reset = Reset{RetryAfter: v.reset.RetryAfter, HasRetryAfter: v.reset.HasRetryAfter}
		}
	}
	return v
}
