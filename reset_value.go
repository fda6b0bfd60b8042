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
// header and body field goes through it (or through its two steps,
// timeValue.read and timeValue.wait), so every wait is capped alike.
func parseWait(v string, now time.Time) (time.Duration, bool) {
	var t timeValue
	t.read(v)
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
	// n is the wait of a timeWait in nanoseconds, capped at maxHorizon;
	// the unit of a timeEpoch (time.Second or time.Millisecond); the
	// seconds of a timeDate, and nsec its nanoseconds, as time.Unix takes
	// them.
	nsec int32
	n    int64
	// epoch is the Unix time of a timeEpoch, in units of n.
	epoch float64
}

// read sets t to the vendor time value v, read as parseWait reads it up to
// the wait, which needs the moment it is read at.
func (t *timeValue) read(v string) {
	v = trimSpace(v)
	// The values of most answers first: a whole number ("7",
	// "1741083132"), a whole number and a unit ("6ms") and an RFC 3339
	// time, none of which needs the search for a date's colon.
	if v != "" && isDigit(v[len(v)-1]) {
		if n, ok := parseWhole(v); ok {
			t.number(float64(n))
			return
		}
	}
	n, digits := leadingWhole(v)
	switch {
	case v == "":
		*t = timeValue{}
		return
	case digits == 4:
		// The year of a date, and of Anthropic's resets, an RFC 3339
		// time in whole seconds of UTC.
		if sec, ok := rfc3339UTC(v); ok {
			*t = timeValue{kind: timeDate, n: sec}
			return
		}
	}
	if d, ok := simpleDuration(v, n, digits); ok {
		*t = timeValue{kind: timeWait, n: int64(min(d, maxHorizon))}
		return
	}
	t.readOther(v)
}

// readOther sets t to the vendor time value v, trimmed, that is neither a
// whole number nor a whole number with a unit.
func (t *timeValue) readOther(v string) {
	switch {
	case strings.IndexByte(v, ':') >= 0:
		t.readDate(v)
	case isLetter(v[len(v)-1]):
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			*t = timeValue{}
			return
		}
		*t = timeValue{kind: timeWait, n: int64(min(d, maxHorizon))}
	default:
		f, ok := parseNumber(v)
		if !ok {
			*t = timeValue{}
			return
		}
		t.number(f)
	}
}

// number sets t to a bare number, read by its size (see
// epochSecondsAbove).
func (t *timeValue) number(f float64) {
	switch {
	case f > epochMillisAbove:
		*t = timeValue{kind: timeEpoch, n: int64(time.Millisecond), epoch: f}
	case f > epochSecondsAbove:
		*t = timeValue{kind: timeEpoch, n: int64(time.Second), epoch: f}
	default:
		*t = timeValue{kind: timeWait, n: int64(waitOf(f, time.Second))}
	}
}

// wait returns the wait from now until the moment t names, and whether t
// names one.
func (t *timeValue) wait(now time.Time) (time.Duration, bool) {
	if t.kind == timeWait {
		return time.Duration(t.n), true // the common value, without a call
	}
	return t.waitFrom(now)
}

// waitFrom is wait for a value that is not a timeWait.
func (t *timeValue) waitFrom(now time.Time) (time.Duration, bool) {
	switch t.kind {
	case timeEpoch:
		return waitUntilEpoch(t.epoch, time.Duration(t.n), now), true
	case timeDate:
		return waitUntil(t.n, int64(t.nsec), now), true
	}
	return 0, false
}

// trimSpace is strings.TrimSpace for a header value, which seldom has
// space around it: a value that starts and ends with ASCII that is no
// space is returned as it is.
func trimSpace(v string) string {
	if len(v) == 0 || v[0]-'!' >= utf8.RuneSelf-'!' || v[len(v)-1]-'!' >= utf8.RuneSelf-'!' { // a byte below '!' wraps above
		return strings.TrimSpace(v)
	}
	return v
}

// maxDurationDigits bounds the digits of the number simpleDuration reads;
// a longer one is left to time.ParseDuration.
const maxDurationDigits = 12

// simpleDuration reads a Go duration of one whole number and one unit
// ("6ms", "0s", "30m"), the reset OpenAI sends on most answers, as
// time.ParseDuration reads it but without its lookup of the unit; n and
// digits are what leadingWhole says of v. It reports false for any other
// text, which time.ParseDuration then reads.
func simpleDuration(v string, n int64, digits int) (time.Duration, bool) {
	if digits == 0 || digits > maxDurationDigits {
		return 0, false
	}
	return withUnit(n, v[digits:])
}

// withUnit returns n of the Go duration unit named ("ms", "s", "m", "h",
// "us", "ns"); it reports false for any other unit and where n of it
// overflows, as time.ParseDuration says. The unit is told by its length
// and its bytes: a switch on the string costs a request about a hundred
// instructions more, on two resets.
func withUnit(n int64, unit string) (time.Duration, bool) {
	var u time.Duration
	switch {
	case len(unit) == 1:
		switch unit[0] {
		case 's':
			u = time.Second
		case 'm':
			u = time.Minute
		case 'h':
			u = time.Hour
		}
	case len(unit) == 2 && unit[1] == 's':
		switch unit[0] {
		case 'm':
			u = time.Millisecond
		case 'u':
			u = time.Microsecond
		case 'n':
			u = time.Nanosecond
		}
	}
	if u == 0 || n > int64(math.MaxInt64/u) {
		return 0, false
	}
	return time.Duration(n) * u, true
}

// leadingWhole returns the whole number that the leading digits of v make,
// up to 15 of them, and how many there are.
func leadingWhole(v string) (n int64, digits int) {
	for ; digits < len(v) && digits < maxWholeDigits; digits++ {
		d := v[digits] - '0' // a byte below '0' wraps above 9
		if d > 9 {
			break
		}
		n = n*10 + int64(d)
	}
	return n, digits
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
	if f, ok := parseDecimal(v); ok {
		return f, true
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		return 0, false
	}
	return f, true
}

// parseDecimal reads a decimal number of up to 15 digits with a point
// between them ("0.72", "1.5"), as strconv.ParseFloat reads it but without
// its general parsing: the digits make a whole number that a float64 holds
// exactly, and so does the power of ten that divides it, so their quotient
// is the number rounded once, as ParseFloat rounds it. It reports false for
// any other text.
func parseDecimal(v string) (float64, bool) {
	point := strings.IndexByte(v, '.')
	if point < 1 || point == len(v)-1 || len(v) > maxWholeDigits+1 {
		return 0, false
	}
	whole, okWhole := parseWhole(v[:point])
	frac, okFrac := parseWhole(v[point+1:])
	if !okWhole || !okFrac {
		return 0, false
	}
	scale := pow10[len(v)-point-1]
	return float64(whole*int64(scale)+frac) / scale, true
}

// pow10 holds the powers of ten a float64 holds exactly that parseDecimal
// needs.
var pow10 = [...]float64{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15}

// maxWholeDigits bounds the digits parseWhole reads: any whole number of
// them is exact as a float64.
const maxWholeDigits = 15

// parseWhole reads a whole number of up to 15 digits, the common case of a
// header value, without strconv's general parsing; one of four digits or
// more is read four or eight digits at a time.
func parseWhole(v string) (int64, bool) {
	switch {
	case len(v) > maxWholeDigits:
		return 0, false
	case len(v) >= 8:
		// The first and the last eight bytes, which overlap unless there
		// are 16: the first are shifted to leave the digits the last do
		// not hold, after as many zeros.
		first, last := word(v, 0), word(v, len(v)-8)
		if !eightDigits(first) || !eightDigits(last) {
			return 0, false
		}
		return int64(digitsValue(first<<(8*(16-len(v)))))*1e8 + int64(digitsValue(last)), true
	case len(v) >= 4:
		// Four bytes at a time, alike, in the upper half of a word.
		first, last := word4(v, 0)<<32, word4(v, len(v)-4)<<32
		if !eightDigits(first|0x30303030) || !eightDigits(last|0x30303030) {
			return 0, false
		}
		return int64(digitsValue(first<<(8*(8-len(v)))))*1e4 + int64(digitsValue(last)), true
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

// word4 returns the four bytes of s from i, little-endian, read at once.
func word4(s string, i int) uint64 {
	s = s[i : i+4]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24
}

// eightDigits reports whether the eight bytes of w are all ASCII digits:
// each has the high half 3, and so has each plus 6 (no carry passes from
// a byte whose high half is 3).
func eightDigits(w uint64) bool {
	const highs, six = 0xF0F0F0F0F0F0F0F0, 0x0606060606060606
	return w&highs|(w+six)&highs>>4 == 0x3333333333333333
}

// digitsValue returns the number the eight ASCII digits of w make (or
// zero bytes, read as 0), the first digit in the lowest byte: pairs of
// digits, then of pairs, then of fours, are joined by one multiply each.
func digitsValue(w uint64) uint64 {
	w = (w & 0x0F0F0F0F0F0F0F0F) * (10<<8 + 1) >> 8
	w = (w & 0x00FF00FF00FF00FF) * (100<<16 + 1) >> 16
	return (w & 0x0000FFFF0000FFFF) * (10000<<32 + 1) >> 32
}

// readDate sets t to an RFC 3339 time or an HTTP-date (Retry-After).
func (t *timeValue) readDate(v string) {
	var date time.Time
	var err error
	if isDigit(v[0]) {
		date, err = time.Parse(time.RFC3339, v)
	} else {
		date, err = http.ParseTime(v)
	}
	if err != nil {
		*t = timeValue{}
		return
	}
	*t = timeValue{kind: timeDate, n: date.Unix(), nsec: int32(date.Nanosecond())}
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
	digit := func(i int) byte { return v[i] - '0' } // a byte below '0' wraps above 9
	y0, y1, y2, y3, mo0, mo1, d0, d1 := digit(0), digit(1), digit(2), digit(3), digit(5), digit(6), digit(8), digit(9)
	h0, h1, mi0, mi1, s0, s1 := digit(11), digit(12), digit(14), digit(15), digit(17), digit(18)
	if max(y0, y1, y2, y3, mo0, mo1, d0, d1, h0, h1, mi0, mi1, s0, s1) > 9 {
		return 0, false
	}
	pair := func(hi, lo byte) int64 { return int64(hi)*10 + int64(lo) }
	year, month, day := pair(y0, y1)*100+pair(y2, y3), pair(mo0, mo1), pair(d0, d1)
	hour, minute, second := pair(h0, h1), pair(mi0, mi1), pair(s0, s1)
	if month < 1 || month > 12 || day < 1 || day > daysIn(month, year) || hour > 23 || minute > 59 || second > 59 {
		return 0, false
	}
	return daysSinceEpoch(year, month, day)*86400 + hour*3600 + minute*60 + second, true
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
	monthOfYear := month - 3
	if month <= 2 {
		year-- // January and February end the year before
		monthOfYear = month + 9
	}
	era := (year + 400) / 400 // year is at least -1
	yearOfEra := year + 400 - era*400
	dayOfYear := (153*monthOfYear+2)/5 + day - 1
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
