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
// header and body field goes through it (or through readTime and
// timeValue.wait, its two steps), so every wait is capped alike.
func parseWait(v string, now time.Time) (time.Duration, bool) {
	t := readTime(v)
	return t.wait(now)
}

// timeKind says what a timeValue holds.
type timeKind uint8

const (
	timeNone  timeKind = iota // no readable value
	timeWait                  // a countdown or a Go duration
	timeEpoch                 // a Unix time
	timeDate                  // an RFC 3339 time or an HTTP-date
)

// timeValue is a vendor time value read as far as it goes without the
// moment it is read at (see parseWait). It holds no pointer, so an answer's
// values are kept where they are read without the collector's notice. The
// zero timeValue is no value.
type timeValue struct {
	kind timeKind
	// d is the wait of a timeWait, capped at maxHorizon, and the unit
	// (time.Second or time.Millisecond) of a timeEpoch.
	d time.Duration
	// epoch is the Unix time of a timeEpoch, in units of d.
	epoch float64
	// sec and nsec are the moment of a timeDate, as time.Unix takes it.
	sec  int64
	nsec int32
}

// readTime reads a vendor time value as parseWait does, up to the wait,
// which needs the moment it is read at.
func readTime(v string) timeValue {
	v = trimSpace(v)
	if v == "" {
		return timeValue{}
	}
	// The values of most answers first: a whole number ("7",
	// "1741083132") or a whole number and a unit ("6ms"), neither of
	// which can hold a date's colon.
	if n, ok := parseWhole(v); ok {
		return timeOfNumber(float64(n))
	}
	if d, ok := simpleDuration(v); ok {
		return timeValue{kind: timeWait, d: min(d, maxHorizon)}
	}
	switch {
	case strings.IndexByte(v, ':') >= 0:
		return readDate(v)
	case isLetter(v[len(v)-1]):
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return timeValue{}
		}
		return timeValue{kind: timeWait, d: min(d, maxHorizon)}
	}
	f, ok := parseNumber(v)
	if !ok {
		return timeValue{}
	}
	return timeOfNumber(f)
}

// timeOfNumber reads a bare number by its size (see epochSecondsAbove).
func timeOfNumber(f float64) timeValue {
	switch {
	case f > epochMillisAbove:
		return timeValue{kind: timeEpoch, d: time.Millisecond, epoch: f}
	case f > epochSecondsAbove:
		return timeValue{kind: timeEpoch, d: time.Second, epoch: f}
	}
	return timeValue{kind: timeWait, d: waitOf(f, time.Second)}
}

// wait returns the wait from now until the moment t names, and whether t
// names one.
func (t *timeValue) wait(now time.Time) (time.Duration, bool) {
	switch t.kind {
	case timeWait:
		return t.d, true
	case timeEpoch:
		return waitUntilEpoch(t.epoch, t.d, now), true
	case timeDate:
		return waitUntil(t.sec, int64(t.nsec), now), true
	}
	return 0, false
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

// readDate reads an RFC 3339 time (Anthropic's resets) or an HTTP-date
// (Retry-After).
func readDate(v string) timeValue {
	if sec, ok := rfc3339UTC(v); ok {
		return timeValue{kind: timeDate, sec: sec}
	}
	var t time.Time
	var err error
	if isDigit(v[0]) {
		t, err = time.Parse(time.RFC3339, v)
	} else {
		t, err = http.ParseTime(v)
	}
	if err != nil {
		return timeValue{}
	}
	return timeValue{kind: timeDate, sec: t.Unix(), nsec: int32(t.Nanosecond())}
}

// rfc3339UTC reads an RFC 3339 time in the form Anthropic's resets take,
// whole seconds in UTC ("2025-04-30T13:32:11Z"), as seconds since the Unix
// epoch, as time.Parse reads it but without its general parsing. It reports
// false for any other text (a fraction, an offset), which time.Parse then
// reads.
func rfc3339UTC(v string) (int64, bool) {
	if len(v) != len("2006-01-02T15:04:05Z") ||
		v[4] != '-' || v[7] != '-' || v[10] != 'T' || v[13] != ':' || v[16] != ':' || v[19] != 'Z' {
		return 0, false
	}
	year, okYear := parseWhole(v[0:4])
	month, okMonth := twoDigits(v[5:7])
	day, okDay := twoDigits(v[8:10])
	hour, okHour := twoDigits(v[11:13])
	minute, okMinute := twoDigits(v[14:16])
	second, okSecond := twoDigits(v[17:19])
	if !(okYear && okMonth && okDay && okHour && okMinute && okSecond) ||
		month < 1 || month > 12 || day < 1 || day > daysIn(month, year) || hour > 23 || minute > 59 || second > 59 {
		return 0, false
	}
	return daysSinceEpoch(year, month, day)*86400 + hour*3600 + minute*60 + second, true
}

// twoDigits reads two decimal digits.
func twoDigits(v string) (int64, bool) {
	hi, lo := v[0]-'0', v[1]-'0' // a byte below '0' wraps above 9
	return int64(hi)*10 + int64(lo), hi <= 9 && lo <= 9
}

// daysIn returns the number of days in month of year (proleptic
// Gregorian).
func daysIn(month, year int64) int64 {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// daysSinceEpoch returns the days from 1970-01-01 to the date, for a year
// from 0 to 9999 (proleptic Gregorian; the count of days by eras of 400
// years, each of 146097 days, with March its first month).
func daysSinceEpoch(year, month, day int64) int64 {
	if month <= 2 {
		year-- // January and February end the year before
	}
	era := (year + 400) / 400 // year is at least -1
	yearOfEra := year + 400 - era*400
	dayOfYear := (153*((month+9)%12)+2)/5 + day - 1
	dayOfEra := yearOfEra*365 + yearOfEra/4 - yearOfEra/100 + dayOfYear
	return (era-1)*146097 + dayOfEra - 719468
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
	return waitUntil(n/per, (n%per)*int64(unit)+int64(math.Round(frac*float64(unit))), now)
}

// waitUntil returns the wait from now until the moment time.Unix(sec,
// nsec) names, for nsec within a few seconds' worth of nanoseconds of 0,
// bounded to [0, maxHorizon]: clampWait(time.Unix(sec, nsec).Sub(now)),
// without Sub's care for overflow, which seconds far apart cannot reach
// here.
func waitUntil(sec, nsec int64, now time.Time) time.Duration {
	// far is further apart than any wait within the bounds, in seconds.
	const far = uint64(maxHorizon/time.Second) + 10
	nowSec := now.Unix()
	switch {
	case sec > nowSec && uint64(sec)-uint64(nowSec) > far:
		return maxHorizon
	case sec < nowSec && uint64(nowSec)-uint64(sec) > far:
		return 0
	}
	return clampWait(time.Duration(sec-nowSec)*time.Second + time.Duration(nsec-int64(now.Nanosecond())))
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
