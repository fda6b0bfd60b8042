package vendorsim_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool/internal/vendorsim"
)

// anthropicMessage is a Message, as Anthropic's SDKs decode it.
type anthropicMessage struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	Role    string `json:"role"`
	Model   string `json:"model"`
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	StopReason   *string `json:"stop_reason"`
	StopSequence *string `json:"stop_sequence"`
	Usage        struct {
		InputTokens  int64 `json:"input_tokens"`
		OutputTokens int64 `json:"output_tokens"`
	} `json:"usage"`
}

// anthropicError is Anthropic's error body.
type anthropicError struct {
	Type  string `json:"type"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
	RequestID string `json:"request_id"`
}

const messagesBody = `{"model":"claude-opus-4-1","max_tokens":1024,"messages":[{"role":"user","content":"Hello, Claude"}]}`

func messages(t *testing.T, s *vendorsim.Server, key, body string) answer {
	t.Helper()
	return send(t, http.MethodPost, s.URL()+"/v1/messages", body, xAPIKey(key))
}

func rfc3339(t *testing.T, v string) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339, v)
	require.NoError(t, err, "%q is RFC 3339", v)
	return at
}

func epoch(t *testing.T, v string) time.Time {
	t.Helper()
	n, err := strconv.ParseInt(v, 10, 64)
	require.NoError(t, err, "%q is epoch seconds", v)
	return time.Unix(n, 0).UTC()
}

func TestAnthropicAnswerAndHeaders(t *testing.T) {
	c := newClock()
	s := start(t, vendorsim.Config{Dialect: vendorsim.Anthropic, Clock: c.Now, Keys: []vendorsim.Key{
		{Secret: "k", Limits: vendorsim.Limits{RPM: 5, TPM: 10000}},
	}})
	a := messages(t, s, "k", messagesBody)
	require.Equal(t, 200, a.status, "body %s", a.body)
	m := decodeStrict[anthropicMessage](t, a.body)
	prompt := int64(len(messagesBody) / 4)
	assert.Equal(t, "message", m.Type)
	assert.Equal(t, "assistant", m.Role)
	assert.Equal(t, "claude-opus-4-1", m.Model)
	assert.True(t, strings.HasPrefix(m.ID, "msg_"))
	require.Len(t, m.Content, 1)
	assert.Equal(t, "text", m.Content[0].Type)
	assert.Equal(t, "end_turn", *m.StopReason)
	assert.Nil(t, m.StopSequence)
	assert.Equal(t, prompt, m.Usage.InputTokens)
	assert.Equal(t, int64(100), m.Usage.OutputTokens)
	assert.NotEmpty(t, a.header.Get("request-id"))

	h := a.header
	assert.Equal(t, "5", h.Get("anthropic-ratelimit-requests-limit"))
	assert.Equal(t, "4", h.Get("anthropic-ratelimit-requests-remaining"))
	assert.Equal(t, t0.Add(time.Minute), rfc3339(t, h.Get("anthropic-ratelimit-requests-reset")))
	assert.Equal(t, "10000", h.Get("anthropic-ratelimit-tokens-limit"))
	assert.Equal(t, strconv.FormatInt(10000-prompt-100, 10), h.Get("anthropic-ratelimit-tokens-remaining"))
	assert.Equal(t, strconv.FormatInt(10000-prompt, 10), h.Get("anthropic-ratelimit-input-tokens-remaining"))
	assert.Equal(t, "9900", h.Get("anthropic-ratelimit-output-tokens-remaining"))
	rfc3339(t, h.Get("anthropic-ratelimit-input-tokens-reset"))
	rfc3339(t, h.Get("anthropic-ratelimit-output-tokens-reset"))
	assert.Empty(t, h.Get("anthropic-ratelimit-unified-status"), "an API key is not subscription-style")

	c.Advance(1500 * time.Millisecond)
	a = messages(t, s, "k", `{"model":"claude-haiku-4-5","max_tokens":7,"messages":[]}`)
	m = decodeStrict[anthropicMessage](t, a.body)
	assert.Equal(t, "max_tokens", *m.StopReason)
	assert.Equal(t, int64(7), m.Usage.OutputTokens)
	assert.Equal(t, t0.Add(62*time.Second), rfc3339(t, a.header.Get("anthropic-ratelimit-requests-reset")),
		"a reset is rounded up to the second")
}

func TestAnthropicRateLimitAnswers(t *testing.T) {
	tests := []struct {
		name   string
		limits vendorsim.Limits
		msg    string
	}{
		{"requests", vendorsim.Limits{RPM: 2}, "rate limit of 2 requests per minute"},
		{"tokens", vendorsim.Limits{TPM: 300}, "Number of request tokens has exceeded your per-minute rate limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClock()
			s := start(t, vendorsim.Config{Dialect: vendorsim.Anthropic, Clock: c.Now, Keys: []vendorsim.Key{{Secret: "k", Limits: tt.limits}}})
			for range 2 {
				require.Equal(t, 200, messages(t, s, "k", messagesBody).status)
			}
			c.Advance(10*time.Second + 300*time.Millisecond)
			a := messages(t, s, "k", messagesBody)
			require.Equal(t, 429, a.status)
			e := decodeStrict[anthropicError](t, a.body)
			assert.Equal(t, "error", e.Type)
			assert.Equal(t, "rate_limit_error", e.Error.Type)
			assert.Contains(t, e.Error.Message, tt.msg)
			assert.Equal(t, a.header.Get("request-id"), e.RequestID)
			assert.Equal(t, "50", a.header.Get("retry-after"), "49.7 s, rounded up")
		})
	}
}

func TestAnthropicErrorBodies(t *testing.T) {
	s := start(t, vendorsim.Config{Dialect: vendorsim.Anthropic, Keys: []vendorsim.Key{
		{Secret: "revoked", Revoked: true},
		{Secret: "broke", NoCredit: true},
		{Secret: "overloaded", FaultBurst: 1},
		{Secret: "broken", FaultBurst: 1, FaultStatus: 500},
	}})
	tests := []struct {
		key    string
		status int
		typ    string
		msg    string
	}{
		{"revoked", 401, "authentication_error", "invalid x-api-key"},
		{"unknown", 401, "authentication_error", "invalid x-api-key"},
		{"", 401, "authentication_error", "x-api-key header is required"},
		{"broke", 400, "invalid_request_error", "Your credit balance is too low to access the Anthropic API"},
		{"overloaded", 529, "overloaded_error", "Overloaded"},
		{"broken", 500, "api_error", "Internal server error"},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			var a answer
			if tt.key == "" {
				a = send(t, http.MethodPost, s.URL()+"/v1/messages", messagesBody, nil)
			} else {
				a = messages(t, s, tt.key, messagesBody)
			}
			require.Equal(t, tt.status, a.status)
			e := decodeStrict[anthropicError](t, a.body)
			assert.Equal(t, "error", e.Type)
			assert.Equal(t, tt.typ, e.Error.Type)
			assert.Contains(t, e.Error.Message, tt.msg)
		})
	}
}

func TestAnthropicSubscriptionHeaders(t *testing.T) {
	c := newClock()
	s := start(t, vendorsim.Config{Dialect: vendorsim.Anthropic, Clock: c.Now, Keys: []vendorsim.Key{{
		Secret: "k", Subscription: &vendorsim.Subscription{FiveHour: 4, SevenDay: 40},
	}}})
	wantStatus := []string{"allowed", "allowed", "allowed", "allowed_warning"} // warned from 0.8 on
	wantUtil := []string{"0.25", "0.50", "0.75", "1.00"}
	for i := range 4 {
		a := messages(t, s, "k", messagesBody)
		require.Equal(t, 200, a.status)
		h := a.header
		assert.Equal(t, wantUtil[i], h.Get("anthropic-ratelimit-unified-5h-utilization"), "request %d", i)
		assert.Equal(t, wantStatus[i], h.Get("anthropic-ratelimit-unified-status"), "request %d", i)
		assert.Equal(t, wantStatus[i], h.Get("anthropic-ratelimit-unified-5h-status"), "request %d", i)
		assert.Equal(t, "five_hour", h.Get("anthropic-ratelimit-unified-representative-claim"))
		assert.Equal(t, t0.Add(5*time.Hour), epoch(t, h.Get("anthropic-ratelimit-unified-5h-reset")), "the first request leaves 5 h after it came")
		assert.Equal(t, t0.Add(5*time.Hour), epoch(t, h.Get("anthropic-ratelimit-unified-reset")), "the representative claim's reset")
		assert.Equal(t, t0.Add(7*24*time.Hour), epoch(t, h.Get("anthropic-ratelimit-unified-7d-reset")))
		u7, err := strconv.ParseFloat(h.Get("anthropic-ratelimit-unified-7d-utilization"), 64)
		require.NoError(t, err)
		assert.InDelta(t, float64(i+1)/40, u7, 0.005)
	}
	c.Advance(time.Hour)
	a := messages(t, s, "k", messagesBody)
	require.Equal(t, 429, a.status)
	e := decodeStrict[anthropicError](t, a.body)
	assert.Equal(t, "rate_limit_error", e.Error.Type)
	h := a.header
	assert.Equal(t, "rejected", h.Get("anthropic-ratelimit-unified-status"))
	assert.Equal(t, "rejected", h.Get("anthropic-ratelimit-unified-5h-status"))
	assert.Equal(t, "allowed", h.Get("anthropic-ratelimit-unified-7d-status"))
	assert.Equal(t, "five_hour", h.Get("anthropic-ratelimit-unified-representative-claim"))
	assert.Equal(t, t0.Add(5*time.Hour), epoch(t, h.Get("anthropic-ratelimit-unified-reset")))
	assert.Equal(t, strconv.Itoa(4*3600), h.Get("retry-after"))
}

func TestAnthropicWeeklySpent(t *testing.T) {
	c := newClock()
	s := start(t, vendorsim.Config{Dialect: vendorsim.Anthropic, Clock: c.Now, Keys: []vendorsim.Key{
		{Secret: "k", WeeklySpent: 3 * 24 * time.Hour, Limits: vendorsim.Limits{RPM: 50}},
	}})
	c.Advance(time.Hour)
	a := messages(t, s, "k", messagesBody)
	require.Equal(t, 429, a.status)
	e := decodeStrict[anthropicError](t, a.body)
	assert.Equal(t, "rate_limit_error", e.Error.Type)
	assert.Contains(t, e.Error.Message, "would exceed your account's rate limit")
	h := a.header
	lift := t0.Add(3 * 24 * time.Hour)
	assert.Equal(t, "rejected", h.Get("anthropic-ratelimit-unified-status"))
	assert.Equal(t, "rejected", h.Get("anthropic-ratelimit-unified-7d-status"))
	assert.Equal(t, "allowed", h.Get("anthropic-ratelimit-unified-5h-status"))
	assert.Equal(t, "seven_day", h.Get("anthropic-ratelimit-unified-representative-claim"))
	assert.Equal(t, "1.00", h.Get("anthropic-ratelimit-unified-7d-utilization"))
	assert.Equal(t, lift, epoch(t, h.Get("anthropic-ratelimit-unified-7d-reset")))
	assert.Equal(t, lift, epoch(t, h.Get("anthropic-ratelimit-unified-reset")))
	assert.Equal(t, strconv.Itoa(71*3600), h.Get("retry-after"))
	assert.Equal(t, "50", h.Get("anthropic-ratelimit-requests-limit"), "the per-minute headers ride along")

	// A fault carries the account's window headers too, as Anthropic's 529s
	// do; a client must not read them as a spent window.
	s2 := start(t, vendorsim.Config{Dialect: vendorsim.Anthropic, Keys: []vendorsim.Key{
		{Secret: "f", FaultBurst: 1, Subscription: &vendorsim.Subscription{SevenDay: 10}},
	}})
	a = messages(t, s2, "f", messagesBody)
	require.Equal(t, 529, a.status)
	assert.Equal(t, "allowed", a.header.Get("anthropic-ratelimit-unified-status"))
	assert.NotEmpty(t, a.header.Get("anthropic-ratelimit-unified-7d-reset"))

	c.Advance(71 * time.Hour)
	assert.Equal(t, 200, messages(t, s, "k", messagesBody).status, "the week lifts on the sim's clock")
}

func TestAnthropicStream(t *testing.T) {
	s := start(t, vendorsim.Config{Dialect: vendorsim.Anthropic, OutputTokens: 20, Keys: []vendorsim.Key{{Secret: "k"}}})
	body := `{"model":"claude-sonnet-4-5","max_tokens":1024,"stream":true,"messages":[{"role":"user","content":"Hi"}]}`
	a := messages(t, s, "k", body)
	require.Equal(t, 200, a.status, "body %s", a.body)
	assert.Equal(t, "text/event-stream", a.header.Get("Content-Type"))
	events := parseSSE(t, a.body)
	var names []string
	var text strings.Builder
	for _, ev := range events {
		data := jsonOf(t, ev.data)
		assert.Equal(t, ev.name, data["type"], "the event name repeats the data's type")
		if len(names) == 0 || names[len(names)-1] != ev.name {
			names = append(names, ev.name)
		}
		switch ev.name {
		case "message_start":
			assert.Equal(t, float64(len(body)/4), num(t, data, "message", "usage", "input_tokens"))
			assert.Equal(t, "claude-sonnet-4-5", str(t, data, "message", "model"))
		case "content_block_delta":
			assert.Equal(t, "text_delta", str(t, data, "delta", "type"))
			text.WriteString(str(t, data, "delta", "text"))
		case "message_delta":
			assert.Equal(t, float64(20), num(t, data, "usage", "output_tokens"))
			assert.Equal(t, "end_turn", str(t, data, "delta", "stop_reason"))
		}
	}
	assert.Equal(t, []string{"message_start", "content_block_start", "ping", "content_block_delta",
		"content_block_stop", "message_delta", "message_stop"}, names)
	assert.Len(t, text.String(), 20*4-1)
}
