package keypool

import (
	"math"
	"math/bits"
	"net/http"
	"strings"
	"time"
)

// The groups of headers read by name. scanHeaders notes which occur, so
// that an answer without rate-limit headers costs one pass over its keys
// and no lookup, and an answer with some reads only its groups' headers.
const (
	groupRetryAfter uint8 = 1 << iota // Retry-After, Retry-After-Ms, X-Ms-Retry-After-Ms
	groupRateLimit                    // Ratelimit (IETF, structured)
	groupUnified                      // Anthropic-Ratelimit-Unified-* of subscriptions
	groupCodex                        // X-Codex-*
	groupGroq                         // X-Groq-Region: Groq served the answer
)

// The headers of a counter.
const (
	fieldLimit = iota
	fieldRemaining
	fieldReset
	counterFields
)

// answerHeaders is what one pass over an answer's headers finds: the groups
// of headers read by name it carries, and the values of its counters'
// headers, read. It holds no pointer, so filling it costs the collector
// nothing.
type answerHeaders struct {
	groups uint8
	// counted has bit i set when counter i has a header in the answer.
	counted uint16
	values  [len(counters)]counterValues
}

// counterValues are the values of one counter's headers (see
// counter.read); the zero value of each is the header's absence.
type counterValues struct {
	// limit and remaining are the leading numbers of the limit's and the
	// remaining count's values (see leadingNumber), 0 where there is none.
	limit, remaining float64
	// remainingOK says the remaining count's value has a leading number,
	// remainingSet that it is not empty.
	remainingOK, remainingSet bool
	reset                     timeValue
}

// This fails to compile when answerHeaders.counted has no bit for a counter.
const _ = uint16(1) << (len(counters) - 1)

// headerName is a header scanHeaders looks for: a counter's (group 0),
// or one its group's reader reads by name.
type headerName struct {
	name           string
	group          uint8
	counter, field uint8
}

// headerNames are the headers scanHeaders looks for by name: every
// counter's, and those of the groups whose names are few.
var headerNames = func() []headerName {
	var names []headerName
	for i, c := range counters {
		for field, name := range [counterFields]string{c.limit, c.remaining, c.reset} {
			if name != "" {
				names = append(names, headerName{name: name, counter: uint8(i), field: uint8(field)})
			}
		}
	}
	return append(names,
		headerName{name: headerRetryAfter, group: groupRetryAfter},
		headerName{name: headerRetryAfterMs, group: groupRetryAfter},
		headerName{name: headerMsRetryAfterMs, group: groupRetryAfter},
		headerName{name: headerRateLimit, group: groupRateLimit},
		headerName{name: headerGroqRegion, group: groupGroq})
}()

// headerPrefixes name the groups of many headers by the prefix their
// names share, as their readers read them by name. A prefix's first and
// last eight bytes turn most other keys away before they are compared
// whole.
var headerPrefixes = func() [2]headerPrefix {
	prefixes := [...]headerPrefix{
		{prefix: "Anthropic-Ratelimit-Unified-", group: groupUnified},
		{prefix: "X-Codex-", group: groupCodex},
	}
	for i := range prefixes {
		p := &prefixes[i]
		p.first, p.last = word(p.prefix, 0), word(p.prefix, len(p.prefix)-8)
	}
	return prefixes
}()

// headerPrefix is one of headerPrefixes.
type headerPrefix struct {
	prefix string
	first  uint64 // its first eight bytes
	last   uint64 // its last eight bytes
	group  uint8
}

// minHeaderName is the length of the shortest name scanHeaders looks for
// (Ratelimit); headerSlot needs eight bytes.
const minHeaderName = len(headerRateLimit)

// headerStarts has a bit set, of its 64, for the first eight bytes of
// each name scanHeaders looks for, and of each prefix, by headerStart: a
// key whose bit is clear is none of them, found so at the cost of one
// multiply. (Of 256 bits, in four words, fewer other keys go on, but the
// load of the word a key needs waits on the multiply: slower.)
var headerStarts = func() (starts uint64) {
	for _, n := range headerNames {
		starts |= 1 << headerStart(word(n.name, 0))
	}
	return starts | prefixStarts
}()

// prefixStarts has the bits of headerStarts of headerPrefixes.
var prefixStarts = func() (starts uint64) {
	for _, p := range headerPrefixes {
		starts |= 1 << headerStart(p.first)
	}
	return starts
}()

// headerStart returns the bit of headerStarts for a key whose first eight
// bytes are first: a hash of them.
func headerStart(first uint64) uint {
	return uint((first * 0x9e3779b97f4a7c15) >> 58)
}

// headerSlots is an open-addressed table of headerNames by headerSlot,
// probed linearly, a slot for each value of a byte: each holds an index
// into headerNames plus one, or 0 when empty. A fifth full, it finds most
// names at their slot and most other keys at an empty one.
var headerSlots = func() (slots [1 << 8]uint8) {
	for i, n := range headerNames {
		s := headerSlot(n.name)
		for slots[s] != 0 {
			s++ // from the last slot to the first
		}
		slots[s] = uint8(i + 1)
	}
	return slots
}()

// headerSlot returns where the key k, of minHeaderName bytes or more,
// starts its probe in headerSlots: a hash of its length and of its first,
// middle and last eight bytes, which tell the names of one vendor apart
// (X-Ratelimit-Limit-Requests-Day from X-Ratelimit-Reset-Requests-Day in
// the middle).
func headerSlot(k string) uint8 {
	x := word(k, 0) ^ bits.RotateLeft64(word(k, len(k)/2-4), 21) ^ bits.RotateLeft64(word(k, len(k)-8), 42) ^ uint64(len(k))
	return uint8((x * 0x9e3779b97f4a7c15) >> (64 - 8))
}

// word returns the eight bytes of s from i, little-endian, read at once.
func word(s string, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// scanHeaders reads into a, which must be zero, in one pass over h, which
// groups of headers read by name h carries, and the value of each
// counter's header. Keys are matched as a lookup of the canonical name
// would match them; a header without a value is as absent.
func scanHeaders(h http.Header, a *answerHeaders) {
keys:
	for k, v := range h {
		if len(k) < minHeaderName || len(v) == 0 {
			continue
		}
		first := word(k, 0)
		bit := uint64(1) << headerStart(first)
		if headerStarts&bit == 0 {
			continue
		}
		if prefixStarts&bit != 0 {
			for i := range headerPrefixes {
				if p := &headerPrefixes[i]; p.first == first && len(k) >= len(p.prefix) && word(k, len(p.prefix)-8) == p.last &&
					strings.HasPrefix(k, p.prefix) {
					a.groups |= p.group
					continue keys
				}
			}
		}
		a.note(k, v[0])
	}
}

// note notes the header k, of value v, if it is one of headerNames.
func (a *answerHeaders) note(k, v string) {
	for s := headerSlot(k); headerSlots[s] != 0; s++ {
		n := &headerNames[headerSlots[s]-1]
		if n.name != k {
			continue
		}
		if n.group != 0 {
			a.groups |= n.group
			return
		}
		a.counted |= 1 << (n.counter & 15)
		switch f := &a.values[n.counter]; n.field {
		case fieldLimit:
			f.limit, _ = leadingNumber(v)
		case fieldRemaining:
			f.remaining, f.remainingOK = leadingNumber(v)
			f.remainingSet = v != ""
		default:
			f.reset.read(v)
		}
		return
	}
}

// empty reports whether the answer scanned into a has none of the headers
// readHeaders reads.
func (a *answerHeaders) empty() bool {
	return a.groups == 0 && a.counted == 0
}

// readHeaders reads the rate-limit headers of an answer, as scanHeaders
// found them in h, as of now into e.
func readHeaders(h http.Header, a *answerHeaders, now time.Time, e *evidence) {
	g := a.groups
	if g&groupRetryAfter != 0 {
		e.retryAfter, e.hasRetryAfter = RetryAfterFromHeaders(h, now)
	}
	groq := g&groupGroq != 0
	// A counter without headers reads as nothing: only those with some
	// are read.
	for m := a.counted; m != 0; m &= m - 1 {
		i := bits.TrailingZeros16(m)
		c := &counters[i]
		var l limitEvidence
		if c.read(&l, h, &a.values[i], now, groq) {
			e.add(&l)
			if l.limit > 0 || l.spent {
				e.stated.note(c.axisOf(h, groq, l.limit), l.limit, l.remaining, l.wait, l.hasReset)
			}
		}
	}
	if g&groupRateLimit != 0 {
		readStructured(h, now, e)
	}
	if g&groupUnified != 0 {
		readUnified(h, now, e)
	}
	if g&groupCodex != 0 {
		readCodex(h, now, e)
	}
}

// counter is one limit a vendor reports as a triple of headers: the limit,
// what remains of it, and when it resets (canonical names; reset is "" where
// the vendor sends none).
type counter struct {
	limit, remaining, reset string
	window                  Window // the window the limit counts; "" for a short or unknown one
	atGroq                  Window // the window the same names count at Groq, where it differs
	// axis is the window of the pool's the limit counts (see stated.go),
	// axisAtGroq the same at Groq; axisNone for a limit of another length.
	axis, axisAtGroq windowAxis
	// policies says the limit may list quota policies with their window
	// lengths after the live limit: "15, 100;w=60".
	policies bool
	// resetAlone says the reset may come without a remaining count, and
	// then dates the limit alone (providerkit's list of reset headers).
	resetAlone bool
}

// read reads into l, which must be zero, the counter from the values of
// its headers in h, as scanHeaders read them into f; it reports false when
// they have neither a readable remaining count nor, where the reset may come
// alone, a reset. A reset without a remaining count dates a limit without
// saying how full it is. A negative count is Azure's placeholder for
// unknown, and so is the reset beside it.
func (c *counter) read(l *limitEvidence, h http.Header, f *counterValues, now time.Time, groq bool) bool {
	if !f.remainingOK {
		if f.remainingSet || !c.resetAlone {
			return false
		}
		l.wait, l.hasReset = f.reset.wait(now)
		return l.hasReset
	}
	window := c.window
	switch {
	case groq && c.atGroq != WindowNone:
		window = c.atGroq
	case c.policies:
		window = policyWindow(first(h, c.limit), f.limit)
	}
	count(l, window, f.remaining, f.limit)
	l.wait, l.hasReset = f.reset.wait(now) // the zero timeValue where the counter has no reset
	return true
}

// axisOf returns the window of the pool's the counter's limit counts: its
// axis, Groq's where Groq differs, or for an IETF limit the length of the
// quota policy in its header's value in h that matches the live limit
// ("15, 15;w=60").
func (c *counter) axisOf(h http.Header, groq bool, limit float64) windowAxis {
	switch {
	case groq && c.axisAtGroq != axisNone:
		return c.axisAtGroq
	case c.policies:
		for item := range strings.SplitSeq(first(h, c.limit), ",") {
			quota, params := sfItem(item)
			if q, ok := parseNumber(quota); ok && q == limit {
				return policyAxis(params)
			}
		}
		return axisNone
	}
	return c.axis
}

// policyAxis returns the axis of an IETF quota policy's parameters: a
// window w of 60 or 86400 seconds, counting requests (the default unit).
func policyAxis(params string) windowAxis {
	w, ok := parseNumber(sfParam(params, "w"))
	if !ok || (sfParam(params, "qu") != "" && sfParam(params, "qu") != "requests") {
		return axisNone
	}
	return axisOfLength(waitOf(w, time.Second), true)
}

// counted is the evidence of a limit with remaining units left of limit
// (limit 0 or less: unknown). A limit with nothing left is spent, and full.
func counted(window Window, remaining, limit float64) limitEvidence {
	var l limitEvidence
	count(&l, window, remaining, limit)
	return l
}

// count is counted written into l, which must be zero.
func count(l *limitEvidence, window Window, remaining, limit float64) {
	l.window, l.spent, l.limit, l.remaining = window, remaining == 0, limit, remaining
	switch {
	case limit > 0:
		l.used, l.hasUsed = max(limit-remaining, 0)/limit, true
	case l.spent:
		l.used, l.hasUsed = 1, true
	}
}

// policyWindow names the window of the quota policy in an IETF
// RateLimit-Limit list ("15, 15;w=60, 1000;w=86400") whose quota is the
// live limit, or "" when none is.
func policyWindow(field string, limit float64) Window {
	for item := range strings.SplitSeq(field, ",") {
		quota, params := sfItem(item)
		if q, ok := parseNumber(quota); ok && q == limit && sfParam(params, "w") != "" {
			return sfWindow(params)
		}
	}
	return WindowNone
}

// readStructured reads the structured-field form of
// draft-ietf-httpapi-ratelimit-headers (-08 and later): each member of
// RateLimit (`"default";r=0;t=30`: r units remain, the window resets in t
// seconds) with the quota q and window length w of the same-named member of
// RateLimit-Policy (`"default";q=100;w=60`).
func readStructured(h http.Header, now time.Time, e *evidence) {
	for _, field := range h[headerRateLimit] {
		for item := range strings.SplitSeq(field, ",") {
			name, params := sfItem(item)
			remaining, ok := parseNumber(sfParam(params, "r"))
			if !ok {
				continue
			}
			policy := sfPolicy(h[headerRateLimitPolicy], name)
			quota, _ := parseNumber(sfParam(policy, "q"))
			l := counted(sfWindow(policy), remaining, quota)
			l.wait, l.hasReset = parseWait(sfParam(params, "t"), now)
			e.add(&l)
			e.stated.note(policyAxis(policy), quota, remaining, l.wait, l.hasReset)
		}
	}
}

// sfItem splits one member of a structured-field list into its bare item
// and the text of its parameters.
func sfItem(member string) (item, params string) {
	item, params, _ = strings.Cut(member, ";")
	return strings.TrimSpace(item), params
}

// sfParam returns the value of parameter key in params ("q=100;w=60"),
// unquoted, or "".
func sfParam(params, key string) string {
	for p := range strings.SplitSeq(params, ";") {
		k, v, _ := strings.Cut(p, "=")
		if strings.TrimSpace(k) == key {
			return strings.Trim(strings.TrimSpace(v), `"`)
		}
	}
	return ""
}

// sfWindow names the window of a quota policy by its length parameter w
// in seconds, or "" when it states none.
func sfWindow(params string) Window {
	w, ok := parseNumber(sfParam(params, "w"))
	if !ok {
		return WindowNone
	}
	return windowOfLength(waitOf(w, time.Second))
}

// sfPolicy returns the parameters of the member named name in the
// RateLimit-Policy fields, or "".
func sfPolicy(fields []string, name string) string {
	for _, field := range fields {
		for member := range strings.SplitSeq(field, ",") {
			if item, params := sfItem(member); item == name {
				return params
			}
		}
	}
	return ""
}

// readUnified reads a Claude subscription's windows. A window is spent when
// its status is rejected, its utilization reaches 1, or the answer as a whole
// is rejected and the representative claim names it. The window the claim
// names is the binding one on an answer that went through. A claim naming a
// window without headers of its own (seven_day_opus, seven_day_sonnet) is
// read with the overall reset. Credits spent on extra usage are noted for
// the caller (overage-disabled-reason out_of_credits).
func readUnified(h http.Header, now time.Time, e *evidence) {
	rejected := first(h, headerUnifiedStatus) == "rejected"
	claim := first(h, headerUnifiedClaim)
	e.creditsSpent = e.creditsSpent || first(h, headerUnifiedOverageReason) == "out_of_credits"
	claimed := false
	for _, u := range unifiedWindows {
		l := limitEvidence{window: u.window, plan: u.plan}
		l.used, l.hasUsed = parseNumber(first(h, u.utilization))
		l.wait, l.hasReset = parseWait(first(h, u.reset), now)
		status := first(h, u.status)
		named := claim != "" && claim == u.claim
		if !l.hasUsed && status == "" && !(rejected && named) {
			continue // a reset alone says nothing of how full the window is
		}
		l.spent = status == "rejected" || (l.hasUsed && l.used >= 1) || (rejected && named)
		e.add(&l)
		if named {
			e.claim(&l)
			claimed = true
		}
	}
	if claimed {
		return
	}
	// The claim names a window without headers of its own, or none: the
	// overall reset dates it.
	l := limitEvidence{window: claimWindow(claim), spent: rejected, plan: claim == "five_hour" || claim == "seven_day"}
	l.wait, l.hasReset = parseWait(first(h, headerUnifiedReset), now)
	if rejected || l.window != WindowNone || l.hasReset {
		e.add(&l)
		if l.window != WindowNone {
			e.claim(&l)
		}
	}
}

// claimWindow names the window of a representative claim: five_hour, or
// seven_day and its per-model kin (seven_day_opus, seven_day_sonnet).
func claimWindow(claim string) Window {
	switch {
	case strings.HasPrefix(claim, "five_hour"):
		return Window5h
	case strings.HasPrefix(claim, "seven_day"):
		return WindowWeekly
	}
	return WindowNone
}

// readCodex reads the ChatGPT backend's windows. A slot whose length is 0
// is unused and skipped.
func readCodex(h http.Header, now time.Time, e *evidence) {
	for _, c := range codexWindows {
		percent, ok := parseNumber(first(h, c.usedPercent))
		if !ok {
			continue
		}
		l := limitEvidence{used: percent / 100, hasUsed: true, spent: percent >= 100, plan: true}
		if minutes, ok := parseNumber(first(h, c.minutes)); ok {
			if minutes == 0 {
				continue
			}
			l.window = windowOfLength(waitOf(minutes, time.Minute))
		}
		if l.wait, l.hasReset = parseWait(first(h, c.resetAt), now); !l.hasReset {
			l.wait, l.hasReset = parseWait(first(h, c.resetAfter), now)
		}
		e.add(&l)
	}
}

// windowOfLength names the window a limit of length d counts: up to an hour
// none (a short throttle), up to 12 hours the 5-hour window, up to 3 days the
// daily, up to 14 days the weekly, longer the monthly.
func windowOfLength(d time.Duration) Window {
	switch {
	case d <= time.Hour:
		return WindowNone
	case d <= 12*time.Hour:
		return Window5h
	case d <= 3*24*time.Hour:
		return WindowDaily
	case d <= 14*24*time.Hour:
		return WindowWeekly
	}
	return WindowMonthly
}

// first returns the first value of the header with canonical name key, or "".
func first(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// leadingNumber reads the number that starts a field, before any list
// separator or parameter ("0, 15;w=20" gives 0).
func leadingNumber(field string) (float64, bool) {
	if n, ok := parseWhole(field); ok && field != "" {
		return float64(n), true // the common field: digits alone, read in one pass
	}
	for i := 0; i < len(field); i++ {
		if field[i] == ',' || field[i] == ';' {
			field = field[:i]
			break
		}
	}
	return parseNumber(strings.TrimSpace(field))
}

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

// bywait returns the axis of a limit stated under a's names whose count
// resets in wait. A minute's count resets within the minute: a minute's
// limit whose reset is further off is the day's, as OpenAI's headers state
// whichever of a key's windows binds under one name — a free key's daily
// quota of 5, resetting in hours, is RPD 5, not RPM 5 — and one further
// off than a calendar day (25 hours across a change of daylight saving
// time) is neither.
func (a windowAxis) bywait(wait time.Duration) windowAxis {
	const slack = time.Second // a reset rounded up, or a moment late
	switch {
	case a != axisRPM && a != axisTPM, wait <= time.Minute+slack:
		return a
	case wait > 25*time.Hour+slack:
		return axisNone
	case a == axisRPM:
		return axisRPD
	}
	return axisTPD
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
	if hasWait {
		a = a.bywait(wait)
	}
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
