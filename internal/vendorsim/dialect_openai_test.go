package vendorsim_test

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool/internal/vendorsim"
)

// openAIErrorBody is OpenAI's error body, as its SDKs decode it.
type openAIErrorBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

// openAICompletion is a chat completion, as OpenAI's SDKs decode it.
type openAICompletion struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index   int `json:"index"`
		Message struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		Delta struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
		TotalTokens      int64 `json:"total_tokens"`
	} `json:"usage"`
}

func decodeStrict[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal(b, &v), "body %s", b)
	return v
}

func TestOpenAIAnswerAndHeaders(t *testing.T) {
	c := newClock()
	s := start(t, vendorsim.Config{Clock: c.Now, OutputTokens: 40, Keys: []vendorsim.Key{
		{Secret: "k", Limits: vendorsim.Limits{RPM: 3, TPM: 1000}},
	}})
	body := `{"model":"gpt-4.1","max_tokens":25,"messages":[{"role":"user","content":"count to three"}]}`
	a := chat(t, s, "k", body)
	require.Equal(t, 200, a.status, "body %s", a.body)
	assert.Equal(t, "application/json", a.header.Get("Content-Type"))
	assert.NotEmpty(t, a.header.Get("X-Request-Id"))

	cc := decodeStrict[openAICompletion](t, a.body)
	prompt := int64(len(body) / 4)
	assert.Equal(t, "chat.completion", cc.Object)
	assert.Equal(t, "gpt-4.1", cc.Model)
	assert.Equal(t, t0.Unix(), cc.Created)
	require.Len(t, cc.Choices, 1)
	assert.Equal(t, "assistant", cc.Choices[0].Message.Role)
	assert.Equal(t, "length", *cc.Choices[0].FinishReason, "max_tokens 25 cuts the 40-token answer")
	assert.Len(t, cc.Choices[0].Message.Content, 25*4-1)
	require.NotNil(t, cc.Usage)
	assert.Equal(t, prompt, cc.Usage.PromptTokens)
	assert.Equal(t, int64(25), cc.Usage.CompletionTokens)
	assert.Equal(t, prompt+25, cc.Usage.TotalTokens)

	// Headers as OpenAI sends them: counts, and resets in Go's duration syntax.
	h := a.header
	assert.Equal(t, "3", h.Get("x-ratelimit-limit-requests"))
	assert.Equal(t, "2", h.Get("x-ratelimit-remaining-requests"))
	assert.Equal(t, "1m0s", h.Get("x-ratelimit-reset-requests"))
	assert.Equal(t, "1000", h.Get("x-ratelimit-limit-tokens"))
	assert.Equal(t, strconv.FormatInt(1000-prompt-25, 10), h.Get("x-ratelimit-remaining-tokens"))
	assert.Equal(t, "1m0s", h.Get("x-ratelimit-reset-tokens"))

	c.Advance(500 * time.Millisecond)
	a = chat(t, s, "k", body)
	reset, err := time.ParseDuration(a.header.Get("x-ratelimit-reset-requests"))
	require.NoError(t, err)
	assert.Equal(t, time.Minute, reset, "a full minute after the newest request")
	c.Advance(500 * time.Millisecond)
	require.Equal(t, 200, chat(t, s, "k", body).status)
	c.Advance(1440 * time.Millisecond)
	a = chat(t, s, "k", body)
	require.Equal(t, 429, a.status)
	assert.Equal(t, "0", a.header.Get("x-ratelimit-remaining-requests"))
	assert.Equal(t, "58.56s", a.header.Get("x-ratelimit-reset-requests"), "fractional resets keep OpenAI's form")
	c.Advance(2 * time.Minute)
	a = chat(t, s, "k", body)
	assert.Equal(t, "2", a.header.Get("x-ratelimit-remaining-requests"), "the window slid past all three")
}

var tryAgainIn = regexp.MustCompile(`Please try again in ([0-9a-zµ.]+)\.`)

func TestOpenAIRateLimitAnswers(t *testing.T) {
	tests := []struct {
		name     string
		limits   vendorsim.Limits
		before   int           // requests accepted first, one a second (chatBody: 17+100 tokens)
		typ      string        // error.type
		axis     string        // as the message names it
		wait     time.Duration // the retry the answer asks for
		limitHdr string        // x-ratelimit-limit-requests on the 429
	}{
		{"per minute", vendorsim.Limits{RPM: 3}, 3, "requests", "requests per min (RPM): Limit 3, Used 3, Requested 1", 57 * time.Second, "3"},
		{"per day", vendorsim.Limits{RPM: 100, RPD: 2}, 2, "requests", "requests per day (RPD): Limit 2, Used 2, Requested 1", 24*time.Hour - 2*time.Second, "2"},
		{"tokens per minute", vendorsim.Limits{TPM: 300}, 2, "tokens", "tokens per min (TPM): Limit 300, Used 234, Requested 117", 58 * time.Second, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClock()
			s := start(t, vendorsim.Config{Clock: c.Now, Keys: []vendorsim.Key{{Secret: "k", Limits: tt.limits}}})
			for range tt.before {
				require.Equal(t, 200, chat(t, s, "k", chatBody).status)
				c.Advance(time.Second)
			}
			a := chat(t, s, "k", chatBody)
			require.Equal(t, 429, a.status)
			e := decodeStrict[openAIErrorBody](t, a.body)
			assert.Equal(t, tt.typ, e.Error.Type)
			require.NotNil(t, e.Error.Code)
			assert.Equal(t, "rate_limit_exceeded", *e.Error.Code)
			assert.Nil(t, e.Error.Param)
			assert.Contains(t, e.Error.Message, "Rate limit reached for gpt-4o-mini in organization")
			assert.Contains(t, e.Error.Message, tt.axis)

			m := tryAgainIn.FindStringSubmatch(e.Error.Message)
			require.NotNil(t, m, "message %q", e.Error.Message)
			wait, err := time.ParseDuration(m[1])
			require.NoError(t, err)
			assert.Equal(t, tt.wait, wait)
			assert.Equal(t, strconv.FormatInt(int64(tt.wait/time.Second), 10), a.header.Get("Retry-After"))
			assert.Equal(t, strconv.FormatInt(tt.wait.Milliseconds(), 10), a.header.Get("Retry-After-Ms"))
			assert.Equal(t, tt.limitHdr, a.header.Get("x-ratelimit-limit-requests"), "the binding request window")
			if tt.limitHdr != "" {
				assert.Equal(t, "0", a.header.Get("x-ratelimit-remaining-requests"))
			}
		})
	}
}

func TestOpenAIRequestTooLarge(t *testing.T) {
	s := start(t, vendorsim.Config{Keys: []vendorsim.Key{{Secret: "k", Limits: vendorsim.Limits{TPM: 50}}}})
	a := chat(t, s, "k", chatBody) // 17 prompt tokens + 100 completion
	require.Equal(t, 429, a.status)
	e := decodeStrict[openAIErrorBody](t, a.body)
	assert.Equal(t, "tokens", e.Error.Type)
	assert.Contains(t, e.Error.Message, "Request too large for gpt-4o-mini")
	assert.Empty(t, a.header.Get("Retry-After"), "waiting never helps")
}

func TestOpenAIErrorBodies(t *testing.T) {
	s := start(t, vendorsim.Config{Keys: []vendorsim.Key{
		{Secret: "revoked", Revoked: true},
		{Secret: "broke", NoCredit: true},
		{Secret: "faulty", FaultBurst: 1},
	}})
	tests := []struct {
		key    string
		status int
		typ    string
		code   string
	}{
		{"revoked", 401, "invalid_request_error", "invalid_api_key"},
		{"unknown", 401, "invalid_request_error", "invalid_api_key"},
		{"broke", 429, "insufficient_quota", "insufficient_quota"},
		{"faulty", 500, "server_error", ""},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			a := chat(t, s, tt.key, chatBody)
			require.Equal(t, tt.status, a.status)
			e := decodeStrict[openAIErrorBody](t, a.body)
			assert.Equal(t, tt.typ, e.Error.Type)
			if tt.code == "" {
				assert.Nil(t, e.Error.Code)
			} else {
				require.NotNil(t, e.Error.Code)
				assert.Equal(t, tt.code, *e.Error.Code)
			}
			assert.NotEmpty(t, e.Error.Message)
		})
	}
}

func TestOpenAIUsageLimitBody(t *testing.T) {
	c := newClock()
	s := start(t, vendorsim.Config{Clock: c.Now, Keys: []vendorsim.Key{{Secret: "k", WeeklySpent: 4 * 24 * time.Hour}}})
	a := chat(t, s, "k", chatBody)
	require.Equal(t, 429, a.status)
	var body struct {
		Error struct {
			Type            string `json:"type"`
			Message         string `json:"message"`
			PlanType        string `json:"plan_type"`
			ResetsAt        int64  `json:"resets_at"`
			ResetsInSeconds int64  `json:"resets_in_seconds"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal(a.body, &body))
	assert.Equal(t, "usage_limit_reached", body.Error.Type)
	assert.Equal(t, int64(4*24*3600), body.Error.ResetsInSeconds)
	assert.Equal(t, t0.Add(4*24*time.Hour).Unix(), body.Error.ResetsAt)
	assert.NotEmpty(t, body.Error.PlanType)
}

func TestOpenAICompatibleBilling(t *testing.T) {
	s := start(t, vendorsim.Config{Dialect: vendorsim.OpenAICompatible, Keys: []vendorsim.Key{{Secret: "k", NoCredit: true}}})
	a := chat(t, s, "k", chatBody)
	require.Equal(t, 402, a.status)
	assert.Equal(t, "Insufficient Balance", decodeStrict[openAIErrorBody](t, a.body).Error.Message)
}

func TestOpenAIStream(t *testing.T) {
	for _, includeUsage := range []bool{true, false} {
		t.Run(fmt.Sprintf("include_usage=%v", includeUsage), func(t *testing.T) {
			s := start(t, vendorsim.Config{OutputTokens: 30, Keys: []vendorsim.Key{{Secret: "k", Limits: vendorsim.Limits{RPM: 10}}}})
			body := `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`
			if includeUsage {
				body = `{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
			}
			a := send(t, "POST", s.URL()+"/chat/completions", body, bearer("k"))
			require.Equal(t, 200, a.status, "body %s", a.body)
			assert.Equal(t, "text/event-stream", a.header.Get("Content-Type"))
			assert.Equal(t, "9", a.header.Get("x-ratelimit-remaining-requests"), "a stream carries the headers too")

			events := parseSSE(t, a.body)
			require.GreaterOrEqual(t, len(events), 4)
			assert.Equal(t, "[DONE]", events[len(events)-1].data)
			var text strings.Builder
			var finishes []string
			var usage *int64
			for i, ev := range events[:len(events)-1] {
				assert.Empty(t, ev.name, "OpenAI sends data-only events")
				var raw map[string]json.RawMessage
				require.NoError(t, json.Unmarshal([]byte(ev.data), &raw))
				u, hasUsage := raw["usage"]
				assert.Equal(t, includeUsage, hasUsage, "event %d: usage key present only under include_usage", i)
				chunk := decodeStrict[openAICompletion](t, []byte(ev.data))
				assert.Equal(t, "chat.completion.chunk", chunk.Object)
				assert.Equal(t, "gpt-4o", chunk.Model)
				if chunk.Usage != nil {
					require.Empty(t, chunk.Choices, "the usage chunk has no choices")
					require.Equal(t, len(events)-2, i, "the usage chunk comes last before [DONE]")
					assert.Equal(t, int64(30), chunk.Usage.CompletionTokens)
					assert.Equal(t, int64(len(body)/4), chunk.Usage.PromptTokens)
					assert.Equal(t, chunk.Usage.PromptTokens+30, chunk.Usage.TotalTokens)
					usage = &chunk.Usage.TotalTokens
					continue
				}
				if hasUsage {
					assert.Equal(t, "null", string(u))
				}
				require.Len(t, chunk.Choices, 1)
				text.WriteString(chunk.Choices[0].Delta.Content)
				if f := chunk.Choices[0].FinishReason; f != nil {
					finishes = append(finishes, *f)
				}
			}
			assert.Equal(t, []string{"stop"}, finishes)
			assert.Len(t, text.String(), 30*4-1)
			assert.Equal(t, includeUsage, usage != nil)
			st, _ := s.StatsOf("k")
			assert.Equal(t, int64(len(body)/4+30), st.Tokens, "a stream's tokens count in the window and counters")
		})
	}
}
