package vendorsim

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// anthropic speaks Anthropic's messages API.
//
// Sources for the shapes:
//   - anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-
//     {limit,remaining,reset} with RFC 3339 resets:
//     docs.anthropic.com/en/api/rate-limits, and a recorded answer in
//     tidyllm's tests (tests/testthat/claude/api.anthropic.com/v1/messages-e050b5-POST.R);
//   - the 429 rate_limit_error body and retry-after:
//     docs.anthropic.com/en/api/errors; "Number of request tokens has
//     exceeded your per-minute rate limit" and "This request would exceed
//     your account's rate limit. Please try again later.":
//     github.com/anthropics/claude-code/issues/51757;
//   - 401 authentication_error "invalid x-api-key":
//     github.com/eyaltoledano/claude-task-master/issues/222;
//   - 400 "Your credit balance is too low to access the Anthropic API":
//     github.com/anthropics/claude-code/issues/66314;
//   - 529 overloaded_error "Overloaded": github.com/cline/cline/issues/52;
//   - the subscription headers anthropic-ratelimit-unified-status,
//     -representative-claim (five_hour), -5h-/-7d-utilization (a spent
//     fraction, "0.42", "1.08"), -5h-/-7d-status (rejected), -reset (epoch
//     seconds) and retry-after on a rejection:
//     github.com/anthropics/claude-code/issues/12829,
//     github.com/Yeachan-Heo/gajae-code/pull/2444,
//     github.com/anomalyco/opencode/pull/49499;
//   - usage.cache_creation_input_tokens and cache_read_input_tokens, left
//     out of input_tokens: docs.anthropic.com/en/docs/build-with-claude/prompt-caching;
//   - the stream's events (message_start, content_block_start, ping,
//     content_block_delta, content_block_stop, message_delta with
//     usage.output_tokens, message_stop):
//     docs.anthropic.com/en/api/messages-streaming.
type anthropic struct{}

func anthropicErrorBody(a *reply, typ, msg string) map[string]any {
	return map[string]any{
		"type":       "error",
		"error":      map[string]any{"type": typ, "message": msg},
		"request_id": "req_" + a.id,
	}
}

func (anthropic) route(r *http.Request) (route, int, string) {
	if r.URL.Path != "/v1/messages" {
		return route{}, http.StatusNotFound, "Not Found"
	}
	if r.Method != http.MethodPost {
		return route{}, http.StatusMethodNotAllowed, "Method Not Allowed"
	}
	return route{}, 0, ""
}

func (anthropic) parse(body []byte, _ route) (request, error) {
	var in struct {
		Model     string `json:"model"`
		Stream    bool   `json:"stream"`
		MaxTokens *int64 `json:"max_tokens"`
	}
	if err := decodeBody(body, &in); err != nil {
		return request{}, err
	}
	req := request{model: in.Model, stream: in.Stream, prompt: promptTokens(body)}
	if in.MaxTokens != nil {
		if *in.MaxTokens < 1 {
			return request{}, errors.New("max_tokens: must be greater than or equal to 1")
		}
		req.maxTokens = *in.MaxTokens
	}
	return req, nil
}

// prompt returns the system prompt, when there is one, then the messages.
func (anthropic) prompt(body []byte) ([]json.RawMessage, error) {
	var in struct {
		System   json.RawMessage   `json:"system"`
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, err
	}
	if len(in.System) == 0 || string(in.System) == "null" {
		return in.Messages, nil
	}
	return append([]json.RawMessage{in.System}, in.Messages...), nil
}

// windowsCountCacheReads is false: Anthropic's input-token limits leave
// cache reads out.
func (anthropic) windowsCountCacheReads() bool { return false }

func (anthropic) faultStatus() int     { return 529 }
func (anthropic) defaultModel() string { return "claude-sonnet-4-5" }

// rfc3339Ceil formats t in RFC 3339, to the second, rounded up so that a
// reset is never stated earlier than it is.
func rfc3339Ceil(t time.Time) string {
	if r := t.Truncate(time.Second); r.Before(t) {
		t = r.Add(time.Second)
	}
	return t.UTC().Format(time.RFC3339)
}

func (anthropic) headers(h http.Header, st *state) {
	set := func(name string, a *axis) {
		if a == nil {
			return
		}
		h.Set("Anthropic-Ratelimit-"+name+"-Limit", itoa(a.limit))
		h.Set("Anthropic-Ratelimit-"+name+"-Remaining", itoa(a.remaining))
		h.Set("Anthropic-Ratelimit-"+name+"-Reset", rfc3339Ceil(st.now.Add(a.reset)))
	}
	set("Requests", st.requests)
	set("Tokens", st.tokens)
	set("Input-Tokens", st.input)
	set("Output-Tokens", st.output)
	u := st.unified
	if u == nil {
		return
	}
	util := func(f float64) string { return strconv.FormatFloat(f, 'f', 2, 64) }
	h.Set("Anthropic-Ratelimit-Unified-Status", u.status)
	h.Set("Anthropic-Ratelimit-Unified-Reset", itoa(u.reset.Unix()))
	h.Set("Anthropic-Ratelimit-Unified-Representative-Claim", u.claim)
	h.Set("Anthropic-Ratelimit-Unified-5h-Status", u.five.status)
	h.Set("Anthropic-Ratelimit-Unified-5h-Utilization", util(u.five.utilization))
	h.Set("Anthropic-Ratelimit-Unified-5h-Reset", itoa(u.five.reset.Unix()))
	h.Set("Anthropic-Ratelimit-Unified-7d-Status", u.seven.status)
	h.Set("Anthropic-Ratelimit-Unified-7d-Utilization", util(u.seven.utilization))
	h.Set("Anthropic-Ratelimit-Unified-7d-Reset", itoa(u.seven.reset.Unix()))
}

// usage returns the usage object of an answer; output is its output tokens
// so far. With the prompt cache on, input_tokens counts only the prompt
// tokens neither read from the cache nor written to it, as Anthropic's does.
func (anthropic) usage(a *reply, output int64) map[string]any {
	if !a.cache {
		return map[string]any{"input_tokens": a.req.prompt, "output_tokens": output}
	}
	return map[string]any{
		"input_tokens":                max(0, a.req.prompt-a.cached-a.written),
		"cache_creation_input_tokens": a.written,
		"cache_read_input_tokens":     a.cached,
		"output_tokens":               output,
	}
}

func (an anthropic) serve(w http.ResponseWriter, a *reply) {
	w.Header().Set("Request-Id", "req_"+a.id)
	stop := "end_turn"
	if a.truncated {
		stop = "max_tokens"
	}
	text := replyText(a.completion)
	if !a.req.stream {
		writeJSON(w, http.StatusOK, map[string]any{
			"id":            "msg_" + a.id,
			"type":          "message",
			"role":          "assistant",
			"model":         a.model,
			"content":       []any{map[string]any{"type": "text", "text": text}},
			"stop_reason":   stop,
			"stop_sequence": nil,
			"usage":         an.usage(a, a.completion),
		})
		return
	}
	s := startSSE(w, "\n")
	s.event("message_start", map[string]any{
		"type": "message_start",
		"message": map[string]any{
			"id":            "msg_" + a.id,
			"type":          "message",
			"role":          "assistant",
			"model":         a.model,
			"content":       []any{},
			"stop_reason":   nil,
			"stop_sequence": nil,
			"usage":         an.usage(a, 1),
		},
	})
	s.event("content_block_start", map[string]any{
		"type": "content_block_start", "index": 0,
		"content_block": map[string]any{"type": "text", "text": ""},
	})
	s.event("ping", map[string]any{"type": "ping"})
	for _, piece := range chunkText(text, streamChunks) {
		s.event("content_block_delta", map[string]any{
			"type": "content_block_delta", "index": 0,
			"delta": map[string]any{"type": "text_delta", "text": piece},
		})
	}
	s.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	s.event("message_delta", map[string]any{
		"type":  "message_delta",
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": a.completion},
	})
	s.event("message_stop", map[string]any{"type": "message_stop"})
}

// anthropicAxis names a window the way Anthropic's 429 messages do.
var anthropicAxis = map[string]string{
	"RPM": "requests per minute",
	"RPD": "requests per day",
	"TPM": "per-minute",
	"TPD": "per-day",
}

func (anthropic) rateLimited(w http.ResponseWriter, a *reply, rf refusal) {
	w.Header().Set("Request-Id", "req_"+a.id)
	var msg string
	if rf.tokens() {
		msg = fmt.Sprintf("Number of request tokens has exceeded your %s rate limit "+
			"(https://docs.anthropic.com/en/api/rate-limits); see the response headers for current usage. "+
			"Please reduce the prompt length or the maximum tokens requested, or try again later. "+
			"You may also contact sales at https://www.anthropic.com/contact-sales to discuss your options for a rate limit increase.",
			anthropicAxis[rf.axis])
	} else {
		msg = fmt.Sprintf("This request would exceed your organization's rate limit of %d %s. "+
			"For details, refer to: https://docs.anthropic.com/en/api/rate-limits.",
			rf.limit, anthropicAxis[rf.axis])
	}
	if !rf.tooLarge {
		w.Header().Set("Retry-After", itoa(max(1, ceilSeconds(rf.wait))))
	}
	writeJSON(w, http.StatusTooManyRequests, anthropicErrorBody(a, "rate_limit_error", msg))
}

func (anthropic) usageLimited(w http.ResponseWriter, a *reply, ul usageLimit) {
	w.Header().Set("Request-Id", "req_"+a.id)
	w.Header().Set("Retry-After", itoa(max(1, ceilSeconds(ul.wait))))
	writeJSON(w, http.StatusTooManyRequests, anthropicErrorBody(a, "rate_limit_error",
		"This request would exceed your account's rate limit. Please try again later."))
}

func (anthropic) unauthorized(w http.ResponseWriter, a *reply, why authFailure) {
	w.Header().Set("Request-Id", "req_"+a.id)
	msg := "invalid x-api-key"
	if why == authMissing {
		msg = "x-api-key header is required"
	}
	writeJSON(w, http.StatusUnauthorized, anthropicErrorBody(a, "authentication_error", msg))
}

func (anthropic) noCredit(w http.ResponseWriter, a *reply) {
	w.Header().Set("Request-Id", "req_"+a.id)
	writeJSON(w, http.StatusBadRequest, anthropicErrorBody(a, "invalid_request_error",
		"Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."))
}

func (anthropic) fault(w http.ResponseWriter, a *reply, status int) {
	w.Header().Set("Request-Id", "req_"+a.id)
	if status == 529 {
		writeJSON(w, status, anthropicErrorBody(a, "overloaded_error", "Overloaded"))
		return
	}
	writeJSON(w, status, anthropicErrorBody(a, "api_error", "Internal server error"))
}

func (anthropic) badRequest(w http.ResponseWriter, a *reply, status int, msg string) {
	w.Header().Set("Request-Id", "req_"+a.id)
	typ := "invalid_request_error"
	switch status {
	case http.StatusNotFound:
		typ = "not_found_error"
	case http.StatusRequestEntityTooLarge:
		typ = "request_too_large"
	}
	writeJSON(w, status, anthropicErrorBody(a, typ, msg))
}
