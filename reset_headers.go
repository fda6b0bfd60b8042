package keypool

import (
	"math/bits"
	"net/http"
	"strings"
	"time"
)

// Canonical names of the headers read one by one.
const (
	headerRetryAfter     = "Retry-After"         // RFC 9110: seconds or an HTTP-date
	headerRetryAfterMs   = "Retry-After-Ms"      // OpenAI and Azure OpenAI: milliseconds
	headerMsRetryAfterMs = "X-Ms-Retry-After-Ms" // Azure: milliseconds
	// headerGroqRegion names the Groq region that served an answer ("dls",
	// "fra", "bom"). Only Groq sends it, and it is how Groq's per-day
	// x-ratelimit-*-requests are told from OpenAI's per-minute ones.
	headerGroqRegion = "X-Groq-Region"

	// draft-ietf-httpapi-ratelimit-headers-08 and later.
	headerRateLimit       = "Ratelimit"
	headerRateLimitPolicy = "Ratelimit-Policy"

	// Anthropic's subscription (Claude Pro/Max through OAuth) headers; the
	// windows themselves are in unifiedWindows.
	headerUnifiedStatus = "Anthropic-Ratelimit-Unified-Status"
	headerUnifiedReset  = "Anthropic-Ratelimit-Unified-Reset"
	headerUnifiedClaim  = "Anthropic-Ratelimit-Unified-Representative-Claim"
	// headerUnifiedOverageReason says why extra usage (overage) is closed:
	// out_of_credits when its credits are spent
	// (github.com/tombii/better-ccflare/issues/261).
	headerUnifiedOverageReason = "Anthropic-Ratelimit-Unified-Overage-Disabled-Reason"
)

// The groups of rate-limit headers. scanHeaders notes which occur, so that
// an answer without any costs one pass over its keys and no lookup, and an
// answer with some reads only the headers of its groups.
const (
	groupRetryAfter uint8 = 1 << iota // Retry-After, Retry-After-Ms, X-Ms-Retry-After-Ms
	groupXRateLimit                   // X-Ratelimit-*
	groupRateLimit                    // Ratelimit, Ratelimit-* (IETF)
	groupAnthropic                    // Anthropic-Ratelimit-* of API keys
	groupUnified                      // Anthropic-Ratelimit-Unified-* of subscriptions
	groupCodex                        // X-Codex-*
)

// The headers of a counter, in the order of counterFields.
const (
	fieldLimit = iota
	fieldRemaining
	fieldReset
	counterFields
)

// answerHeaders is what one pass over an answer's header keys finds: the
// groups of rate-limit headers it carries, the first value of each
// counter's headers, and whether Groq served it. It lets the counters be
// read without a map lookup per name.
type answerHeaders struct {
	groups uint8
	groq   bool
	// counted has bit i set when counter i has a header in the answer.
	counted uint16
	// values holds the first value of each counter's headers, by id (see
	// counterNames): counter*counterFields + field ("" where the answer
	// has none).
	values [len(counters) * counterFields]string
}

// counterValues returns the values of counter i's headers.
func (a *answerHeaders) counterValues(i int) *[counterFields]string {
	return (*[counterFields]string)(a.values[i*counterFields:])
}

// This fails to compile when answerHeaders.counted has no bit for a counter.
const _ = uint16(1) << (len(counters) - 1)

// counterNames holds the canonical name of each counter header by id,
// counter*counterFields + field; "" where a counter has no such header.
var counterNames = func() (names [len(counters) * counterFields]string) {
	for i, c := range counters {
		names[i*counterFields+fieldLimit] = c.limit
		names[i*counterFields+fieldRemaining] = c.remaining
		names[i*counterFields+fieldReset] = c.reset
	}
	return names
}()

// counterNamesByLen lists the ids of the counter headers (see counterNames)
// by the length of their names: a key is matched by comparing it with the
// few names of its length, with no hashing.
var counterNamesByLen = func() [][]uint8 {
	var byLen [][]uint8
	for id, name := range counterNames {
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

// counterHeader returns the id (see counterNames) of the counter header named
// k, or false. The names of one length differ within their last bytes
// (-Requests and -Tokens, -Limit- and -Reset-), which are compared first.
func counterHeader(k string) (uint8, bool) {
	if len(k) >= len(counterNamesByLen) {
		return 0, false
	}
	for _, id := range counterNamesByLen[len(k)] {
		if name := counterNames[id]; name[len(name)-1] == k[len(k)-1] && name[len(name)/2] == k[len(k)/2] && name == k {
			return id, true
		}
	}
	return 0, false
}

// scanHeaders reads into a, which must be zero, in one pass over the keys of
// h, which groups of rate-limit headers h carries and the values of the
// counters' headers. Keys are matched as net/http canonicalizes them, as a
// lookup of the canonical name would match them.
func scanHeaders(h http.Header, a *answerHeaders) {
	for k, v := range h {
		if len(k) < len("Ratelimit") {
			continue
		}
		counter := false
		switch k[0] {
		case 'R':
			switch {
			case strings.HasPrefix(k, headerRetryAfter):
				a.groups |= groupRetryAfter
			case strings.HasPrefix(k, headerRateLimit):
				a.groups |= groupRateLimit
				counter = true
			}
		case 'X':
			switch {
			case strings.HasPrefix(k, "X-Ratelimit-"):
				a.groups |= groupXRateLimit
				counter = true
			case strings.HasPrefix(k, "X-Codex-"):
				a.groups |= groupCodex
			case k == headerMsRetryAfterMs:
				a.groups |= groupRetryAfter
			case k == headerGroqRegion:
				a.groq = true
			}
		case 'A':
			switch {
			case strings.HasPrefix(k, "Anthropic-Ratelimit-Unified-"):
				a.groups |= groupUnified
			case strings.HasPrefix(k, "Anthropic-Ratelimit-"):
				a.groups |= groupAnthropic
				counter = true
			}
		}
		if !counter || len(v) == 0 {
			continue
		}
		if id, ok := counterHeader(k); ok {
			a.values[id] = v[0]
			a.counted |= 1 << (id / counterFields)
		}
	}
}

// readHeaders reads the rate-limit headers of an answer, as scanHeaders
// found them in h, as of now into e.
func readHeaders(h http.Header, a *answerHeaders, now time.Time, e *evidence) {
	g := a.groups
	if g&groupRetryAfter != 0 {
		e.retryAfter, e.hasRetryAfter = RetryAfterFromHeaders(h, now)
	}
	// A counter without headers reads as nothing: only those with some
	// are read.
	for m := a.counted; m != 0; m &= m - 1 {
		i := bits.TrailingZeros16(m)
		c, values := &counters[i], a.counterValues(i)
		if l, ok := c.read(values, now, a.groq); ok {
			e.add(l)
			if l.limit > 0 || l.spent {
				e.stated.note(c.axisOf(values[fieldLimit], a.groq, l.limit), l.limit, l.remaining, l.wait, l.hasReset)
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
	group            uint8 // the header group of the names
	// policies says the limit may list quota policies with their window
	// lengths after the live limit: "15, 100;w=60".
	policies bool
	// resetAlone says the reset may come without a remaining count, and
	// then dates the limit alone (providerkit's list of reset headers).
	resetAlone bool
}

// counters are the limit/remaining/reset triples vendors send. The same name
// does not mean the same window at every vendor: atGroq says where Groq
// differs.
var counters = [...]counter{
	// OpenAI: per-minute requests and tokens, resets as Go durations ("6ms",
	// "6m0s"); https://platform.openai.com/docs/guides/rate-limits. Azure
	// OpenAI sends the same names, sometimes only the remaining counts
	// (github.com/EvolvingPrograms/oaib/issues/11), or -1 and 0 as
	// placeholders for unknown (github.com/openai/openai-dotnet/issues/838).
	// Groq: -requests counts requests per DAY, -tokens tokens per minute;
	// https://console.groq.com/docs/rate-limits.
	{limit: "X-Ratelimit-Limit-Requests", remaining: "X-Ratelimit-Remaining-Requests", reset: "X-Ratelimit-Reset-Requests",
		atGroq: WindowDaily, axis: axisRPM, axisAtGroq: axisRPD, group: groupXRateLimit, resetAlone: true},
	{limit: "X-Ratelimit-Limit-Tokens", remaining: "X-Ratelimit-Remaining-Tokens", reset: "X-Ratelimit-Reset-Tokens",
		axis: axisTPM, group: groupXRateLimit, resetAlone: true},
	// Cerebras names the window in the header; resets are countdowns in float
	// seconds; https://inference-docs.cerebras.ai/support/rate-limits.
	// Mistral sends -tokens-minute too, without a reset
	// (github.com/mistralai/client-ts/issues/169).
	{limit: "X-Ratelimit-Limit-Requests-Day", remaining: "X-Ratelimit-Remaining-Requests-Day", reset: "X-Ratelimit-Reset-Requests-Day",
		window: WindowDaily, axis: axisRPD, group: groupXRateLimit},
	{limit: "X-Ratelimit-Limit-Tokens-Minute", remaining: "X-Ratelimit-Remaining-Tokens-Minute", reset: "X-Ratelimit-Reset-Tokens-Minute",
		axis: axisTPM, group: groupXRateLimit},
	// Mistral: requests per minute, no reset (same source).
	{limit: "X-Ratelimit-Limit-Req-Minute", remaining: "X-Ratelimit-Remaining-Req-Minute",
		axis: axisRPM, group: groupXRateLimit},
	// One unnamed window: GitHub (hourly, reset in epoch seconds;
	// docs.github.com rate-limits-for-the-rest-api), OpenRouter (reset in
	// epoch milliseconds, also inside its 429 bodies), Together (a countdown
	// in seconds, on 429s; togethercomputer/skills#61).
	{limit: "X-Ratelimit-Limit", remaining: "X-Ratelimit-Remaining", reset: "X-Ratelimit-Reset",
		group: groupXRateLimit, resetAlone: true},
	// The IETF three-field form, draft-ietf-httpapi-ratelimit-headers-00 to
	// -06: countdown seconds (gitlab.com sends epoch seconds instead).
	{limit: "Ratelimit-Limit", remaining: "Ratelimit-Remaining", reset: "Ratelimit-Reset",
		group: groupRateLimit, policies: true},
	// Anthropic API keys: per-minute buckets, resets in RFC 3339;
	// https://docs.anthropic.com/en/api/rate-limits#response-headers. The
	// tokens bucket is the tightest of the input and output ones, which
	// the pool's windows (one token count) do not keep apart.
	{limit: "Anthropic-Ratelimit-Requests-Limit", remaining: "Anthropic-Ratelimit-Requests-Remaining", reset: "Anthropic-Ratelimit-Requests-Reset",
		axis: axisRPM, group: groupAnthropic, resetAlone: true},
	{limit: "Anthropic-Ratelimit-Tokens-Limit", remaining: "Anthropic-Ratelimit-Tokens-Remaining", reset: "Anthropic-Ratelimit-Tokens-Reset",
		axis: axisTPM, group: groupAnthropic, resetAlone: true},
	{limit: "Anthropic-Ratelimit-Input-Tokens-Limit", remaining: "Anthropic-Ratelimit-Input-Tokens-Remaining", reset: "Anthropic-Ratelimit-Input-Tokens-Reset",
		group: groupAnthropic},
	{limit: "Anthropic-Ratelimit-Output-Tokens-Limit", remaining: "Anthropic-Ratelimit-Output-Tokens-Remaining", reset: "Anthropic-Ratelimit-Output-Tokens-Reset",
		group: groupAnthropic},
}

// read reads the counter from the values of its headers (see
// answerHeaders); it reports false when they have neither a readable
// remaining count nor, where the reset may come alone, a reset. A reset
// without a remaining count dates a limit without saying how full it is. A
// negative count is Azure's placeholder for unknown, and so is the reset
// beside it.
func (c *counter) read(values *[counterFields]string, now time.Time, groq bool) (limitEvidence, bool) {
	remainingField := values[fieldRemaining]
	remaining, ok := leadingNumber(remainingField)
	if !ok {
		if remainingField != "" || !c.resetAlone {
			return limitEvidence{}, false
		}
		var l limitEvidence
		l.wait, l.hasReset = parseWait(values[fieldReset], now)
		return l, l.hasReset
	}
	limitField := values[fieldLimit]
	limit, _ := leadingNumber(limitField)
	window := c.window
	switch {
	case groq && c.atGroq != WindowNone:
		window = c.atGroq
	case c.policies:
		window = policyWindow(limitField, limit)
	}
	l := counted(window, remaining, limit)
	if c.reset != "" {
		l.wait, l.hasReset = parseWait(values[fieldReset], now)
	}
	return l, true
}

// axisOf returns the window of the pool's the counter's limit counts: its
// axis, Groq's where Groq differs, or for an IETF limit (limitField is its
// header's value) the length of the quota policy that matches the live
// limit ("15, 15;w=60").
func (c *counter) axisOf(limitField string, groq bool, limit float64) windowAxis {
	switch {
	case groq && c.axisAtGroq != axisNone:
		return c.axisAtGroq
	case c.policies:
		for item := range strings.SplitSeq(limitField, ",") {
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
	l := limitEvidence{window: window, spent: remaining == 0, limit: limit, remaining: remaining}
	switch {
	case limit > 0:
		l.used, l.hasUsed = max(limit-remaining, 0)/limit, true
	case l.spent:
		l.used, l.hasUsed = 1, true
	}
	return l
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
			e.add(l)
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

// unifiedWindows are the windows of a Claude subscription: utilization as a
// fraction (above 1 is real), reset in epoch seconds, status allowed,
// allowed_warning or rejected; claim is the representative-claim value that
// names the window. 7d_oi is the weekly window of models served only from
// extra usage ("overage included"), which Anthropic scopes to those models.
// Sources: live answers recorded in
// PabloLION/agent-console-dashboard:docs/agents/hook-research/oauth-403-research.md
// and github.com/router-for-me/CLIProxyAPI/issues/5915.
var unifiedWindows = [...]struct {
	utilization, reset, status string
	window                     Window
	claim                      string
}{
	{"Anthropic-Ratelimit-Unified-5h-Utilization", "Anthropic-Ratelimit-Unified-5h-Reset", "Anthropic-Ratelimit-Unified-5h-Status",
		Window5h, "five_hour"},
	{"Anthropic-Ratelimit-Unified-7d-Utilization", "Anthropic-Ratelimit-Unified-7d-Reset", "Anthropic-Ratelimit-Unified-7d-Status",
		WindowWeekly, "seven_day"},
	{"Anthropic-Ratelimit-Unified-7d_oi-Utilization", "Anthropic-Ratelimit-Unified-7d_oi-Reset", "Anthropic-Ratelimit-Unified-7d_oi-Status",
		WindowWeekly, "seven_day_overage_included"},
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
		l := limitEvidence{window: u.window}
		l.used, l.hasUsed = parseNumber(first(h, u.utilization))
		l.wait, l.hasReset = parseWait(first(h, u.reset), now)
		status := first(h, u.status)
		named := claim != "" && claim == u.claim
		if !l.hasUsed && status == "" && !(rejected && named) {
			continue // a reset alone says nothing of how full the window is
		}
		l.spent = status == "rejected" || (l.hasUsed && l.used >= 1) || (rejected && named)
		e.add(l)
		if named {
			e.claim(l)
			claimed = true
		}
	}
	if claimed {
		return
	}
	// The claim names a window without headers of its own, or none: the
	// overall reset dates it.
	l := limitEvidence{window: claimWindow(claim), spent: rejected}
	l.wait, l.hasReset = parseWait(first(h, headerUnifiedReset), now)
	if rejected || l.window != WindowNone || l.hasReset {
		e.add(l)
		if l.window != WindowNone {
			e.claim(l)
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

// codexWindows are the two window slots of the ChatGPT backend (Codex): used
// percent 0–100, window length in minutes, reset as epoch seconds or a
// countdown. A slot is not a window — a free plan's primary slot is the
// weekly window — so the window comes from the length. Sources:
// openai/codex codex-rs rate-limit parsing; answers recorded in
// github.com/earendil-works/pi/issues/4172 and
// github.com/icebear0828/codex-proxy/issues/65.
var codexWindows = [...]struct{ usedPercent, minutes, resetAt, resetAfter string }{
	{"X-Codex-Primary-Used-Percent", "X-Codex-Primary-Window-Minutes", "X-Codex-Primary-Reset-At", "X-Codex-Primary-Reset-After-Seconds"},
	{"X-Codex-Secondary-Used-Percent", "X-Codex-Secondary-Window-Minutes", "X-Codex-Secondary-Reset-At", "X-Codex-Secondary-Reset-After-Seconds"},
}

// readCodex reads the ChatGPT backend's windows. A slot whose length is 0
// is unused and skipped.
func readCodex(h http.Header, now time.Time, e *evidence) {
	for _, c := range codexWindows {
		percent, ok := parseNumber(first(h, c.usedPercent))
		if !ok {
			continue
		}
		l := limitEvidence{used: percent / 100, hasUsed: true, spent: percent >= 100}
		if minutes, ok := parseNumber(first(h, c.minutes)); ok {
			if minutes == 0 {
				continue
			}
			l.window = windowOfLength(waitOf(minutes, time.Minute))
		}
		if l.wait, l.hasReset = parseWait(first(h, c.resetAt), now); !l.hasReset {
			l.wait, l.hasReset = parseWait(first(h, c.resetAfter), now)
		}
		e.add(l)
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
