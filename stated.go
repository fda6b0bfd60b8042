package keypool

import (
	"math"
	"time"
)

// A vendor that states its limits on every answer — OpenAI's
// x-ratelimit-limit-requests, Anthropic's anthropic-ratelimit-*-limit, the
// IETF RateLimit-Policy — lets the pool follow the vendor rather than its
// configuration: what an answer states of each window is gathered here, by
// axis, and the pool tells its store (Store.Learn).

// windowAxis is the window a stated limit counts: requests or tokens, per minute
// or per day; axisNone for a limit of another length, which the pool's
// windows do not keep.
type windowAxis uint8

const (
	axisNone windowAxis = iota
	axisRPM
	axisRPD
	axisTPM
	axisTPD
)

// axisOfLength returns the axis of a limit of requests (or tokens) over a
// window of the given length: a minute or a day, or none.
func axisOfLength(length time.Duration, requests bool) windowAxis {
	switch {
	case length == time.Minute && requests:
		return axisRPM
	case length == time.Minute:
		return axisTPM
	case length == 24*time.Hour && requests:
		return axisRPD
	case length == 24*time.Hour:
		return axisTPD
	}
	return axisNone
}

// statedWindows is what one answer stated of a key's minute and day
// windows: each axis's limit (0: not stated) and count used (-1: not
// stated), and when the minute's and the day's counts reset (a wait from
// the answer; 0: not stated).
type statedWindows struct {
	limits              Limits
	used                Limits
	minuteWait, dayWait time.Duration
	any                 bool
}

// note records a limit of axis a with remaining units left of limit (0 or
// less: the limit is not stated), resetting in wait when hasWait.
func (s *statedWindows) note(a windowAxis, limit, remaining float64, wait time.Duration, hasWait bool) {
	if a == axisNone || math.IsNaN(remaining) || remaining < 0 {
		return
	}
	if !s.any {
		s.used = Limits{RPM: -1, RPD: -1, TPM: -1, TPD: -1}
		s.any = true
	}
	lim, used := int64(0), int64(-1)
	if limit > 0 && limit < 1<<53 {
		lim = int64(limit)
		used = int64(max(limit-remaining, 0))
	}
	minute := a == axisRPM || a == axisTPM
	switch a {
	case axisRPM:
		s.limits.RPM, s.used.RPM = lim, used
	case axisRPD:
		s.limits.RPD, s.used.RPD = lim, used
	case axisTPM:
		s.limits.TPM, s.used.TPM = lim, used
	case axisTPD:
		s.limits.TPD, s.used.TPD = lim, used
	}
	if hasWait && minute {
		s.minuteWait = max(s.minuteWait, wait)
	} else if hasWait {
		s.dayWait = max(s.dayWait, wait)
	}
}
