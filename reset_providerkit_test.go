package keypool

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// The test vectors of providerkit (@providerkit/core, TypeScript), ported as
// data: core/test/rate-limit.test.ts (parseRateLimitReset,
// parseUsageLimitBody and their parity with retryAfterFromHeaders) and the
// retryAfterFromHeaders cases of core/test/transport.test.ts, at commit
// 1a8f108f3444c2d22d0660771eb88e61ed3dbe62 of
// github.com/providerkit/providerkit. Each vector keeps providerkit's input
// and expected output; where keypool differs on purpose, the vector names
// the difference (see docs/library.md, "Where keypool differs from providerkit")
// and what keypool gives instead. Only the fields providerkit has are
// compared: the retry-after, the reset and the window (keypool's
// Utilization has no counterpart there).

// pkNow is providerkit's NOW: 1_700_000_000_000 ms.
var pkNow = time.UnixMilli(1_700_000_000_000).UTC()

// The deliberate differences from providerkit.
const (
	// diffSleep: RetryAfterFromHeaders is the sleep the answer asks for
	// (Retry-After and its millisecond forms) and nothing else.
	diffSleep = "RetryAfterFromHeaders is the sleep only"
	// diffHorizon: the ChatGPT backend's resets_in_seconds and resets_at
	// say when the window resets: a horizon (ResetAt), not a retry-after.
	diffHorizon = "a body's reset is a horizon, not a sleep"
	// diffFraction: Anthropic's unified utilization is a fraction, 1 full.
	diffFraction = "unified utilization is a fraction"
)

// pkWant is what providerkit's RateLimitReset holds: retryAfterMs,
// resetAtMs (as an offset from pkNow) and window; a nil pointer is absent.
type pkWant struct {
	retryAfter *time.Duration
	resetAt    *time.Duration
	window     Window
}

func dur(d time.Duration) *time.Duration { return &d }

// pkEpoch is providerkit's inSeconds: pkNow+d in epoch seconds.
func pkEpoch(d time.Duration) string { return strconv.FormatInt(pkNow.Add(d).Unix(), 10) }

// pkISO is JavaScript's Date.toISOString of pkNow+d.
func pkISO(d time.Duration) string { return pkNow.Add(d).Format("2006-01-02T15:04:05.000Z") }

// pkUTC is JavaScript's Date.toUTCString of pkNow+d.
func pkUTC(d time.Duration) string { return pkNow.Add(d).Format(http.TimeFormat) }

// assertPK compares what keypool read with what is wanted of it.
func assertPK(t *testing.T, call string, want pkWant, got Reset) {
	t.Helper()
	if want.retryAfter == nil {
		assert.False(t, got.HasRetryAfter, "%s RetryAfter = %v, want none", call, got.RetryAfter)
	} else {
		assert.True(t, got.HasRetryAfter, "%s HasRetryAfter = false, want %v", call, *want.retryAfter)
		assert.Equal(t, *want.retryAfter, got.RetryAfter, "%s RetryAfter = %v, want %v", call, got.RetryAfter, *want.retryAfter)
	}
	if want.resetAt == nil {
		assert.True(t, got.ResetAt.IsZero(), "%s ResetAt = %v, want none", call, got.ResetAt)
	} else {
		w := pkNow.Add(*want.resetAt)
		assert.True(t, w.Equal(got.ResetAt), "%s ResetAt = %v, want %v", call, got.ResetAt, w)
	}
	assert.Equal(t, want.window, got.Window, "%s Window = %q, want %q", call, got.Window, want.window)
}

func TestProviderkitParseRateLimitReset(t *testing.T) {
	const hour, day = time.Hour, 24 * time.Hour
	for _, tc := range []struct {
		name    string
		headers []string // name, value pairs, in providerkit's spelling
		want    pkWant   // providerkit's answer
		diff    string   // the deliberate difference, when keypool's answer is kp
		kp      pkWant
	}{
		{"reads retry-after as delay-seconds", []string{"retry-after", "30"},
			pkWant{retryAfter: dur(30 * time.Second), resetAt: dur(30 * time.Second)}, "", pkWant{}},
		{"reads retry-after as an absolute HTTP-date", []string{"retry-after", pkUTC(45 * time.Second)},
			pkWant{retryAfter: dur(45 * time.Second), resetAt: dur(45 * time.Second)}, "", pkWant{}},
		{"clamps a retry-after date already in the past to zero", []string{"retry-after", pkUTC(-time.Minute)},
			pkWant{retryAfter: dur(0), resetAt: dur(0)}, "", pkWant{}},
		{"names the unified 5h window when it is the more utilized one", []string{
			"anthropic-ratelimit-unified-5h-utilization", "97", "anthropic-ratelimit-unified-5h-reset", pkEpoch(4 * hour),
			"anthropic-ratelimit-unified-7d-utilization", "12", "anthropic-ratelimit-unified-7d-reset", pkEpoch(6 * day)},
			pkWant{window: Window5h, resetAt: dur(4 * hour)},
			// 97 and 12 are 97 and 12 times full: both windows are spent,
			// and the one that lifts later binds.
			diffFraction, pkWant{window: WindowWeekly, resetAt: dur(6 * day)}},
		{"names the weekly window when it is the more utilized one", []string{
			"anthropic-ratelimit-unified-5h-utilization", "20", "anthropic-ratelimit-unified-5h-reset", pkEpoch(hour),
			"anthropic-ratelimit-unified-7d-utilization", "99", "anthropic-ratelimit-unified-7d-reset", pkEpoch(3 * day)},
			pkWant{window: WindowWeekly, resetAt: dur(3 * day)}, "", pkWant{}},
		{"lets the window's reset outrank retry-after", []string{"retry-after", "60",
			"anthropic-ratelimit-unified-7d-utilization", "100", "anthropic-ratelimit-unified-7d-reset", pkEpoch(3 * day)},
			pkWant{window: WindowWeekly, retryAfter: dur(time.Minute), resetAt: dur(3 * day)}, "", pkWant{}},
		{"ignores a window whose reset already elapsed", []string{"retry-after", "30",
			"anthropic-ratelimit-unified-5h-utilization", "100", "anthropic-ratelimit-unified-5h-reset", pkEpoch(-hour)},
			pkWant{retryAfter: dur(30 * time.Second), resetAt: dur(30 * time.Second)}, "", pkWant{}},
		{"ignores a window that reports a reset but no utilization", []string{
			"anthropic-ratelimit-unified-5h-reset", pkEpoch(4 * hour)}, pkWant{}, "", pkWant{}},
		{"falls back to the API-key RFC 3339 reset timestamps", []string{
			"anthropic-ratelimit-requests-reset", pkISO(90 * time.Second)}, pkWant{resetAt: dur(90 * time.Second)}, "", pkWant{}},
		{"skips an RFC 3339 reset already in the past and takes the next header", []string{
			"anthropic-ratelimit-requests-reset", pkISO(-5 * time.Second), "anthropic-ratelimit-tokens-reset", pkISO(2 * time.Minute)},
			pkWant{resetAt: dur(2 * time.Minute)}, "", pkWant{}},
		{"does not consult the RFC 3339 fallback once retry-after answered", []string{"retry-after", "30",
			"anthropic-ratelimit-requests-reset", pkISO(15 * time.Minute)},
			pkWant{retryAfter: dur(30 * time.Second), resetAt: dur(30 * time.Second)}, "", pkWant{}},
		{"reads the singular unified reset, written in epoch seconds", []string{
			"anthropic-ratelimit-unified-reset", pkEpoch(3 * day)}, pkWant{resetAt: dur(3 * day)}, "", pkWant{}},
		{"reads the x-ratelimit-* reset spellings every non-Anthropic provider sends", []string{
			"x-ratelimit-reset-requests", pkEpoch(2 * hour)}, pkWant{resetAt: dur(2 * hour)}, "", pkWant{}},
		{"reads a small integer reset as a countdown rather than the year 120", []string{
			"x-ratelimit-reset", "120"}, pkWant{resetAt: dur(2 * time.Minute)}, "", pkWant{}},
		{"skips an epoch-seconds reset already elapsed and takes the next header", []string{
			"anthropic-ratelimit-unified-reset", pkEpoch(-hour), "x-ratelimit-reset-tokens", pkEpoch(30 * time.Minute)},
			pkWant{resetAt: dur(30 * time.Minute)}, "", pkWant{}},
		{"yields an empty result for an unrecognized shape", []string{
			"x-ratelimit-remaining", "0", "content-type", "text/plain"}, pkWant{}, "", pkWant{}},
		{"yields an empty result for an unparseable retry-after", []string{"retry-after", "soon"}, pkWant{}, "", pkWant{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.want
			if tc.diff != "" {
				want = tc.kp
			}
			assertPK(t, "ParseRateLimitReset("+tc.diff+")", want, ParseRateLimitReset(headers(tc.headers...), pkNow))
		})
	}
}

// parity with retryAfterFromHeaders: every reset header, in every spelling,
// dates the lift three days out.
func TestProviderkitResetHeaderParity(t *testing.T) {
	const threeDays = 3 * 24 * time.Hour
	names := []string{
		"anthropic-ratelimit-unified-reset", "anthropic-ratelimit-requests-reset", "anthropic-ratelimit-tokens-reset",
		"x-ratelimit-reset-requests", "x-ratelimit-reset-tokens", "x-ratelimit-reset",
	}
	spellings := map[string]string{
		"epoch seconds":          pkEpoch(threeDays),
		"an RFC 3339 timestamp":  pkISO(threeDays),
		"a countdown in seconds": strconv.Itoa(int(threeDays.Seconds())),
	}
	for spelling, value := range spellings {
		for _, name := range names {
			h := headers(name, value)
			assertPK(t, "ParseRateLimitReset("+name+" as "+spelling+")", pkWant{resetAt: dur(threeDays)}, ParseRateLimitReset(h, pkNow))
			// providerkit's retryAfterFromHeaders gives three days here too;
			// keypool's sleep is only what Retry-After asks for.
			d, ok := RetryAfterFromHeaders(h, pkNow)
			assert.False(t, ok, "RetryAfterFromHeaders(%s as %s) = %v, want no sleep (%s)", name, spelling, d, diffSleep)
		}
	}
}

func TestProviderkitRetryAfterFromHeaders(t *testing.T) {
	for _, tc := range []struct {
		name    string
		headers []string
		want    *time.Duration // providerkit's answer
		diff    string         // when keypool gives no sleep instead
	}{
		{"prefers Retry-After in seconds", []string{"retry-after", "30"}, dur(30 * time.Second), ""},
		{"accepts Retry-After as an HTTP-date", []string{"retry-after", pkUTC(45 * time.Second)}, dur(45 * time.Second), ""},
		{"falls back to a vendor reset header in epoch seconds", []string{
			"anthropic-ratelimit-unified-reset", pkEpoch(2 * time.Minute)}, dur(2 * time.Minute), diffSleep},
		{"reads a relative reset count too", []string{"x-ratelimit-reset", "15"}, dur(15 * time.Second), diffSleep},
		{"is undefined when the provider said nothing", nil, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := RetryAfterFromHeaders(headers(tc.headers...), pkNow)
			if tc.want == nil || tc.diff != "" {
				assert.False(t, ok, "RetryAfterFromHeaders = %v, want none %s", got, tc.diff)
				return
			}
			assert.True(t, ok, "RetryAfterFromHeaders ok = false, want %v", *tc.want)
			assert.Equal(t, *tc.want, got, "RetryAfterFromHeaders = %v, want %v", got, *tc.want)
		})
	}
}

func TestProviderkitParseUsageLimitBody(t *testing.T) {
	const hour, day = time.Hour, 24 * time.Hour
	sec := func(d time.Duration) string { return strconv.FormatInt(int64(d.Seconds()), 10) }
	at := func(d time.Duration) string { return strconv.FormatInt(pkNow.Add(d).Unix(), 10) }
	// horizon is keypool's answer where providerkit also calls the wait a
	// retry-after: the same reset and window, no sleep (diffHorizon).
	horizon := func(w pkWant) pkWant { w.retryAfter = nil; return w }
	type vector struct {
		name string
		body string
		want pkWant
	}
	vectors := []vector{
		{"reads resets_in_seconds off the codex error envelope",
			`{"error":{"type":"usage_limit_reached","resets_in_seconds":` + sec(4*hour) + `}}`,
			pkWant{retryAfter: dur(4 * hour), resetAt: dur(4 * hour), window: Window5h}},
		{"reads resets_at as epoch seconds when there is no relative field",
			`{"error":{"resets_at":` + at(2*hour) + `}}`,
			pkWant{retryAfter: dur(2 * hour), resetAt: dur(2 * hour), window: Window5h}},
		{"prefers resets_in_seconds when both are present",
			`{"error":{"resets_in_seconds":3600,"resets_at":` + at(99*hour) + `}}`,
			pkWant{retryAfter: dur(hour), resetAt: dur(hour), window: Window5h}},
		{"clamps a resets_at already in the past to zero",
			`{"error":{"resets_at":` + at(-10*time.Minute) + `}}`,
			pkWant{retryAfter: dur(0), resetAt: dur(0)}},
		{"does not let a null resets_in_seconds swallow a real resets_at",
			`{"error":{"resets_in_seconds":null,"resets_at":` + at(3*day) + `}}`,
			pkWant{retryAfter: dur(3 * day), resetAt: dur(3 * day), window: WindowWeekly}},
		{"yields an empty result when both reset fields are null",
			`{"error":{"resets_in_seconds":null,"resets_at":null}}`, pkWant{}},
		{"still reads the fields when a relay stringifies them (relative)",
			`{"error":{"resets_in_seconds":"7200"}}`,
			pkWant{retryAfter: dur(2 * hour), resetAt: dur(2 * hour), window: Window5h}},
		{"still reads the fields when a relay stringifies them (absolute)",
			`{"error":{"resets_at":"` + at(2*hour) + `"}}`,
			pkWant{retryAfter: dur(2 * hour), resetAt: dur(2 * hour), window: Window5h}},
		{"accepts the fields at the top level, as gateway relays send them",
			`{"resets_in_seconds":` + sec(3*hour) + `}`,
			pkWant{retryAfter: dur(3 * hour), resetAt: dur(3 * hour), window: Window5h}},
		{"names no window under the ten-minute floor",
			`{"error":{"resets_in_seconds":45}}`,
			pkWant{retryAfter: dur(45 * time.Second), resetAt: dur(45 * time.Second)}},
		{"names a window just past the floor",
			`{"error":{"resets_in_seconds":660}}`,
			pkWant{retryAfter: dur(11 * time.Minute), resetAt: dur(11 * time.Minute), window: Window5h}},
		{"names the weekly window for a multi-day wait",
			`{"error":{"resets_in_seconds":` + sec(2*day) + `}}`,
			pkWant{retryAfter: dur(2 * day), resetAt: dur(2 * day), window: WindowWeekly}},
		{"names the monthly window past a week",
			`{"error":{"resets_in_seconds":` + sec(30*day) + `}}`,
			pkWant{retryAfter: dur(30 * day), resetAt: dur(30 * day), window: WindowMonthly}},
		{"yields an empty result for malformed JSON", `upstream said no`, pkWant{}},
		{"yields an empty result for an empty body", ``, pkWant{}},
		{"yields an empty result for JSON null", `null`, pkWant{}},
		{"yields an empty result for a JSON string", `"rate limited"`, pkWant{}},
		{"yields an empty result when the body names no reset at all", `{"error":{"type":"rate_limit_error"}}`, pkWant{}},
	}
	// Every value Number() quietly turns into a real 0 or a number it is
	// not: resets_at still decides, and the window is weekly.
	for _, blank := range []string{`null`, `""`, `"   "`, `[]`, `false`, `{}`, `[3]`} {
		vectors = append(vectors, vector{"ignores resets_in_seconds: " + blank + " and reads resets_at",
			`{"error":{"resets_in_seconds":` + blank + `,"resets_at":` + at(3*day) + `}}`,
			pkWant{retryAfter: dur(3 * day), resetAt: dur(3 * day), window: WindowWeekly}})
	}
	for _, v := range vectors {
		t.Run(v.name, func(t *testing.T) {
			assertPK(t, "ParseUsageLimitBody("+diffHorizon+")", horizon(v.want), ParseUsageLimitBody([]byte(v.body), pkNow))
		})
	}
}
