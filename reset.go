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
type Reset struct {
	// RetryAfter is the wait the answer asks for; meaningful when HasRetryAfter.
	RetryAfter    time.Duration
	HasRetryAfter bool
	// ResetAt is the horizon: when the binding limit lifts. It is set whenever
	// anything dates the lift — a window's reset, a vendor's reset header, or,
	// where only a retry-after speaks, now plus that wait. Zero if unknown.
	ResetAt time.Time
	// Window is the window the answer names or implies; empty when there is
	// no evidence of one.
	Window Window
	// Utilization is the fraction of the binding window used (1 = full; it
	// may exceed 1); meaningful when HasUtilization.
	Utilization    float64
	HasUtilization bool
}

// ParseRateLimitReset reads a vendor's rate-limit headers as of now.
func ParseRateLimitReset(h http.Header, now time.Time) Reset {
	var r Reset
	r.RetryAfter, r.HasRetryAfter = RetryAfterFromHeaders(h, now)
	if r.HasRetryAfter {
		r.ResetAt = now.Add(r.RetryAfter)
	}
	return r
}

// ParseUsageLimitBody reads a reset stated in an answer's body as of now.
func ParseUsageLimitBody(body []byte, now time.Time) Reset {
	return Reset{}
}

// RetryAfterFromHeaders returns how long the answer asks the caller to sleep,
// and whether it asks at all.
func RetryAfterFromHeaders(h http.Header, now time.Time) (time.Duration, bool) {
	return 0, false
}
