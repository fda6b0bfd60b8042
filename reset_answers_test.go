package keypool

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recordedAnswer is one recorded vendor answer in testdata/answers, with the reading
// it must give (see testdata/answers/README.md).
type recordedAnswer struct {
	Vendor  string              `json:"vendor"`
	Source  string              `json:"source"`
	Note    string              `json:"note"`
	Now     time.Time           `json:"now"`
	Status  int                 `json:"status"`
	Headers map[string][]string `json:"headers"`
	Body    string              `json:"body"`
	Want    struct {
		Kind        string     `json:"kind"`
		RetryAfter  string     `json:"retry_after"`
		ResetAt     *time.Time `json:"reset_at"`
		Window      Window     `json:"window"`
		Utilization *float64   `json:"utilization"`
		Billing     bool       `json:"billing"`
		Oversized   bool       `json:"oversized"`
		Quoted      bool       `json:"quoted"`
	} `json:"want"`
}

// header returns the answer's headers with canonical keys, as net/http
// would give them.
func (a *recordedAnswer) header() http.Header {
	h := make(http.Header, len(a.Headers))
	for k, vs := range a.Headers {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	return h
}

// loadRecordedAnswers reads every recorded answer, keyed by file name.
func loadRecordedAnswers(tb testing.TB) map[string]*recordedAnswer {
	tb.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "answers", "*.json"))
	require.NoError(tb, err)
	answers := make(map[string]*recordedAnswer, len(files))
	for _, f := range files {
		data, err := os.ReadFile(f)
		require.NoError(tb, err)
		a := new(recordedAnswer)
		require.NoError(tb, json.Unmarshal(data, a), f)
		answers[filepath.Base(f)] = a
	}
	return answers
}

func TestRecordedAnswers(t *testing.T) {
	answers := loadRecordedAnswers(t)
	vendors := map[string]bool{}
	for name, a := range answers {
		vendors[a.Vendor] = true
		t.Run(name, func(t *testing.T) {
			require.NotEmpty(t, a.Source, "every recorded recordedAnswer names its source")
			require.False(t, a.Now.IsZero(), "now")
			v := classify(a.Status, a.header(), []byte(a.Body), a.Now)
			got := v.reset
			call := "Classify(" + name + ")"

			assert.Equal(t, a.Want.Kind, v.kind.String(), "%s kind = %v, want %v", call, v.kind, a.Want.Kind)
			assert.Equal(t, a.Want.Billing, v.billing, "%s billing = %v, want %v", call, v.billing, a.Want.Billing)
			assert.Equal(t, a.Want.Oversized, v.oversized, "%s oversized = %v, want %v", call, v.oversized, a.Want.Oversized)
			assert.Equal(t, a.Want.Quoted, v.quoted, "%s quoted = %v, want %v", call, v.quoted, a.Want.Quoted)
			assert.Equal(t, a.Want.Window, got.Window, "%s Window = %q, want %q", call, got.Window, a.Want.Window)

			if a.Want.RetryAfter == "" {
				assert.False(t, got.HasRetryAfter, "%s RetryAfter = %v, want none", call, got.RetryAfter)
			} else if want, err := time.ParseDuration(a.Want.RetryAfter); assert.NoError(t, err) {
				assert.True(t, got.HasRetryAfter, "%s HasRetryAfter = false, want true", call)
				assert.Equal(t, want, got.RetryAfter, "%s RetryAfter = %v, want %v", call, got.RetryAfter, want)
			}

			if a.Want.ResetAt == nil {
				assert.True(t, got.ResetAt.IsZero(), "%s ResetAt = %v, want none", call, got.ResetAt)
			} else {
				assert.True(t, a.Want.ResetAt.Equal(got.ResetAt), "%s ResetAt = %v, want %v", call, got.ResetAt, *a.Want.ResetAt)
			}

			if a.Want.Utilization == nil {
				assert.False(t, got.HasUtilization, "%s Utilization = %v, want none", call, got.Utilization)
			} else {
				assert.True(t, got.HasUtilization, "%s HasUtilization = false, want true", call)
				assert.InDelta(t, *a.Want.Utilization, got.Utilization, 1e-6, "%s Utilization = %v, want %v", call, got.Utilization, *a.Want.Utilization)
			}
		})
	}
	assert.GreaterOrEqual(t, len(answers), 150, "recorded answers")
	assert.GreaterOrEqual(t, len(vendors), 20, "vendors and routers")
}
