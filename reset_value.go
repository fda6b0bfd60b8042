package keypool

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// maxHorizon caps every wait and every horizon a reading reports: a vendor
// value further away than 31 days is read as 31 days away. No vendor window
// is longer than a month, so a larger value is a unit mistake or garbage,
// and it must not bench a key for years.
const maxHorizon = 31 * 24 * time.Hour

// Bare numbers in reset fields are read by size: above epochMillisAbove as
// Unix milliseconds (OpenRouter), above epochSecondsAbove as Unix seconds
// (GitHub, Anthropic's and the ChatGPT backend's subscription windows,
// gitlab.com's RateLimit-Reset), otherwise as a countdown in seconds
// (Retry-After, Cerebras, the IETF fields). Both bounds are 2001-09-09.
const (
	epochSecondsAbove = 1e9
	epochMillisAbove  = 1e12
)

// parseWait reads one vendor time value as the wait from now until the
// moment it names. It accepts a countdown in seconds ("7", "1.5",
// "33011.38"), a Unix time in seconds or milliseconds (see
// epochSecondsAbove), a Go duration ("20ms", "6m0s", "2m59.56s"), an RFC 3339
// time and an HTTP-date in any of its three forms. A moment already past is a
// wait of 0; a wait beyond maxHorizon is maxHorizon. It reports false for an
// empty, negative, NaN, infinite or unreadable value.
//
// It is the one place the package turns a time value into a wait: every
// header and body field goes through it, so every wait is capped alike.
func parseWait(v string, now time.Time) (time.Duration, bool) {
	v = trimSpace(v)
	switch {
	case v == "":
		return 0, false
	case strings.IndexByte(v, ':') >= 0:
		return waitUntilDate(v, now)
	case isLetter(v[len(v)-1]):
		d, ok := simpleDuration(v)
		if !ok {
			var err error
			if d, err = time.ParseDuration(v); err != nil {
				return 0, false
			}
		}
		if d < 0 {
			return 0, false
		}
		return min(d, maxHorizon), true
	}
	f, ok := parseNumber(v)
	switch {
	case !ok:
		return 0, false
	case f > epochMillisAbove:
		return waitUntilEpoch(f, time.Millisecond, now), true
	case f > epochSecondsAbove:
		return waitUntilEpoch(f, time.Second, now), true
	}
	return waitOf(f, time.Second), true
}

// trimSpace is strings.TrimSpace for a header value, which seldom has
// space around it: a value that starts and ends with ASCII that is no
// space is returned as it is.
func trimSpace(v string) string {
	if v != "" && v[0] > ' ' && v[0] < utf8.RuneSelf && v[len(v)-1] > ' ' && v[len(v)-1] < utf8.RuneSelf {
		return v
	}
	return strings.TrimSpace(v)
}

// simpleDuration reads a Go duration of one whole number and one unit
// ("6ms", "0s", "30m"), the reset OpenAI sends on most answers, as
// time.ParseDuration reads it but without its lookup of the unit. It
// reports false for any other text, which time.ParseDuration then reads.
func simpleDuration(v string) (time.Duration, bool) {
	digits := 0
	for digits < len(v) && digits < 12 && isDigit(v[digits]) {
		digits++
	}
	if digits == 0 {
		return 0, false
	}
	var unit time.Duration
	switch v[digits:] {
	case "ms":
		unit = time.Millisecond
	case "s":
		unit = time.Second
	case "m":
		unit = time.Minute
	case "h":
		unit = time.Hour
	case "us":
		unit = time.Microsecond
	case "ns":
		unit = time.Nanosecond
	default:
		return 0, false
	}
	n, _ := parseWhole(v[:digits])
	if n > int64(math.MaxInt64/unit) {
		return 0, false // time.ParseDuration says what overflows
	}
	return time.Duration(n) * unit, true
}

// parseMillis reads a countdown in milliseconds, as retry-after-ms and
// x-ms-retry-after-ms carry it, capped at maxHorizon. It reports false for
// an empty, negative, NaN, infinite or unreadable value.
func parseMillis(v string) (time.Duration, bool) {
	f, ok := parseNumber(trimSpace(v))
	if !ok {
		return 0, false
	}
	return waitOf(f, time.Millisecond), true
}

// parseNumber reads a finite, non-negative decimal number.
func parseNumber(v string) (float64, bool) {
	if v == "" {
		return 0, false // absent: not worth strconv's error
	}
	if n, ok := parseWhole(v); ok {
		return float64(n), true
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		return 0, false
	}
	return f, true
}

// parseWhole reads a whole number of up to 15 digits, the common case of a
// header value, without strconv's general parsing.
func parseWhole(v string) (int64, bool) {
	if len(v) > 15 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(v); i++ {
		d := v[i] - '0' // a byte below '0' wraps above 9
		if d > 9 {
			return 0, false
		}
		n = n*10 + int64(d)
	}
	return n, true
}

// waitUntilDate reads an RFC 3339 time (Anthropic's resets) or an HTTP-date
// (Retry-After) as the wait from now until it, 0 when it is past.
func waitUntilDate(v string, now time.Time) (time.Duration, bool) {
	var t time.Time
	var err error
	if isDigit(v[0]) {
		t, err = time.Parse(time.RFC3339, v)
	} else {
		t, err = http.ParseTime(v)
	}
	if err != nil {
		return 0, false
	}
	return clampWait(t.Sub(now)), true
}

// waitUntilEpoch returns the wait from now until the Unix time f, counted in
// unit (time.Second or time.Millisecond), 0 when it is past. Whole values are
// converted exactly, so a reset stated to the second lands on that second.
func waitUntilEpoch(f float64, unit time.Duration, now time.Time) time.Duration {
	perSecond := float64(time.Second / unit)
	if f/perSecond > float64(now.Unix())+maxHorizon.Seconds() {
		return maxHorizon
	}
	whole, frac := math.Modf(f)
	n, per := int64(whole), int64(perSecond)
	t := time.Unix(n/per, (n%per)*int64(unit)+int64(math.Round(frac*float64(unit))))
	return clampWait(t.Sub(now))
}

// waitOf returns f units as a duration, capped at maxHorizon.
func waitOf(f float64, unit time.Duration) time.Duration {
	if f*float64(unit) >= float64(maxHorizon) {
		return maxHorizon
	}
	return time.Duration(math.Round(f * float64(unit)))
}

// clampWait bounds a wait to [0, maxHorizon].
func clampWait(d time.Duration) time.Duration {
	return min(max(d, 0), maxHorizon)
}

func isDigit(c byte) bool  { return '0' <= c && c <= '9' }
func isLetter(c byte) bool { return 'a' <= c|0x20 && c|0x20 <= 'z' }
