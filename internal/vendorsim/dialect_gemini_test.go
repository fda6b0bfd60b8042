package vendorsim_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool/internal/vendorsim"
)

// geminiResponse is a GenerateContentResponse, as Google's SDKs decode it.
type geminiResponse struct {
	Candidates []struct {
		Content struct {
			Parts []struct {
				Text string `json:"text"`
			} `json:"parts"`
			Role string `json:"role"`
		} `json:"content"`
		FinishReason string `json:"finishReason"`
		Index        int    `json:"index"`
	} `json:"candidates"`
	UsageMetadata *struct {
		PromptTokenCount     int64 `json:"promptTokenCount"`
		CandidatesTokenCount int64 `json:"candidatesTokenCount"`
		TotalTokenCount      int64 `json:"totalTokenCount"`
	} `json:"usageMetadata"`
	ModelVersion string `json:"modelVersion"`
}

// geminiError is a google.rpc.Status error body.
type geminiError struct {
	Error struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Status  string `json:"status"`
		Details []struct {
			Type       string `json:"@type"`
			Reason     string `json:"reason"`
			RetryDelay string `json:"retryDelay"`
			Violations []struct {
				QuotaMetric     string            `json:"quotaMetric"`
				QuotaID         string            `json:"quotaId"`
				QuotaDimensions map[string]string `json:"quotaDimensions"`
				QuotaValue      string            `json:"quotaValue"`
			} `json:"violations"`
		} `json:"details"`
	} `json:"error"`
}

const contentsBody = `{"contents":[{"role":"user","parts":[{"text":"Explain how AI works"}]}]}`

func generate(t *testing.T, s *vendorsim.Server, model, key, body string) answer {
	t.Helper()
	return send(t, http.MethodPost, s.URL()+"/v1beta/models/"+model+":generateContent", body, googKey(key))
}

// noRateLimitHeaders checks that an answer carries none: Gemini sends none.
func noRateLimitHeaders(t *testing.T, h http.Header) {
	t.Helper()
	for name := range h {
		n := strings.ToLower(name)
		assert.False(t, strings.Contains(n, "ratelimit") || strings.HasPrefix(n, "retry-after"), "header %s", name)
	}
}

func TestGeminiAnswer(t *testing.T) {
	s := start(t, vendorsim.Config{Dialect: vendorsim.Gemini, Keys: []vendorsim.Key{{Secret: "k", Limits: vendorsim.Limits{RPM: 10, TPM: 100000}}}})
	a := generate(t, s, "gemini-2.5-flash", "k", contentsBody)
	require.Equal(t, 200, a.status, "body %s", a.body)
	noRateLimitHeaders(t, a.header)
	r := decodeStrict[geminiResponse](t, a.body)
	require.Len(t, r.Candidates, 1)
	assert.Equal(t, "model", r.Candidates[0].Content.Role)
	assert.Equal(t, "STOP", r.Candidates[0].FinishReason)
	assert.Equal(t, "gemini-2.5-flash", r.ModelVersion)
	require.NotNil(t, r.UsageMetadata)
	prompt := int64(len(contentsBody) / 4)
	assert.Equal(t, prompt, r.UsageMetadata.PromptTokenCount)
	assert.Equal(t, int64(100), r.UsageMetadata.CandidatesTokenCount)
	assert.Equal(t, prompt+100, r.UsageMetadata.TotalTokenCount)

	a = send(t, http.MethodPost, s.URL()+"/v1/models/gemini-pro:generateContent?key=k",
		`{"contents":[],"generationConfig":{"maxOutputTokens":12}}`, nil)
	require.Equal(t, 200, a.status, "the v1 path and the key parameter work")
	r = decodeStrict[geminiResponse](t, a.body)
	assert.Equal(t, "MAX_TOKENS", r.Candidates[0].FinishReason)
	assert.Equal(t, int64(12), r.UsageMetadata.CandidatesTokenCount)
}

func TestGeminiQuotaAnswers(t *testing.T) {
	tests := []struct {
		name    string
		limits  vendorsim.Limits
		quotaID string
		value   string
		delay   time.Duration
	}{
		{"per minute", vendorsim.Limits{RPM: 2}, "GenerateRequestsPerMinutePerProjectPerModel-FreeTier", "2", 50 * time.Second},
		{"per day", vendorsim.Limits{RPD: 2}, "GenerateRequestsPerDayPerProjectPerModel-FreeTier", "2", 24*time.Hour - 10*time.Second},
		{"input tokens per minute", vendorsim.Limits{TPM: 250}, "GenerateContentInputTokensPerModelPerMinute-FreeTier", "250", 50 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClock()
			s := start(t, vendorsim.Config{Dialect: vendorsim.Gemini, Clock: c.Now, Keys: []vendorsim.Key{{Secret: "k", Limits: tt.limits}}})
			for range 2 {
				require.Equal(t, 200, generate(t, s, "gemini-2.0-flash", "k", contentsBody).status)
			}
			c.Advance(10 * time.Second)
			a := generate(t, s, "gemini-2.0-flash", "k", contentsBody)
			require.Equal(t, 429, a.status)
			noRateLimitHeaders(t, a.header)
			e := decodeStrict[geminiError](t, a.body)
			assert.Equal(t, 429, e.Error.Code)
			assert.Equal(t, "RESOURCE_EXHAUSTED", e.Error.Status)
			require.Len(t, e.Error.Details, 3)
			qf, help, ri := e.Error.Details[0], e.Error.Details[1], e.Error.Details[2]
			assert.Equal(t, "type.googleapis.com/google.rpc.QuotaFailure", qf.Type)
			assert.Equal(t, "type.googleapis.com/google.rpc.Help", help.Type)
			assert.Equal(t, "type.googleapis.com/google.rpc.RetryInfo", ri.Type)
			require.Len(t, qf.Violations, 1)
			v := qf.Violations[0]
			assert.Equal(t, tt.quotaID, v.QuotaID)
			assert.True(t, strings.HasPrefix(v.QuotaMetric, "generativelanguage.googleapis.com/generate_content_free_tier_"))
			assert.Equal(t, map[string]string{"location": "global", "model": "gemini-2.0-flash"}, v.QuotaDimensions)
			assert.Equal(t, tt.value, v.QuotaValue)
			delay, err := time.ParseDuration(ri.RetryDelay)
			require.NoError(t, err, "retryDelay %q", ri.RetryDelay)
			assert.Equal(t, tt.delay, delay)
		})
	}
}

func TestGeminiErrorBodies(t *testing.T) {
	s := start(t, vendorsim.Config{Dialect: vendorsim.Gemini, Keys: []vendorsim.Key{
		{Secret: "revoked", Revoked: true},
		{Secret: "broke", NoCredit: true},
		{Secret: "busy", FaultBurst: 1},
		{Secret: "weekly", WeeklySpent: 2 * 24 * time.Hour},
	}})
	tests := []struct {
		key    string
		status int
		state  string
		msg    string
	}{
		{"revoked", 400, "INVALID_ARGUMENT", "API key not valid"},
		{"unknown", 401, "UNAUTHENTICATED", "API key not valid"},
		{"broke", 429, "RESOURCE_EXHAUSTED", "prepayment credits are depleted"},
		{"busy", 503, "UNAVAILABLE", "overloaded"},
		{"weekly", 429, "RESOURCE_EXHAUSTED", "exceeded your current quota"},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			a := generate(t, s, "gemini-2.0-flash", tt.key, contentsBody)
			require.Equal(t, tt.status, a.status)
			e := decodeStrict[geminiError](t, a.body)
			assert.Equal(t, tt.status, e.Error.Code)
			assert.Equal(t, tt.state, e.Error.Status)
			assert.Contains(t, e.Error.Message, tt.msg)
			switch tt.key {
			case "revoked":
				require.NotEmpty(t, e.Error.Details)
				assert.Equal(t, "type.googleapis.com/google.rpc.ErrorInfo", e.Error.Details[0].Type)
				assert.Equal(t, "API_KEY_INVALID", e.Error.Details[0].Reason)
			case "weekly":
				require.Len(t, e.Error.Details, 3)
				assert.Equal(t, "GenerateRequestsPerDayPerProjectPerModel-FreeTier", e.Error.Details[0].Violations[0].QuotaID)
				assert.Equal(t, "172800s", e.Error.Details[2].RetryDelay)
			}
		})
	}
}

func TestGeminiStreams(t *testing.T) {
	s := start(t, vendorsim.Config{Dialect: vendorsim.Gemini, OutputTokens: 30, Keys: []vendorsim.Key{{Secret: "k"}}})
	url := s.URL() + "/v1beta/models/gemini-2.0-flash:streamGenerateContent"
	prompt := int64(len(contentsBody) / 4)
	check := func(t *testing.T, chunks []geminiResponse) {
		t.Helper()
		require.GreaterOrEqual(t, len(chunks), 2)
		var text strings.Builder
		last := int64(0)
		for i, c := range chunks {
			require.Len(t, c.Candidates, 1)
			require.NotNil(t, c.UsageMetadata, "every chunk carries usageMetadata")
			assert.Equal(t, prompt, c.UsageMetadata.PromptTokenCount)
			assert.GreaterOrEqual(t, c.UsageMetadata.CandidatesTokenCount, last, "counts only grow")
			last = c.UsageMetadata.CandidatesTokenCount
			text.WriteString(c.Candidates[0].Content.Parts[0].Text)
			if i == len(chunks)-1 {
				assert.Equal(t, "STOP", c.Candidates[0].FinishReason)
			} else {
				assert.Empty(t, c.Candidates[0].FinishReason)
			}
		}
		assert.Equal(t, int64(30), last)
		assert.Len(t, text.String(), 30*4-1)
	}

	t.Run("sse", func(t *testing.T) {
		a := send(t, http.MethodPost, url+"?alt=sse", contentsBody, googKey("k"))
		require.Equal(t, 200, a.status, "body %s", a.body)
		assert.Equal(t, "text/event-stream", a.header.Get("Content-Type"))
		assert.NotContains(t, strings.ReplaceAll(string(a.body), "\r\n", ""), "\n", "every line ends in CRLF")
		var chunks []geminiResponse
		for _, ev := range parseSSE(t, a.body) {
			assert.Empty(t, ev.name)
			chunks = append(chunks, decodeStrict[geminiResponse](t, []byte(ev.data)))
		}
		check(t, chunks)
	})
	t.Run("json array", func(t *testing.T) {
		a := send(t, http.MethodPost, url, contentsBody, googKey("k"))
		require.Equal(t, 200, a.status, "body %s", a.body)
		assert.Equal(t, "application/json", a.header.Get("Content-Type"))
		var chunks []geminiResponse
		require.NoError(t, json.Unmarshal(a.body, &chunks))
		check(t, chunks)
	})
}
