package keypool

import (
	"strconv"
	"strings"
	"time"
)

// The phrases below are matched against the lower-cased text of an error
// body. Each names the vendor answer it was taken from.

// billingPhrases name a spent balance, credit or spend limit.
var billingPhrases = [...]string{
	"insufficient_quota",           // OpenAI 429 type and code
	"billing_hard_limit",           // OpenAI, the organization's hard spend cap
	"credit balance is too low",    // Anthropic 400 (anthropics/claude-code#4684)
	"api usage limits",             // Anthropic 400, the organization's spend limit (anthropics/claude-code#38035)
	"insufficient balance",         // DeepSeek 402
	"insufficient credits",         // OpenRouter 402
	"more credits are required",    // OpenRouter 402, a key's credit limit
	"requires more credits",        // OpenRouter 402
	"out of credits",               // xAI 403
	"used all available credits",   // xAI 429
	"reached its monthly spending", // xAI 429
	"out of extra usage",           // Anthropic subscription 400 (router-for-me/CLIProxyAPI#2599)
	"draw from your extra usage",   // Anthropic subscription 400 (NousResearch/hermes-agent#31668)
	"out_of_credits",               // Anthropic overage-disabled-reason (tombii/better-ccflare#261)
	"quota is not enough",          // one-api 403 insufficient_user_quota (songquanpeng/one-api#1270)
	"budget has been exceeded",     // LiteLLM proxy 400 (BerriAI/litellm#14144)
	"spend limit",                  // Anthropic 429 "would exceed your account's monthly spend limit" (can1357/oh-my-pi#5418)
	"exceeded_current_quota",       // Moonshot error.type exceeded_current_quota_error, on a 403 or 429
	"balance is insufficient",      // SiliconFlow 403 30011 "Your paid balance is insufficient"
	"payment is past due",          // Ollama Cloud 403 "your subscription payment is past due"
	"overdue",                      // Volcengine 403 code AccountOverdueError
	"arrearage",                    // DashScope 400 code Arrearage
	"credits remaining",            // ElevenLabs 401 quota_exceeded "You have 0 credits remaining"
	"余额不足",                         // "insufficient balance": Zhipu 1113 "余额不足或无可用资源包,请充值", and kin
	"请充值",                          // "please top up"
}

// quotaPhrases name a spent allowance, or one the plan does not include,
// whether or not they name its window: no short wait brings it back.
var quotaPhrases = [...]string{
	"usage_limit_reached",       // ChatGPT backend 429
	"usage_not_included",        // ChatGPT backend: the plan does not include the usage
	"not included in your plan", // ChatGPT backend 403 (RayBytes/ChatMock#54)
	"extra usage",               // Anthropic subscription: "Extra usage is required for long context requests."
	"are cooling down",          // a router's own cooldown: "All credentials for model X are cooling down" (CLIProxyAPI)
	"free-usage-exhausted",      // Grok CLI 429 (Vanszs/VansRouter#56)
	"allocated quota exceeded",  // Qwen 429 "Free allocated quota exceeded."
}

// authPhrases name a refused key where the status does not (Gemini and xAI
// answer a bad key with 400).
var authPhrases = [...]string{
	"api key not valid", // Gemini 400
	"api_key_invalid",   // Gemini 400 ErrorInfo reason
	"incorrect api key", // xAI 400, OpenAI 401
	"invalid_api_key",   // OpenAI 401 code
	"invalid api key",
	"consumer_suspended", // Gemini 403 ErrorInfo reason: the key's consumer is suspended
}

// throttlePhrases name a rate limit, which turns a 403 from a permission
// failure into a throttle (GitHub: "API rate limit exceeded", "You have
// exceeded a secondary rate limit").
var throttlePhrases = [...]string{"rate limit", "rate_limit", "too many requests", abuseLimitPhrase}

// GitHub's secondary rate limit, which its x-ratelimit-reset dates although
// the primary window has room; "abuse detection" is its older name
// (inaka/erlang-github#27).
const (
	secondaryLimitPhrase = "secondary rate limit"
	abuseLimitPhrase     = "abuse detection mechanism"
)

// oversizedPhrases name a request that exceeds a per-minute limit on its
// own, which no wait cures (OpenAI 429 and Groq 413 "Request too large for
// model …").
var oversizedPhrases = [...]string{"request too large"}

// overloadPhrases name the vendor's overload, which some vendors answer
// with a 429: no other key on the same engine fares better.
var overloadPhrases = [...]string{
	"overload",         // Moonshot 429 "engine is currently overloaded"; Novita 429 "server overload"
	"traffic too high", // "model traffic too high"
	"traffic is too high",
	"at capacity", // Nous 429 "temporarily at capacity upstream. This is not your API key's rate limit"
	"访问量过大",       // Zhipu 429 1305 "该模型当前访问量过大" (the model's traffic is too high)
}

// sizedPhrases say a request is too large for what the key has left: a
// smaller one would be served, so the key is not out.
var sizedPhrases = [...]string{
	"fewer max_tokens",             // OpenRouter 402 "requires more credits, or fewer max_tokens"
	"can only afford",              // OpenRouter 402 "but can only afford 3234"
	"prompt tokens limit exceeded", // OpenRouter 402 "Prompt tokens limit exceeded: 23229 > 14796"
	"token capacity required",      // OpenRouter 402 "128000 token capacity required, 19484 available"
}

// minutePhrases name a per-minute limit. A body that names one beside a
// per-day limit in prose, and asks for a short wait, is about the minute.
var minutePhrases = [...]string{"per minute", "per min", "per-minute", "(rpm)", "(tpm)"}

// windowPhrases name a window; when several match, the longest is named.
var windowPhrases = [...]struct {
	phrase string
	window Window
}{
	{"per day", WindowDaily},   // OpenAI and Groq "requests per day (RPD)", "tokens per day (TPD)"; Cerebras "Requests per day limit exceeded"
	{"per-day", WindowDaily},   // OpenRouter "free-models-per-day"
	{"perday", WindowDaily},    // Gemini quota ids "GenerateRequestsPerDayPerProjectPerModel-FreeTier"
	{"daily", WindowDaily},     // OpenRouter limit_source "openrouter_free_tier_daily"
	{"weekly", WindowWeekly},   // plain wording
	{"monthly", WindowMonthly}, // xAI "reached its monthly spending limit"
	// Anthropic's spend limits are monthly: access is regained on the 1st
	// (anthropics/claude-code#38035).
	{"api usage limits", WindowMonthly},
	// A window named by its period: "limited to 1000 API calls / month".
	{"per week", WindowWeekly}, {"/ week", WindowWeekly}, {"/week", WindowWeekly},
	{"per month", WindowMonthly}, {"/ month", WindowMonthly}, {"/month", WindowMonthly},
	{"/ day", WindowDaily}, {"/day", WindowDaily},
	// Ollama Cloud's session limit is its 5-hour window (fgrehm/pi-ollama-cloud#42).
	{"session usage limit", Window5h},
}

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

// delayMarkers introduce a delay stated in prose — Django REST framework's
// "Expected available in 7 seconds" too — OpenAI and Groq "Please try
// again in 26.604s" and "644ms", Azure "Try again in 50 seconds" and "Please
// retry after 86400 seconds", Gemini "Please retry in 10.689924287s", GitHub
// Models "Please wait 60 seconds before retrying".
var delayMarkers = [...]string{"try again in ", "retry after ", "retry in ", "please wait ", "available in "}

// resetMarkers introduce when a limit lifts, stated in prose: a horizon, not
// a wait asked for (Gemini Code Assist "Your quota will reset after 54s";
// "resets in ~30s"; "reset in 3 hours 49 minutes").
var resetMarkers = [...]string{"reset after ", "resets in ", "reset in "}

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

// resetAtMarkers introduce the moment a limit lifts, stated in prose.
var resetAtMarkers = [...]string{
	"regain access on ", // Anthropic 400: "You will regain access on 2026-04-01 at 00:00 UTC."
	"resets at ",        // "Throttle resets at 2024-10-18 14:55:00 +0000"; "Resets at 10:00 UTC"
	"reset at ",
	"resets on ",
	"reset on ", // Copilot 429 "wait for your limit to reset on April 20, 2026 at 2:00 AM"
	"将在 ",       // Zhipu 429 1308 "您的限额将在 2026-08-25 07:41:44 重置" (your limit will reset at …)
	"available at ",
}

// proseTimeLayouts are the absolute times prose states beyond what a
// vendor's time fields hold (RFC 3339, HTTP-dates, epochs, which
// timeValue reads); a layout without a zone is in the zone of the text
// (zoneOfText).
var proseTimeLayouts = [...]string{
	"2006-01-02 at 15:04 MST",   // Anthropic's "2026-04-01 at 00:00 UTC"
	"2006-01-02 15:04:05 -0700", // a Rails throttle's "2024-10-18 14:55:00 +0000"
	"2006-01-02 15:04:05 MST",
	"2006-01-02 15:04 MST",
	"2006-01-02 15:04:05",        // Zhipu 429 1308 "Your limit will reset at 2026-09-09 05:38:28"
	"January 2, 2006 at 3:04 PM", // Copilot 429 "reset on April 20, 2026 at 2:00 AM"
	"January 2, 2006 at 15:04",
}

// chinaTime is the zone of a time a vendor answering in Chinese states
// without one: China's, UTC+8 all year.
var chinaTime = time.FixedZone("UTC+8", 8*60*60)

// chinaTimePhrases name answers whose times without a zone are China's
// though their text is English: Zhipu's coding plan ("the dated reset is
// Beijing time", hugalafutro/model-hotel#955; its retry-after-ms agrees,
// Yeachan-Heo/gajae-code#1821).
var chinaTimePhrases = [...]string{"usage limit reached for 5 hour", "weekly/monthly limit exhausted"}

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
