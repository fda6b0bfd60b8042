package keypool

import (
	"strconv"
	"strings"
	"time"
)

// The reading of prose: an error body's lower-cased text matched against
// the phrases of the vendor catalogue (reset_vendors.go) and read for the
// windows, waits and dates it states.

// namedWindow returns the longest window the text names, by a phrase of
// windowPhrases or by a stated length (periodWindow), or "".
func namedWindow(lower string) Window {
	w := periodWindow(lower)
	for _, p := range windowPhrases {
		if windowRank(p.window) > windowRank(w) && strings.Contains(lower, p.phrase) {
			w = p.window
		}
	}
	return w
}

// periodWindow returns the longest window the text names by its length: a
// length written as a period — "5-hour usage limit", "30 requests / 5h",
// "per 24 hours", "duration_s: 86400" — not a wait ("try again in 5
// hours"), as windowOfLength names it.
func periodWindow(lower string) Window {
	w := WindowNone
	for i := 0; i < len(lower); i++ {
		if !isDigit(lower[i]) || i > 0 && (isDigit(lower[i-1]) || lower[i-1] == '.') {
			continue
		}
		j := i
		for j < len(lower) && isDigit(lower[j]) && j-i < maxPeriodDigits {
			j++
		}
		n, err := strconv.Atoi(lower[i:j])
		if err != nil || j < len(lower) && isDigit(lower[j]) {
			continue
		}
		before := strings.TrimRight(lower[max(0, i-len("duration_s: ")):i], " ")
		var d time.Duration
		switch {
		case j < len(lower) && lower[j] == '-': // "5-hour"
			d, _ = periodAndRest(n, lower[j+1:])
		case strings.HasSuffix(before, "/"), strings.HasSuffix(before, "per"), strings.HasSuffix(before, "every"),
			strings.HasSuffix(before, "reached for"): // "Usage limit reached for 5 hour"
			d, _ = periodAndRest(n, lower[j:])
		case strings.HasSuffix(before, "duration_s:"), strings.HasSuffix(before, "duration_s ="):
			d = time.Duration(n) * time.Second
		default:
			// "your 5 hour session limits", "5 小时的使用上限": a length
			// that qualifies a limit.
			var rest string
			if d, rest = periodAndRest(n, lower[j:]); !qualifiesLimit(rest) {
				d = 0
			}
		}
		if x := windowOfLength(d); windowRank(x) > windowRank(w) {
			w = x
		}
		i = j
	}
	return w
}

// maxPeriodDigits bounds the digits of a stated period: no window lasts a
// billion seconds.
const maxPeriodDigits = 9

// periodUnits are the unit words of a stated period.
var periodUnits = [...]struct {
	word string
	unit time.Duration
}{
	{"h", time.Hour}, {"hr", time.Hour}, {"hour", time.Hour},
	{"d", 24 * time.Hour}, {"day", 24 * time.Hour},
	{"week", 7 * 24 * time.Hour},
	{"month", 30 * 24 * time.Hour},
}

// cjkPeriodUnits are the unit words of a period written in Chinese.
var cjkPeriodUnits = [...]struct {
	word string
	unit time.Duration
}{{"小时", time.Hour}, {"天", 24 * time.Hour}, {"周", 7 * 24 * time.Hour}, {"个月", 30 * 24 * time.Hour}}

// periodAndRest returns n of the unit word s starts with (after a space),
// or 0, and the text after the word.
func periodAndRest(n int, s string) (time.Duration, string) {
	s = strings.TrimLeft(s, " ")
	end := 0
	for end < len(s) && isLetter(s[end]) {
		end++
	}
	word := s[:end]
	for _, u := range periodUnits {
		if word == u.word || word == u.word+"s" {
			return time.Duration(n) * u.unit, s[end:]
		}
	}
	for _, u := range cjkPeriodUnits {
		if strings.HasPrefix(s, u.word) {
			return time.Duration(n) * u.unit, s[len(u.word):]
		}
	}
	return 0, s
}

// qualifiesLimit reports whether the text after a length makes it the
// length of a limit: "… session limits", "… usage limit", "的使用上限".
func qualifiesLimit(rest string) bool {
	rest = strings.TrimLeft(rest, " ")
	if strings.HasPrefix(rest, "的") {
		return true // Chinese: "5 小时的" — the 5 hours' (limit)
	}
	for _, w := range [...]string{"session", "usage", "limit", "window", "quota", "rolling"} {
		if strings.HasPrefix(rest, w) {
			return true
		}
	}
	return false
}

// periodLimits reads the windows DIAL states as "<period> limit: used /
// limit" ("Day limit: 2105 / 10 tokens. Week limit: 4209 / 20 tokens."):
// of those whose use reached their limit, the longest, which binds, and
// how full it is.
func periodLimits(lower string) (w Window, used float64, ok bool) {
	for _, p := range [...]struct {
		word   string
		window Window
	}{{"day limit: ", WindowDaily}, {"week limit: ", WindowWeekly}, {"month limit: ", WindowMonthly}} {
		_, after, found := strings.Cut(lower, p.word)
		if !found {
			continue
		}
		u, tail, found := strings.Cut(after, " / ")
		if !found {
			continue
		}
		n, okUsed := parseNumber(u)
		l, okLimit := parseNumber(tail[:tokenEnd(tail)])
		if okUsed && okLimit && l > 0 && n >= l && windowRank(p.window) > windowRank(w) {
			w, used, ok = p.window, n/l, true
		}
	}
	return w, used, ok
}

// delayUnits are the unit words a prose delay may use after a bare number.
var delayUnits = [...]struct {
	word string
	unit time.Duration
}{
	{"ms", time.Millisecond}, {"millisecond", time.Millisecond},
	{"s", time.Second}, {"sec", time.Second}, {"second", time.Second},
	{"min", time.Minute}, {"minute", time.Minute},
	{"h", time.Hour}, {"hour", time.Hour},
	{"day", 24 * time.Hour},
}

// chinaTime is the zone of a time a vendor answering in Chinese states
// without one: China's, UTC+8 all year.
var chinaTime = time.FixedZone("UTC+8", 8*60*60)

// zoneOfText returns the zone a time without one is read in: China's for
// a text in Chinese or of a vendor in chinaTimePhrases, else UTC.
func zoneOfText(lower string) *time.Location {
	if containsAny(lower, chinaTimePhrases[:]) || hasHan(lower) {
		return chinaTime
	}
	return time.UTC
}

// hasHan reports whether s holds a Han character (CJK Unified
// Ideographs, U+4E00–U+9FFF: three bytes in UTF-8 from 0xE4 to 0xE9).
func hasHan(s string) bool {
	for _, r := range s {
		if r >= 0x4E00 && r <= 0x9FFF {
			return true
		}
	}
	return false
}

// clockLayouts are a bare time of day ("Resets at 10:00 UTC"), which names
// its next coming after now.
var clockLayouts = [...]string{"15:04:05 MST", "15:04 MST", "15:04:05", "15:04"}

// maxProseTime bounds how much text after a marker is read as a time, and
// maxProseTries how many of a marker's places are: a body of "resets at 1"
// repeated costs no more than a few.
const (
	maxProseTime  = 40
	maxProseTries = 4
)

// proseResetDate returns the wait until a moment the text states in prose
// after one of resetAtMarkers: a time a vendor's field would hold, a date
// and time of proseTimeLayouts, or a bare time of day. lower and text are
// the same text, lower-cased byte for byte, so that the moment is parsed in
// its own case.
func proseResetDate(lower, text string, now time.Time) (time.Duration, bool) {
	loc := zoneOfText(lower)
	for _, m := range resetAtMarkers {
		for at, tries := 0, 0; tries < maxProseTries; tries++ {
			i := strings.Index(lower[at:], m)
			if i < 0 {
				break
			}
			at += i + len(m)
			if at < len(text) && (isDigit(text[at]) || isLetter(text[at])) {
				if d, ok := leadingTime(text[at:min(len(text), at+maxProseTime)], loc, now); ok {
					return d, true
				}
			}
		}
	}
	return 0, false
}

// leadingTime reads the moment s starts with as the wait from now until it,
// a time without a zone being in loc.
func leadingTime(s string, loc *time.Location, now time.Time) (time.Duration, bool) {
	token := s
	if i := strings.IndexFunc(s, isTimeEnd); i >= 0 {
		token = s[:i]
	}
	token = strings.TrimRight(token, ".")
	var t timeValue
	if t.read(token); t.kind == timeEpoch || t.kind == timeDate {
		return t.waitFrom(now)
	}
	// The moment ends at a word's end, within its line; the longest
	// reading stands.
	if i := strings.IndexAny(s, "\n]"); i >= 0 {
		s = s[:i]
	}
	for end := len(s); end > 0; end = strings.LastIndexAny(s[:end], " ,;(") {
		at := strings.TrimRight(s[:end], ".)")
		for _, layout := range proseTimeLayouts {
			if t, err := time.ParseInLocation(layout, at, loc); err == nil {
				return clampWait(t.Sub(now)), true
			}
		}
		for _, layout := range clockLayouts {
			if c, err := time.ParseInLocation(layout, at, loc); err == nil {
				return untilClock(c, now), true
			}
		}
	}
	return 0, false
}

// isTimeEnd reports whether r ends a time written as one token.
func isTimeEnd(r rune) bool {
	switch r {
	case ' ', '\n', '\t', '"', '\'', ',', ';', ')', '(':
		return true
	}
	return false
}

// untilClock returns the wait from now until the next time of day c (a
// time on day zero, in its own zone) comes.
func untilClock(c, now time.Time) time.Duration {
	n := now.In(c.Location())
	at := time.Date(n.Year(), n.Month(), n.Day(), c.Hour(), c.Minute(), c.Second(), 0, c.Location())
	if !at.After(n) {
		at = at.AddDate(0, 0, 1)
	}
	return at.Sub(now)
}

// containsAny reports whether s contains any of the phrases.
func containsAny(s string, phrases []string) bool {
	for _, p := range phrases {
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
}

// proseDelay returns the first delay the text states after one of the
// markers: a Go duration ("7m12s", "26.604s") or numbers and unit words ("30
// seconds", "4 days 20 hours 9 minutes").
func proseDelay(lower string, markers []string, now time.Time) (time.Duration, bool) {
	for _, m := range markers {
		for rest := lower; ; {
			_, after, found := strings.Cut(rest, m)
			if !found {
				break
			}
			if d, ok := leadingDelay(after, now); ok {
				return d, true
			}
			rest = after
		}
	}
	return 0, false
}

// approxWords may come before a delay: "resets in ~30s", "about 2 hours".
var approxWords = [...]string{"~", "about ", "approximately ", "approx. ", "around "}

// leadingDelay reads the delay s starts with: a Go duration, or one or more
// numbers each with a unit word.
func leadingDelay(s string, now time.Time) (time.Duration, bool) {
	for _, p := range approxWords {
		s = strings.TrimPrefix(s, p)
	}
	token := strings.TrimRight(s[:tokenEnd(s)], ".")
	if token == "" || !isDigit(token[0]) {
		return 0, false
	}
	if isLetter(token[len(token)-1]) {
		return parseWait(token, now)
	}
	var total time.Duration
	found := false
	for {
		d, rest, ok := numberAndUnit(s)
		if !ok {
			return total, found
		}
		total, found = min(total+d, maxHorizon), true
		s = strings.TrimLeft(rest, " ,")
		s = strings.TrimPrefix(s, "and ")
	}
}

// numberAndUnit reads a number and a unit word ("30 seconds", "4 days") at
// the start of s and returns the rest of s after them.
func numberAndUnit(s string) (time.Duration, string, bool) {
	token := s[:tokenEnd(s)]
	if token == "" || !isDigit(token[0]) {
		return 0, "", false
	}
	f, ok := parseNumber(strings.TrimSuffix(token, "."))
	if !ok {
		return 0, "", false
	}
	rest := strings.TrimLeft(s[len(token):], " ")
	end := tokenEnd(rest)
	word := strings.TrimSuffix(rest[:end], ".")
	for _, u := range delayUnits {
		if word == u.word || word == u.word+"s" {
			return waitOf(f, u.unit), rest[end:], true
		}
	}
	return 0, "", false
}

// tokenEnd returns the length of the run of digits, dots and ASCII letters s
// starts with.
func tokenEnd(s string) int {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isDigit(c) && !isLetter(c) && c != '.' {
			return i
		}
	}
	return len(s)
}

// statedUsage reads the limit and usage OpenAI and Groq state in a 429's
// prose: "on tokens per minute (TPM): Limit 6000, Used 5914, Requested 1822".
func statedUsage(lower string) (limit, used float64, ok bool) {
	for rest := lower; ; {
		_, after, found := strings.Cut(rest, "limit ")
		if !found {
			return 0, 0, false
		}
		rest = after
		l, tail, found := strings.Cut(after, ", used ")
		if !found {
			continue
		}
		limit, okLimit := parseNumber(l)
		used, okUsed := parseNumber(tail[:tokenEnd(tail)])
		if okLimit && okUsed && limit > 0 {
			return limit, used, true
		}
	}
}

// windowOfWait names the window a usage limit implies by the wait until it
// lifts, for the ChatGPT backend, whose usage_limit_reached body gives only
// the wait: up to longThrottle (10 minutes) none, up to 5.5 hours the
// 5-hour window, up to 7.5 days the weekly one, longer the monthly.
func windowOfWait(d time.Duration) Window {
	switch {
	case d <= longThrottle:
		return WindowNone
	case d <= 5*time.Hour+30*time.Minute:
		return Window5h
	case d <= 7*24*time.Hour+12*time.Hour:
		return WindowWeekly
	}
	return WindowMonthly
}

// asciiLower lower-cases the ASCII letters of s and keeps every other byte,
// so that offsets in the result are offsets in s.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// statesLimitZero reports whether the text states a quota whose limit is 0:
// Gemini's "Quota exceeded for metric: …, limit: 0, model: …" and the gRPC
// form of Google's ErrorInfo, `key: "quota_limit_value" value: "0"`.
func statesLimitZero(lower string) bool {
	for rest := lower; ; {
		_, after, found := strings.Cut(rest, "limit: 0")
		if !found {
			break
		}
		if after == "" || !isDigit(after[0]) && after[0] != '.' && !strings.HasPrefix(after, " / ") {
			return true // "limit: 0 / 1600000" is DIAL's use of a limit, not a limit of 0
		}
		rest = after
	}
	_, after, found := strings.Cut(lower, `"quota_limit_value"`)
	if !found {
		return false
	}
	after = strings.TrimLeft(after[:min(len(after), 40)], " \n\r\t")
	return strings.HasPrefix(after, `value: "0"`)
}
