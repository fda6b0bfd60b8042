package keypool

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestParseUsageLimitBody(t *testing.T) {
	usageLimit := func(seconds int) string {
		return `{"error":{"type":"usage_limit_reached","message":"The usage limit has been reached","resets_in_seconds":` + strconv.Itoa(seconds) + `}}`
	}
	for _, tc := range []struct {
		name, body string
		want       Reset
	}{
		{"empty", "", Reset{}},
		{"a success body", `{"id":"chatcmpl-1","choices":[]}`, Reset{}},
		{"go duration in prose", `Please try again in 26.604s.`,
			Reset{RetryAfter: 26604 * time.Millisecond, HasRetryAfter: true, ResetAt: now.Add(26604 * time.Millisecond)}},
		{"minutes and seconds in prose", `Rate limit reached. Please try again in 7m12s. Visit …`,
			Reset{RetryAfter: 7*time.Minute + 12*time.Second, HasRetryAfter: true, ResetAt: now.Add(7*time.Minute + 12*time.Second)}},
		{"seconds as a word", `{"error":{"code":"429","message":"Please retry after 30 seconds."}}`,
			Reset{RetryAfter: 30 * time.Second, HasRetryAfter: true, ResetAt: now.Add(30 * time.Second)}},
		{"minutes as a word", `Try again in 2 minutes`,
			Reset{RetryAfter: 2 * time.Minute, HasRetryAfter: true, ResetAt: now.Add(2 * time.Minute)}},
		{"a marker without a number", `Please try again later. Retry after some time.`, Reset{}},
		{"a number without a unit", `try again in 5 apples`, Reset{}},
		{"codex wait of minutes names no window", usageLimit(300), Reset{ResetAt: now.Add(5 * time.Minute)}},
		{"codex wait of hours is the 5h window", usageLimit(3 * 3600), Reset{ResetAt: now.Add(3 * time.Hour), Window: Window5h}},
		{"codex wait up to 5.5 hours is the 5h window", usageLimit(5*3600 + 1800), Reset{ResetAt: now.Add(5*time.Hour + 30*time.Minute), Window: Window5h}},
		{"codex wait of days is the weekly window", usageLimit(3 * 86400), Reset{ResetAt: now.Add(72 * time.Hour), Window: WindowWeekly}},
		{"codex wait beyond 7.5 days is the monthly window", usageLimit(20 * 86400), Reset{ResetAt: now.Add(480 * time.Hour), Window: WindowMonthly}},
		{"codex absurd wait is capped", usageLimit(100000000), Reset{ResetAt: now.Add(maxHorizon), Window: WindowMonthly}},
		{"gemini array body per day", `[{"error":{"code":429,"status":"RESOURCE_EXHAUSTED","details":[` +
			`{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaId":"GenerateRequestsPerDayPerProjectPerModel-FreeTier"}]},` +
			`{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"43s"}]}}]`,
			Reset{RetryAfter: 43 * time.Second, HasRetryAfter: true, ResetAt: now.Add(43 * time.Second), Window: WindowDaily}},
		{"gemini body re-nested in a client's message", `{"error":{"message":"{\"error\":{\"details\":[{\"retryDelay\":\"12s\"}]}}"}}`,
			Reset{RetryAfter: 12 * time.Second, HasRetryAfter: true, ResetAt: now.Add(12 * time.Second)}},
		{"openrouter rate-limit fields in the body", `{"error":{"message":"Rate limit exceeded: free-models-per-day","code":429,"metadata":{"headers":` +
			`{"X-RateLimit-Limit":"50","X-RateLimit-Remaining":"0","X-RateLimit-Reset":"` + strconv.FormatInt(now.Add(3*time.Hour).UnixMilli(), 10) + `"}}}}`,
			Reset{ResetAt: now.Add(3 * time.Hour), Window: WindowDaily, Utilization: 1, HasUtilization: true}},
		{"usage stated in prose", `on tokens per day (TPD): Limit 100000, Used 97050, Requested 3619. Please try again in 1m0s.`,
			Reset{RetryAfter: time.Minute, HasRetryAfter: true, ResetAt: now.Add(time.Minute), Window: WindowDaily, Utilization: 0.9705, HasUtilization: true}},
		{"anthropic reset date in prose", `{"type":"error","error":{"type":"invalid_request_error","message":"You have reached your specified API usage limits. You will regain access on 2025-04-01 at 00:00 UTC."}}`,
			Reset{ResetAt: time.Date(2025, 4, 1, 0, 0, 0, 0, time.UTC), Window: WindowMonthly}},
		{"a reset date in the past lifts now", `You will regain access on 2025-03-01 at 00:00 UTC.`,
			Reset{ResetAt: now}},
		{"not json", `<html><body>Too Many Requests</body></html>`, Reset{}},
		{"broken json", `{"error": {"message": "try again in 3s"`, Reset{RetryAfter: 3 * time.Second, HasRetryAfter: true, ResetAt: now.Add(3 * time.Second)}},
		{"milliseconds in prose", `Please try again in 644ms.`,
			Reset{RetryAfter: 644 * time.Millisecond, HasRetryAfter: true, ResetAt: now.Add(644 * time.Millisecond)}},
		{"milliseconds as a word", `retry after 250 milliseconds`,
			Reset{RetryAfter: 250 * time.Millisecond, HasRetryAfter: true, ResetAt: now.Add(250 * time.Millisecond)}},
		{"several units in prose", `Try again in 4 days 20 hours 9 minutes.`,
			Reset{RetryAfter: 116*time.Hour + 9*time.Minute, HasRetryAfter: true, ResetAt: now.Add(116*time.Hour + 9*time.Minute)}},
		{"several units joined by and", `try again in 1 hour and 30 minutes`,
			Reset{RetryAfter: 90 * time.Minute, HasRetryAfter: true, ResetAt: now.Add(90 * time.Minute)}},
		{"please wait n seconds", `Rate limit of 40000 per 60s exceeded. Please wait 60 seconds before retrying.`,
			Reset{RetryAfter: time.Minute, HasRetryAfter: true, ResetAt: now.Add(time.Minute)}},
		{"please wait without a number", `Please wait a few minutes before you try again.`, Reset{}},
		{"a reset after n is a horizon, not a sleep", `Your quota will reset after 54s.`, Reset{ResetAt: now.Add(54 * time.Second)}},
		{"a text that starts with a number is text", `4006: you have used up your daily free allocation of 10,000 neurons`,
			Reset{Window: WindowDaily}},
		{"a router's cooldown is a horizon without a window", `{"error":{"code":"model_cooldown","message":"All credentials for model m are cooling down","reset_seconds":600}}`,
			Reset{ResetAt: now.Add(10 * time.Minute)}},
		{"per minute and per day in prose with a short wait: the minute's", `You exceeded 10 requests per minute and 100 requests per day. Please try again in 2s.`,
			Reset{RetryAfter: 2 * time.Second, HasRetryAfter: true, ResetAt: now.Add(2 * time.Second)}},
		{"per day alone with a short wait stays daily", `on requests per day (RPD): Limit 200, Used 200. Please try again in 2s.`,
			Reset{RetryAfter: 2 * time.Second, HasRetryAfter: true, ResetAt: now.Add(2 * time.Second), Window: WindowDaily, Utilization: 1, HasUtilization: true}},
		{"per minute and per day with a long wait stays daily", `10 requests per minute and 100 requests per day. Please try again in 3h.`,
			Reset{RetryAfter: 3 * time.Hour, HasRetryAfter: true, ResetAt: now.Add(3 * time.Hour), Window: WindowDaily}},
		{"gemini's per-day quota id stands beside a per-minute one", `{"error":{"details":[{"violations":[` +
			`{"quotaId":"GenerateRequestsPerDayPerProjectPerModel-FreeTier"},{"quotaId":"GenerateRequestsPerMinutePerProjectPerModel-FreeTier"}]},` +
			`{"retryDelay":"2s"}]}}`,
			Reset{RetryAfter: 2 * time.Second, HasRetryAfter: true, ResetAt: now.Add(2 * time.Second), Window: WindowDaily}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assertReset(t, "ParseUsageLimitBody", tc.want, ParseUsageLimitBody([]byte(tc.body), now))
		})
	}
}

func TestParseUsageLimitBodyReadsOnlyTheStart(t *testing.T) {
	body := strings.Repeat(" ", maxFailureBody) + "Please try again in 5s."
	got := ParseUsageLimitBody([]byte(body), now)
	assert.False(t, got.HasRetryAfter, "ParseUsageLimitBody(64 KiB of spaces, then a delay) = %+v, want nothing", got)
}

func TestReadBodyConditions(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		check      func(bodyEvidence) bool
	}{
		{"limit 0 in gemini's prose", `* Quota exceeded for metric: x, limit: 0, model: gemini-2.0-flash`, func(b bodyEvidence) bool { return b.noAllowance }},
		{"limit 0 at the end", `quota exceeded, limit: 0`, func(b bodyEvidence) bool { return b.noAllowance }},
		{"limit 0 in google's errorinfo", `{"error":{"details":[{"metadata":{"quota_limit_value":"0"}}]}}`, func(b bodyEvidence) bool { return b.noAllowance }},
		{"limit 0 in the grpc form", "metadata {\n  key: \"quota_limit_value\"\n  value: \"0\"\n}", func(b bodyEvidence) bool { return b.noAllowance }},
		{"limit 00 or 0.5 is no limit 0", `limit: 05, limit: 0.5`, func(b bodyEvidence) bool { return !b.noAllowance }},
		{"a limit of 250 is not 0", `{"quota_limit_value":"250"}`, func(b bodyEvidence) bool { return !b.noAllowance }},
		{"extra usage spent is billing", `You're out of extra usage. Add more at claude.ai/settings/usage`, func(b bodyEvidence) bool { return b.billing && b.quota }},
		{"extra usage required is a quota, not billing", `Extra usage is required for long context requests.`, func(b bodyEvidence) bool { return b.quota && !b.billing }},
		{"usage not included", `{"error":{"message":"Usage not included in your plan"}}`, func(b bodyEvidence) bool { return b.quota }},
		{"secondary limit", `You have exceeded a secondary rate limit.`, func(b bodyEvidence) bool { return b.secondary && b.throttled }},
		{"abuse detection", `You have triggered an abuse detection mechanism`, func(b bodyEvidence) bool { return b.secondary && b.throttled }},
		{"request too large", `Request too large for gpt-4o`, func(b bodyEvidence) bool { return b.oversized }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := readBody([]byte(tc.body), now)
			assert.True(t, tc.check(b), "readBody(%q) = %+v", tc.body, b)
		})
	}
}
