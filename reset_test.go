package keypool

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// headers builds a canonical header map from name, value pairs.
func headers(kv ...string) http.Header {
	h := make(http.Header, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func TestRetryAfterFromHeaders(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    http.Header
		want time.Duration
		ok   bool
	}{
		{"none", headers("Content-Type", "application/json"), 0, false},
		{"seconds", headers("Retry-After", "7"), 7 * time.Second, true},
		{"fractional seconds", headers("Retry-After", "1.5"), 1500 * time.Millisecond, true},
		{"http-date", headers("Retry-After", "Tue, 04 Mar 2025 10:11:42 GMT"), 30 * time.Second, true},
		{"past http-date", headers("Retry-After", "Tue, 04 Mar 2025 10:00:00 GMT"), 0, true},
		{"retry-after-ms outranks seconds", headers("Retry-After", "2", "Retry-After-Ms", "1500"), 1500 * time.Millisecond, true},
		{"azure x-ms-retry-after-ms", headers("X-Ms-Retry-After-Ms", "250", "Retry-After", "1"), 250 * time.Millisecond, true},
		{"malformed ms falls back", headers("Retry-After-Ms", "soon", "Retry-After", "3"), 3 * time.Second, true},
		{"negative", headers("Retry-After", "-3"), 0, false},
		{"years", headers("Retry-After", "999999999"), maxHorizon, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := RetryAfterFromHeaders(tc.h, now)
			assert.Equal(t, tc.ok, ok, "RetryAfterFromHeaders(%v) ok = %v, want %v", tc.h, ok, tc.ok)
			assert.Equal(t, tc.want, got, "RetryAfterFromHeaders(%v) = %v, want %v", tc.h, got, tc.want)
		})
	}
}

// epoch returns now+d as Unix seconds.
func epoch(d time.Duration) string { return strconv.FormatInt(now.Add(d).Unix(), 10) }

func TestParseRateLimitReset(t *testing.T) {
	day := 24 * time.Hour
	for _, tc := range []struct {
		name string
		h    http.Header
		want Reset
	}{
		{"no rate-limit headers", headers("Content-Type", "application/json", "X-Request-Id", "abc"), Reset{}},
		{"retry-after alone dates the lift", headers("Retry-After", "7"),
			Reset{RetryAfter: 7 * time.Second, HasRetryAfter: true, ResetAt: now.Add(7 * time.Second)}},
		{"openai per-minute windows: the fuller binds, no window named", headers(
			"X-Ratelimit-Limit-Requests", "60", "X-Ratelimit-Remaining-Requests", "6", "X-Ratelimit-Reset-Requests", "1s",
			"X-Ratelimit-Limit-Tokens", "150000", "X-Ratelimit-Remaining-Tokens", "149984", "X-Ratelimit-Reset-Tokens", "6m0s"),
			Reset{ResetAt: now.Add(time.Second), Utilization: 0.9, HasUtilization: true}},
		{"openai tokens spent", headers(
			"X-Ratelimit-Limit-Tokens", "10000", "X-Ratelimit-Remaining-Tokens", "0", "X-Ratelimit-Reset-Tokens", "20ms"),
			Reset{ResetAt: now.Add(20 * time.Millisecond), Utilization: 1, HasUtilization: true}},
		{"groq requests count per day", headers("X-Groq-Region", "fra",
			"X-Ratelimit-Limit-Requests", "1000", "X-Ratelimit-Remaining-Requests", "100", "X-Ratelimit-Reset-Requests", "2m59.56s",
			"X-Ratelimit-Limit-Tokens", "6000", "X-Ratelimit-Remaining-Tokens", "5000", "X-Ratelimit-Reset-Tokens", "7.66s"),
			Reset{ResetAt: now.Add(2*time.Minute + 59560*time.Millisecond), Window: WindowDaily, Utilization: 0.9, HasUtilization: true}},
		{"the same names without groq's header are per minute", headers(
			"X-Ratelimit-Limit-Requests", "1000", "X-Ratelimit-Remaining-Requests", "100", "X-Ratelimit-Reset-Requests", "2m59.56s"),
			Reset{ResetAt: now.Add(2*time.Minute + 59560*time.Millisecond), Utilization: 0.9, HasUtilization: true}},
		{"azure placeholders are unknown", headers(
			"X-Ratelimit-Limit-Tokens", "-1", "X-Ratelimit-Remaining-Tokens", "-1", "X-Ratelimit-Reset-Tokens", "0"), Reset{}},
		{"cerebras day window spent", headers(
			"X-Ratelimit-Limit-Requests-Day", "14400", "X-Ratelimit-Remaining-Requests-Day", "0", "X-Ratelimit-Reset-Requests-Day", "3600.5",
			"X-Ratelimit-Limit-Tokens-Minute", "60000", "X-Ratelimit-Remaining-Tokens-Minute", "0", "X-Ratelimit-Reset-Tokens-Minute", "11.5"),
			Reset{ResetAt: now.Add(3600500 * time.Millisecond), Window: WindowDaily, Utilization: 1, HasUtilization: true}},
		{"a spent window's reset outranks retry-after", headers("Retry-After", "60",
			"Anthropic-Ratelimit-Unified-Status", "rejected", "Anthropic-Ratelimit-Unified-Representative-Claim", "seven_day",
			"Anthropic-Ratelimit-Unified-7d-Utilization", "1.0", "Anthropic-Ratelimit-Unified-7d-Reset", epoch(3*day),
			"Anthropic-Ratelimit-Unified-5h-Utilization", "0.2", "Anthropic-Ratelimit-Unified-5h-Reset", epoch(time.Hour)),
			Reset{RetryAfter: time.Minute, HasRetryAfter: true, ResetAt: now.Add(3 * day), Window: WindowWeekly, Utilization: 1, HasUtilization: true}},
		{"both subscription windows full: the later is named", headers(
			"Anthropic-Ratelimit-Unified-5h-Utilization", "1.02", "Anthropic-Ratelimit-Unified-5h-Reset", epoch(2*time.Hour), "Anthropic-Ratelimit-Unified-5h-Status", "rejected",
			"Anthropic-Ratelimit-Unified-7d-Utilization", "1.0", "Anthropic-Ratelimit-Unified-7d-Reset", epoch(2*day), "Anthropic-Ratelimit-Unified-7d-Status", "rejected"),
			Reset{ResetAt: now.Add(2 * day), Window: WindowWeekly, Utilization: 1, HasUtilization: true}},
		{"utilization above 1 is real", headers(
			"Anthropic-Ratelimit-Unified-5h-Utilization", "1.02", "Anthropic-Ratelimit-Unified-5h-Reset", epoch(2*time.Hour)),
			Reset{ResetAt: now.Add(2 * time.Hour), Window: Window5h, Utilization: 1.02, HasUtilization: true}},
		{"a claim without its own headers takes the overall reset", headers(
			"Anthropic-Ratelimit-Unified-Status", "rejected", "Anthropic-Ratelimit-Unified-Representative-Claim", "seven_day_opus",
			"Anthropic-Ratelimit-Unified-Reset", epoch(4*day),
			"Anthropic-Ratelimit-Unified-5h-Utilization", "0.1", "Anthropic-Ratelimit-Unified-5h-Reset", epoch(time.Hour)),
			Reset{ResetAt: now.Add(4 * day), Window: WindowWeekly}},
		{"subscription windows on a success: ties go to the later reset", headers(
			"Anthropic-Ratelimit-Unified-5h-Utilization", "0.91", "Anthropic-Ratelimit-Unified-5h-Reset", epoch(time.Hour),
			"Anthropic-Ratelimit-Unified-7d-Utilization", "0.91", "Anthropic-Ratelimit-Unified-7d-Reset", epoch(day)),
			Reset{ResetAt: now.Add(day), Window: WindowWeekly, Utilization: 0.91, HasUtilization: true}},
		{"codex plus: 5h primary, weekly secondary", headers(
			"X-Codex-Primary-Used-Percent", "42.5", "X-Codex-Primary-Window-Minutes", "300", "X-Codex-Primary-Reset-At", epoch(3*time.Hour),
			"X-Codex-Secondary-Used-Percent", "10", "X-Codex-Secondary-Window-Minutes", "10080", "X-Codex-Secondary-Reset-After-Seconds", "86400"),
			Reset{ResetAt: now.Add(3 * time.Hour), Window: Window5h, Utilization: 0.425, HasUtilization: true}},
		{"codex free: the primary slot is weekly", headers(
			"X-Codex-Primary-Used-Percent", "100", "X-Codex-Primary-Window-Minutes", "10080", "X-Codex-Primary-Reset-After-Seconds", "86400",
			"X-Codex-Secondary-Used-Percent", "0", "X-Codex-Secondary-Window-Minutes", "0", "X-Codex-Secondary-Reset-At", ""),
			Reset{ResetAt: now.Add(day), Window: WindowWeekly, Utilization: 1, HasUtilization: true}},
		{"ietf three fields with a daily policy", headers(
			"Ratelimit-Limit", "100, 10;w=1, 100;w=86400", "Ratelimit-Remaining", "0", "Ratelimit-Reset", "3600"),
			Reset{ResetAt: now.Add(time.Hour), Window: WindowDaily, Utilization: 1, HasUtilization: true}},
		{"ietf structured fields with a weekly policy", headers(
			"Ratelimit", `"weekly";r=25;t=86400`, "Ratelimit-Policy", `"burst";q=10;w=1, "weekly";q=100;w=604800`),
			Reset{ResetAt: now.Add(day), Window: WindowWeekly, Utilization: 0.75, HasUtilization: true}},
		{"ietf structured fields, two policies, the spent one binds", headers(
			"Ratelimit", `"burst";r=0;t=1, "day";r=50;t=3000`, "Ratelimit-Policy", `"burst";q=10;w=1, "day";q=100;w=86400`),
			Reset{ResetAt: now.Add(time.Second), Utilization: 1, HasUtilization: true}},
		{"github remaining 0 with an epoch reset", headers(
			"X-Ratelimit-Limit", "60", "X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", epoch(40*time.Minute)),
			Reset{ResetAt: now.Add(40 * time.Minute), Utilization: 1, HasUtilization: true}},
		{"openrouter epoch milliseconds", headers(
			"X-Ratelimit-Limit", "50", "X-Ratelimit-Remaining", "10", "X-Ratelimit-Reset", strconv.FormatInt(now.Add(5*time.Hour).UnixMilli(), 10)),
			Reset{ResetAt: now.Add(5 * time.Hour), Utilization: 0.8, HasUtilization: true}},
		{"a reset years away is capped", headers(
			"X-Ratelimit-Limit", "60", "X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", "99999999999999999"),
			Reset{ResetAt: now.Add(maxHorizon), Utilization: 1, HasUtilization: true}},
		{"a reset in the past lifts now: its counts are of a window gone", headers(
			"X-Ratelimit-Limit", "60", "X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", epoch(-time.Hour)),
			Reset{ResetAt: now}},
		{"malformed values are ignored", headers(
			"X-Ratelimit-Limit-Requests", "NaN", "X-Ratelimit-Remaining-Requests", "lots", "X-Ratelimit-Reset-Requests", "-5s",
			"Anthropic-Ratelimit-Unified-5h-Utilization", "+Inf", "Retry-After", "later",
			"X-Codex-Primary-Used-Percent", "-3", "Ratelimit", `"x";r=-1;t=abc`), Reset{}},
		{"more remaining than the limit is unused", headers(
			"X-Ratelimit-Limit", "10", "X-Ratelimit-Remaining", "12", "X-Ratelimit-Reset", "30"),
			Reset{ResetAt: now.Add(30 * time.Second), HasUtilization: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ParseRateLimitReset(tc.h, now)
			assertReset(t, "ParseRateLimitReset", tc.want, got)
		})
	}
}

// assertReset compares two readings, utilization within rounding.
func assertReset(t *testing.T, call string, want, got Reset) {
	t.Helper()
	assert.InDelta(t, want.Utilization, got.Utilization, 1e-9, "%s Utilization = %v, want %v", call, got.Utilization, want.Utilization)
	want.Utilization, got.Utilization = 0, 0
	assert.True(t, want.ResetAt.Equal(got.ResetAt), "%s ResetAt = %v, want %v", call, got.ResetAt, want.ResetAt)
	want.ResetAt, got.ResetAt = time.Time{}, time.Time{}
	assert.Equal(t, want, got, "%s = %+v, want %+v", call, got, want)
}

func TestWindowOfLength(t *testing.T) {
	for _, tc := range []struct {
		in   time.Duration
		want Window
	}{
		{0, WindowNone}, {time.Minute, WindowNone}, {time.Hour, WindowNone},
		{5 * time.Hour, Window5h}, {12 * time.Hour, Window5h},
		{24 * time.Hour, WindowDaily}, {72 * time.Hour, WindowDaily},
		{7 * 24 * time.Hour, WindowWeekly}, {30 * 24 * time.Hour, WindowMonthly},
	} {
		got := windowOfLength(tc.in)
		assert.Equal(t, tc.want, got, "windowOfLength(%v) = %q, want %q", tc.in, got, tc.want)
	}
}

// benchHeaders are header sets of real answers (see testdata/answers).
var benchHeaders = map[string]http.Header{
	"200 without rate-limit headers": headers(
		"Content-Type", "application/json", "Date", "Tue, 04 Mar 2025 10:11:12 GMT", "Server", "cloudflare",
		"X-Request-Id", "req_0042687a7f7155cdd6c0a7c1e2559776", "Cf-Ray", "8c7d8f8e9a0b1c2d-FRA", "Content-Length", "512",
		"Strict-Transport-Security", "max-age=31536000; includeSubDomains; preload", "Alt-Svc", `h3=":443"; ma=86400`),
	"openai": headers(
		"Content-Type", "application/json", "Date", "Mon, 23 Sep 2024 01:14:13 GMT", "Openai-Processing-Ms", "424",
		"Openai-Version", "2020-10-01", "X-Request-Id", "req_0042687a7f7155cdd6c0a7c1e2559776",
		"X-Ratelimit-Limit-Requests", "10000", "X-Ratelimit-Limit-Tokens", "50000000",
		"X-Ratelimit-Remaining-Requests", "9999", "X-Ratelimit-Remaining-Tokens", "49999813",
		"X-Ratelimit-Reset-Requests", "6ms", "X-Ratelimit-Reset-Tokens", "0s"),
	"anthropic": headers(
		"Content-Type", "application/json", "Date", "Wed, 30 Apr 2025 13:31:10 GMT", "Request-Id", "req_011",
		"Anthropic-Ratelimit-Input-Tokens-Limit", "100000", "Anthropic-Ratelimit-Input-Tokens-Remaining", "0",
		"Anthropic-Ratelimit-Input-Tokens-Reset", "2025-04-30T13:32:11Z",
		"Anthropic-Ratelimit-Output-Tokens-Limit", "20000", "Anthropic-Ratelimit-Output-Tokens-Remaining", "20000",
		"Anthropic-Ratelimit-Output-Tokens-Reset", "2025-04-30T13:31:10Z",
		"Anthropic-Ratelimit-Requests-Limit", "1000", "Anthropic-Ratelimit-Requests-Remaining", "1000",
		"Anthropic-Ratelimit-Requests-Reset", "2025-04-30T13:31:10Z",
		"Anthropic-Ratelimit-Tokens-Limit", "120000", "Anthropic-Ratelimit-Tokens-Remaining", "20000",
		"Anthropic-Ratelimit-Tokens-Reset", "2025-04-30T13:31:10Z", "Retry-After", "4"),
	"claude subscription": headers(
		"Content-Type", "application/json",
		"Anthropic-Ratelimit-Unified-5h-Utilization", "0.72", "Anthropic-Ratelimit-Unified-5h-Reset", "1772096400",
		"Anthropic-Ratelimit-Unified-5h-Status", "allowed", "Anthropic-Ratelimit-Unified-7d-Utilization", "0.34",
		"Anthropic-Ratelimit-Unified-7d-Reset", "1772463600", "Anthropic-Ratelimit-Unified-7d-Status", "allowed",
		"Anthropic-Ratelimit-Unified-Status", "allowed", "Anthropic-Ratelimit-Unified-Representative-Claim", "five_hour",
		"Anthropic-Ratelimit-Unified-Reset", "1772096400"),
}

func BenchmarkParseRateLimitReset(b *testing.B) {
	for name, h := range benchHeaders {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ParseRateLimitReset(h, now)
			}
		})
	}
}

// Every header scanHeaders looks for is found, each where it belongs,
// and a key that differs from one in any byte is not.
func TestScanHeadersFindsEveryName(t *testing.T) {
	for _, n := range headerNames {
		var a answerHeaders
		scanHeaders(http.Header{n.name: {"1"}}, &a)
		want := answerHeaders{groups: n.group}
		if n.group == 0 {
			want.counted = 1 << n.counter
			switch n.field {
			case fieldLimit:
				want.values[n.counter].limit = 1
			case fieldRemaining:
				want.values[n.counter].remaining, want.values[n.counter].remainingOK, want.values[n.counter].remainingSet = 1, true, true
			default:
				want.values[n.counter].reset = timeValue{kind: timeWait, n: int64(time.Second)}
			}
		}
		assert.Equal(t, want, a, "scanHeaders(%s: 1)", n.name)
		for i := range n.name {
			other := n.name[:i] + "~" + n.name[i+1:]
			var a answerHeaders
			scanHeaders(http.Header{other: {"1"}}, &a)
			assert.True(t, a.empty(), "scanHeaders(%s: 1) = %+v, want nothing found", other, a)
		}
	}
	for _, p := range headerPrefixes {
		var a answerHeaders
		scanHeaders(http.Header{p.prefix + "Anything": {"1"}}, &a)
		assert.Equal(t, answerHeaders{groups: p.group}, a, "scanHeaders(%sAnything: 1)", p.prefix)
	}
}

// A limit stated under a minute's names whose reset is hours off is the
// day's: OpenAI states whichever window of a key binds as
// x-ratelimit-limit-requests, and a free key's daily quota resets in hours.
func TestStatedLimitByItsReset(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reset string
		want  Limits
	}{
		{"a minute's reset: RPM", "6s", Limits{RPM: 5}},
		{"a minute and a rounded second: RPM", "1m0.9s", Limits{RPM: 5}},
		{"hours: RPD", "11h59m0s", Limits{RPD: 5}},
		{"a day of daylight saving's 25 hours: RPD", "25h0m0s", Limits{RPD: 5}},
		{"beyond a day: neither", "72h0m0s", Limits{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := headers("X-Ratelimit-Limit-Requests", "5", "X-Ratelimit-Remaining-Requests", "0", "X-Ratelimit-Reset-Requests", tc.reset)
			v := classify(200, h, nil, now)
			assert.Equal(t, tc.want, v.stated.limits)
		})
	}
}
