package keypool

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// refParseWait is parseWait as it was before it read a value in two steps
// (timeValue.read, then its wait from now) with its own reading of RFC 3339
// dates; it and the functions below it read as parseWait's did then.
// FuzzParseWait holds parseWait to it on any input.
func refParseWait(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	switch {
	case v == "":
		return 0, false
	case strings.IndexByte(v, ':') >= 0:
		return refWaitUntilDate(v, now)
	case isLetter(v[len(v)-1]):
		d, ok := refSimpleDuration(v)
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
	f, ok := refParseNumber(v)
	switch {
	case !ok:
		return 0, false
	case f > epochMillisAbove:
		return refWaitUntilEpoch(f, time.Millisecond, now), true
	case f > epochSecondsAbove:
		return refWaitUntilEpoch(f, time.Second, now), true
	}
	return waitOf(f, time.Second), true
}

func refSimpleDuration(v string) (time.Duration, bool) {
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
	n, _ := refParseWhole(v[:digits])
	if n > int64(math.MaxInt64/unit) {
		return 0, false
	}
	return time.Duration(n) * unit, true
}

func refParseNumber(v string) (float64, bool) {
	if v == "" {
		return 0, false
	}
	if n, ok := refParseWhole(v); ok {
		return float64(n), true
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		return 0, false
	}
	return f, true
}

func refParseWhole(v string) (int64, bool) {
	if len(v) > 15 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(v); i++ {
		d := v[i] - '0'
		if d > 9 {
			return 0, false
		}
		n = n*10 + int64(d)
	}
	return n, true
}

func refWaitUntilDate(v string, now time.Time) (time.Duration, bool) {
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

func refWaitUntilEpoch(f float64, unit time.Duration, now time.Time) time.Duration {
	perSecond := float64(time.Second / unit)
	if f/perSecond > float64(now.Unix())+maxHorizon.Seconds() {
		return maxHorizon
	}
	whole, frac := math.Modf(f)
	n, per := int64(whole), int64(perSecond)
	t := time.Unix(n/per, (n%per)*int64(unit)+int64(math.Round(frac*float64(unit))))
	return clampWait(t.Sub(now))
}
