package keypool

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPlanWindowBenchesEveryModel holds plan-wide windows: an answer that
// says a subscription's plan window is spent benches the key for every
// model until the window resets, and not the other keys; a window of one
// model (Gemini's per-day quota, the overage-included weekly window, the
// weekly window of one model family) benches that model alone.
func TestPlanWindowBenchesEveryModel(t *testing.T) {
	unified := func(window, claim string) func(reset time.Time) answer {
		return func(reset time.Time) answer {
			return answer{status: http.StatusTooManyRequests, header: map[string]string{
				"Anthropic-Ratelimit-Unified-Status":                     "rejected",
				"Anthropic-Ratelimit-Unified-" + window + "-Status":      "rejected",
				"Anthropic-Ratelimit-Unified-" + window + "-Utilization": "1.0",
				"Anthropic-Ratelimit-Unified-" + window + "-Reset":       strconv.FormatInt(reset.Unix(), 10),
				"Anthropic-Ratelimit-Unified-Reset":                      strconv.FormatInt(reset.Unix(), 10),
				"Anthropic-Ratelimit-Unified-Representative-Claim":       claim,
			}, body: `{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed your account's rate limit."}}`}
		}
	}
	codex := func(reset time.Time) answer {
		return answer{status: http.StatusTooManyRequests, header: map[string]string{
			"X-Codex-Primary-Used-Percent":   "100",
			"X-Codex-Primary-Window-Minutes": "300",
			"X-Codex-Primary-Reset-At":       strconv.FormatInt(reset.Unix(), 10),
		}, body: `{"error":{"type":"usage_limit_reached","message":"The usage limit has been reached"}}`}
	}
	prose := func(reset time.Time) answer {
		return answer{status: http.StatusTooManyRequests,
			// Zhipu states its reset in China time.
			body: `{"error":{"code":"1308","message":"Usage limit reached for 5 hour. Your limit will reset at ` + reset.In(chinaTime).Format("2006-01-02 15:04:05") + `"}}`}
	}
	gemini := func(time.Time) answer {
		return answer{status: http.StatusTooManyRequests, body: `{"error":{"code":429,"status":"RESOURCE_EXHAUSTED","message":"Quota exceeded",` +
			`"details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaId":"GenerateRequestsPerDayPerProjectPerModel-FreeTier"}]}]}}`}
	}
	cases := []struct {
		name   string
		answer func(reset time.Time) answer
		plan   bool
	}{
		{"anthropic 5-hour", unified("5h", "five_hour"), true},
		{"anthropic 7-day", unified("7d", "seven_day"), true},
		{"anthropic 7-day overage included", unified("7d_oi", "seven_day_overage_included"), false},
		{"chatgpt backend primary slot", codex, true},
		{"5-hour window in prose", prose, true},
		{"gemini per-day per model", gemini, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			reset := f.clock.Now().Add(2 * time.Hour)
			f.vendor.on("sk-a", tc.answer(reset))
			send := func(model string) string {
				t.Helper()
				before := len(f.vendor.received())
				resp, err := f.client.Post(f.url, "application/json", strings.NewReader(`{"model":"`+model+`"}`))
				require.NoError(t, err)
				_ = resp.Body.Close()
				require.Equal(t, http.StatusOK, resp.StatusCode)
				return f.vendor.received()[len(f.vendor.received())-1].key + strconv.Itoa(len(f.vendor.received())-before)
			}
			assert.Equal(t, "sk-b2", send("model-a"), "a's answer fails over to b")
			require.Len(t, f.ev.all(), 1)
			assert.Equal(t, tc.plan, f.ev.all()[0].Model == "", "benched for every model: %+v", f.ev.all()[0])

			var toA int
			for range 6 {
				if strings.HasPrefix(send("model-b"), "sk-a") {
					toA++
				}
			}
			if tc.plan {
				assert.Zero(t, toA, "model B went to the key whose plan window is spent")
			} else {
				assert.Equal(t, 2, toA, "model B kept off a key whose window counts one model")
			}

			f.clock.Advance(2*time.Hour + time.Second)
			var back bool
			for range 3 {
				back = back || strings.HasPrefix(send("model-b"), "sk-a")
			}
			assert.True(t, back, "the key serves model B again once the window reset")
		})
	}
}
