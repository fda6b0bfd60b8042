package keypool

import (
	"math/bits"
	"net/http"
	"strings"
	"time"
)

// The reading of an answer's headers as it was before scanHeaders matched
// keys through headerSlots and read each counter's value where it found it:
// refReadHeaders reads as scanHeaders and readHeaders did then, and
// FuzzReadHeaders holds the two equal on any header map.

// refAnswerHeaders is what refScanHeaders finds: the groups of rate-limit
// headers an answer carries, whether Groq served it, and the first value
// of each counter's headers, by id (counter*counterFields + field).
type refAnswerHeaders struct {
	groups  uint8
	groq    bool
	counted uint16
	values  [len(counters) * counterFields]string
}

// The groups of rate-limit headers refScanHeaders notes, by prefix.
const (
	refGroupRetryAfter uint8 = 1 << iota
	refGroupXRateLimit
	refGroupRateLimit
	refGroupAnthropic
	refGroupUnified
	refGroupCodex
)

// refCounterNames holds the canonical name of each counter header by id;
// "" where a counter has no such header.
var refCounterNames = func() (names [len(counters) * counterFields]string) {
	for i, c := range counters {
		names[i*counterFields+fieldLimit] = c.limit
		names[i*counterFields+fieldRemaining] = c.remaining
		names[i*counterFields+fieldReset] = c.reset
	}
	return names
}()

// refCounterNamesByLen lists the ids of the counter headers by the length
// of their names.
var refCounterNamesByLen = func() [][]uint8 {
	var byLen [][]uint8
	for id, name := range refCounterNames {
		if name == "" {
			continue
		}
		for len(byLen) <= len(name) {
			byLen = append(byLen, nil)
		}
		byLen[len(name)] = append(byLen[len(name)], uint8(id))
	}
	return byLen
}()

func refCounterHeader(k string) (uint8, bool) {
	if len(k) >= len(refCounterNamesByLen) {
		return 0, false
	}
	for _, id := range refCounterNamesByLen[len(k)] {
		if name := refCounterNames[id]; name[len(name)-1] == k[len(k)-1] && name[len(name)/2] == k[len(k)/2] && name == k {
			return id, true
		}
	}
	return 0, false
}

func refScanHeaders(h http.Header, a *refAnswerHeaders) {
	for k, v := range h {
		if len(k) < len("Ratelimit") {
			continue
		}
		counter := false
		switch k[0] {
		case 'R':
			switch {
			case strings.HasPrefix(k, headerRetryAfter):
				a.groups |= refGroupRetryAfter
			case strings.HasPrefix(k, headerRateLimit):
				a.groups |= refGroupRateLimit
				counter = true
			}
		case 'X':
			switch {
			case strings.HasPrefix(k, "X-Ratelimit-"):
				a.groups |= refGroupXRateLimit
				counter = true
			case strings.HasPrefix(k, "X-Codex-"):
				a.groups |= refGroupCodex
			case k == headerMsRetryAfterMs:
				a.groups |= refGroupRetryAfter
			case k == headerGroqRegion:
				a.groq = true
			}
		case 'A':
			switch {
			case strings.HasPrefix(k, "Anthropic-Ratelimit-Unified-"):
				a.groups |= refGroupUnified
			case strings.HasPrefix(k, "Anthropic-Ratelimit-"):
				a.groups |= refGroupAnthropic
				counter = true
			}
		}
		if !counter || len(v) == 0 {
			continue
		}
		if id, ok := refCounterHeader(k); ok {
			a.values[id] = v[0]
			a.counted |= 1 << (id / counterFields)
		}
	}
}

// refReadHeaders reads h as of now as scanHeaders and readHeaders did;
// scanned reports whether refScanHeaders found any group (classify and
// ParseRateLimitReset read no further when it found none).
func refReadHeaders(h http.Header, now time.Time) (e evidence, scanned bool) {
	var a refAnswerHeaders
	refScanHeaders(h, &a)
	g := a.groups
	if g&refGroupRetryAfter != 0 {
		e.retryAfter, e.hasRetryAfter = refRetryAfterFromHeaders(h, now)
	}
	for m := a.counted; m != 0; m &= m - 1 {
		i := bits.TrailingZeros16(m)
		c := &counters[i]
		values := (*[counterFields]string)(a.values[i*counterFields:])
		if l, ok := refCounterRead(c, values, now, a.groq); ok {
			e.add(&l)
			if l.limit > 0 || l.spent {
				e.stated.note(refAxisOf(c, values[fieldLimit], a.groq, l.limit), l.limit, l.remaining, l.wait, l.hasReset)
			}
		}
	}
	if g&refGroupRateLimit != 0 {
		readStructured(h, now, &e)
	}
	if g&refGroupUnified != 0 {
		readUnified(h, now, &e)
	}
	if g&refGroupCodex != 0 {
		readCodex(h, now, &e)
	}
	return e, g != 0
}

func refRetryAfterFromHeaders(h http.Header, now time.Time) (time.Duration, bool) {
	if d, ok := refParseMillis(first(h, headerRetryAfterMs)); ok {
		return d, true
	}
	if d, ok := refParseMillis(first(h, headerMsRetryAfterMs)); ok {
		return d, true
	}
	return refParseWait(first(h, headerRetryAfter), now)
}

func refCounterRead(c *counter, values *[counterFields]string, now time.Time, groq bool) (limitEvidence, bool) {
	remainingField := values[fieldRemaining]
	remaining, ok := refLeadingNumber(remainingField)
	if !ok {
		if remainingField != "" || !c.resetAlone {
			return limitEvidence{}, false
		}
		var l limitEvidence
		l.wait, l.hasReset = refParseWait(values[fieldReset], now)
		return l, l.hasReset
	}
	limitField := values[fieldLimit]
	limit, _ := refLeadingNumber(limitField)
	window := c.window
	switch {
	case groq && c.atGroq != WindowNone:
		window = c.atGroq
	case c.policies:
		window = policyWindow(limitField, limit)
	}
	l := counted(window, remaining, limit)
	if c.reset != "" {
		l.wait, l.hasReset = refParseWait(values[fieldReset], now)
	}
	return l, true
}

func refAxisOf(c *counter, limitField string, groq bool, limit float64) windowAxis {
	switch {
	case groq && c.axisAtGroq != axisNone:
		return c.axisAtGroq
	case c.policies:
		for item := range strings.SplitSeq(limitField, ",") {
			quota, params := sfItem(item)
			if q, ok := refParseNumber(quota); ok && q == limit {
				return policyAxis(params)
			}
		}
		return axisNone
	}
	return c.axis
}

func refLeadingNumber(field string) (float64, bool) {
	if n, ok := refParseWhole(field); ok && field != "" {
		return float64(n), true
	}
	for i := 0; i < len(field); i++ {
		if field[i] == ',' || field[i] == ';' {
			field = field[:i]
			break
		}
	}
	return refParseNumber(strings.TrimSpace(field))
}

func refParseMillis(v string) (time.Duration, bool) {
	f, ok := refParseNumber(strings.TrimSpace(v))
	if !ok {
		return 0, false
	}
	return waitOf(f, time.Millisecond), true
}
