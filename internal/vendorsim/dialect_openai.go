package vendorsim

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// openAI speaks OpenAI's chat completions API, or an OpenAI-compatible
// vendor's when compatible is set.
//
// Sources for the shapes:
//   - rate-limit headers and their Go-duration resets ("12ms", "6m0s"):
//     platform.openai.com/docs/guides/rate-limits, and the headers quoted in
//     community.openai.com/t/how-to-get-rate-limit-reset-time-for-response-api/1268905;
//   - the 429 rate_limit_exceeded body ("Rate limit reached for gpt-4o-mini
//     in organization ... on requests per min (RPM): Limit 3, Used 3,
//     Requested 1. Please try again in 20s.", type "requests"):
//     github.com/feder-cr/invisible_playwright_mcp/issues/249; type "tokens":
//     github.com/FoundationAgents/MetaGPT/issues/523;
//   - insufficient_quota: github.com/Pythagora-io/gpt-pilot/issues/340;
//   - invalid_api_key: github.com/continuedev/continue/issues/9358;
//   - usage_limit_reached with resets_at and resets_in_seconds (Codex
//     plans): github.com/router-for-me/CLIProxyAPI/issues/1666;
//   - 402 "Insufficient Balance" (DeepSeek):
//     github.com/continuedev/continue/issues/9375;
//   - usage.prompt_tokens_details.cached_tokens, part of prompt_tokens:
//     platform.openai.com/docs/guides/prompt-caching;
//   - the streamed usage chunk (stream_options.include_usage: empty
//     choices, usage, earlier chunks "usage": null, then "data: [DONE]"):
//     OpenAI's OpenAPI spec, ChatCompletionStreamOptions.
type openAI struct {
	compatible bool
}

const openAIDefaultModel = "gpt-4o-mini"

// openAIError is the "error" object of OpenAI's error bodies.
type openAIError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func openAIErrorBody(msg, typ string, code string) map[string]any {
	e := openAIError{Message: msg, Type: typ}
	if code != "" {
		e.Code = &code
	}
	return map[string]any{"error": e}
}

func (openAI) route(r *http.Request) (route, int, string) {
	switch r.URL.Path {
	case "/v1/chat/completions", "/chat/completions":
	default:
		return route{}, http.StatusNotFound, fmt.Sprintf("Invalid URL (%s %s)", r.Method, r.URL.Path)
	}
	if r.Method != http.MethodPost {
		return route{}, http.StatusMethodNotAllowed, fmt.Sprintf("Invalid method for URL (%s %s)", r.Method, r.URL.Path)
	}
	return route{}, 0, ""
}

func (openAI) parse(body []byte, _ route) (request, error) {
	var in struct {
		Model         string `json:"model"`
		Stream        bool   `json:"stream"`
		StreamOptions *struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
		MaxTokens           *int64 `json:"max_tokens"`
		MaxCompletionTokens *int64 `json:"max_completion_tokens"`
	}
	if err := decodeBody(body, &in); err != nil {
		return request{}, err
	}
	req := request{model: in.Model, stream: in.Stream, prompt: promptTokens(body)}
	req.includeUsage = in.Stream && in.StreamOptions != nil && in.StreamOptions.IncludeUsage
	limit := in.MaxTokens
	if in.MaxCompletionTokens != nil {
		limit = in.MaxCompletionTokens
	}
	if limit != nil {
		if *limit < 1 {
			return request{}, errors.New("max_tokens must be at least 1")
		}
		req.maxTokens = *limit
	}
	return req, nil
}

func (openAI) prompt(body []byte) ([]json.RawMessage, error) {
	var in struct {
		Messages []json.RawMessage `json:"messages"`
	}
	err := json.Unmarshal(body, &in)
	return in.Messages, err
}

// windowsCountCacheReads is true: OpenAI's cached tokens count toward TPM.
func (openAI) windowsCountCacheReads() bool { return true }

func (openAI) faultStatus() int     { return http.StatusInternalServerError }
func (openAI) defaultModel() string { return openAIDefaultModel }

// goDuration formats a reset the way OpenAI's x-ratelimit-reset-* headers
// and "Please try again in" messages do: Go's duration syntax, to the
// millisecond.
func goDuration(d time.Duration) string {
	return max(0, d).Round(time.Millisecond).String()
}

func (openAI) headers(h http.Header, st *state) {
	if a := st.requests; a != nil {
		h.Set("X-Ratelimit-Limit-Requests", itoa(a.limit))
		h.Set("X-Ratelimit-Remaining-Requests", itoa(a.remaining))
		h.Set("X-Ratelimit-Reset-Requests", goDuration(a.reset))
	}
	if a := st.tokens; a != nil {
		h.Set("X-Ratelimit-Limit-Tokens", itoa(a.limit))
		h.Set("X-Ratelimit-Remaining-Tokens", itoa(a.remaining))
		h.Set("X-Ratelimit-Reset-Tokens", goDuration(a.reset))
	}
}

type openAIUsage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
	// PromptTokensDetails is set when the prompt cache is on.
	PromptTokensDetails *openAIPromptDetails `json:"prompt_tokens_details,omitempty"`
}

// openAIPromptDetails is usage.prompt_tokens_details: cached_tokens are the
// prompt tokens read from the cache, which prompt_tokens includes.
type openAIPromptDetails struct {
	CachedTokens int64 `json:"cached_tokens"`
}

func (o openAI) serve(w http.ResponseWriter, a *reply) {
	w.Header().Set("X-Request-Id", "req_"+a.id)
	finish := "stop"
	if a.truncated {
		finish = "length"
	}
	usage := openAIUsage{PromptTokens: a.req.prompt, CompletionTokens: a.completion, TotalTokens: a.req.prompt + a.completion}
	if a.cache {
		usage.PromptTokensDetails = &openAIPromptDetails{CachedTokens: a.cached}
	}
	text := replyText(a.completion)
	if !a.req.stream {
		writeJSON(w, http.StatusOK, map[string]any{
			"id":      "chatcmpl-" + a.id,
			"object":  "chat.completion",
			"created": a.now.Unix(),
			"model":   a.model,
			"choices": []any{map[string]any{
				"index":         0,
				"message":       map[string]any{"role": "assistant", "content": text},
				"logprobs":      nil,
				"finish_reason": finish,
			}},
			"usage": usage,
		})
		return
	}
	s := startSSE(w, "\n")
	chunk := func(delta map[string]any, finish any) map[string]any {
		c := map[string]any{
			"id":      "chatcmpl-" + a.id,
			"object":  "chat.completion.chunk",
			"created": a.now.Unix(),
			"model":   a.model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}},
		}
		if a.req.includeUsage {
			c["usage"] = nil
		}
		return c
	}
	s.event("", chunk(map[string]any{"role": "assistant", "content": ""}, nil))
	for _, piece := range chunkText(text, streamChunks) {
		s.event("", chunk(map[string]any{"content": piece}, nil))
	}
	s.event("", chunk(map[string]any{}, finish))
	if a.req.includeUsage {
		s.event("", map[string]any{
			"id":      "chatcmpl-" + a.id,
			"object":  "chat.completion.chunk",
			"created": a.now.Unix(),
			"model":   a.model,
			"choices": []any{},
			"usage":   usage,
		})
	}
	s.event("", "[DONE]")
}

// openAIAxis names a window the way OpenAI's 429 messages do.
var openAIAxis = map[string]string{
	"RPM": "requests per min (RPM)",
	"RPD": "requests per day (RPD)",
	"TPM": "tokens per min (TPM)",
	"TPD": "tokens per day (TPD)",
}

func (openAI) rateLimited(w http.ResponseWriter, a *reply, rf refusal) {
	w.Header().Set("X-Request-Id", "req_"+a.id)
	typ := "requests"
	if rf.tokens() {
		typ = "tokens"
	}
	org := "org-sim"
	if a.account != "" {
		org = a.account
	}
	var msg string
	if rf.tooLarge {
		msg = fmt.Sprintf("Request too large for %s in organization %s on %s: Limit %d, Requested %d. "+
			"The input or output tokens must be reduced in order to run successfully. "+
			"Visit https://platform.openai.com/account/rate-limits to learn more.",
			a.model, org, openAIAxis[rf.axis], rf.limit, rf.requested)
	} else {
		msg = fmt.Sprintf("Rate limit reached for %s in organization %s on %s: Limit %d, Used %d, Requested %d. "+
			"Please try again in %s. Visit https://platform.openai.com/account/rate-limits to learn more.",
			a.model, org, openAIAxis[rf.axis], rf.limit, rf.used, rf.requested, goDuration(rf.wait))
		w.Header().Set("Retry-After", itoa(max(1, ceilSeconds(rf.wait))))
		w.Header().Set("Retry-After-Ms", itoa(max(1, rf.wait.Milliseconds())))
	}
	writeJSON(w, http.StatusTooManyRequests, openAIErrorBody(msg, typ, "rate_limit_exceeded"))
}

func (openAI) usageLimited(w http.ResponseWriter, a *reply, ul usageLimit) {
	w.Header().Set("X-Request-Id", "req_"+a.id)
	writeJSON(w, http.StatusTooManyRequests, map[string]any{"error": map[string]any{
		"type":              "usage_limit_reached",
		"message":           "The usage limit has been reached",
		"plan_type":         "plus",
		"resets_at":         ul.resetAt.Unix(),
		"resets_in_seconds": ceilSeconds(ul.wait),
	}})
}

func (openAI) unauthorized(w http.ResponseWriter, a *reply, why authFailure) {
	w.Header().Set("X-Request-Id", "req_"+a.id)
	if why == authMissing {
		writeJSON(w, http.StatusUnauthorized, openAIErrorBody(
			"You didn't provide an API key. You need to provide your API key in an Authorization header "+
				"using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
			"invalid_request_error", ""))
		return
	}
	// OpenAI echoes a masked key here; the sim leaves it out.
	writeJSON(w, http.StatusUnauthorized, openAIErrorBody(
		"Incorrect API key provided. You can find your API key at https://platform.openai.com/account/api-keys.",
		"invalid_request_error", "invalid_api_key"))
}

func (o openAI) noCredit(w http.ResponseWriter, a *reply) {
	w.Header().Set("X-Request-Id", "req_"+a.id)
	if o.compatible {
		writeJSON(w, http.StatusPaymentRequired, openAIErrorBody(
			"Insufficient Balance", "unknown_error", "invalid_request_error"))
		return
	}
	writeJSON(w, http.StatusTooManyRequests, openAIErrorBody(
		"You exceeded your current quota, please check your plan and billing details. "+
			"For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.",
		"insufficient_quota", "insufficient_quota"))
}

func (openAI) fault(w http.ResponseWriter, a *reply, status int) {
	w.Header().Set("X-Request-Id", "req_"+a.id)
	msg := "The server had an error while processing your request. Sorry about that!"
	if status == http.StatusServiceUnavailable || status == 529 {
		msg = "The engine is currently overloaded, please try again later."
	}
	writeJSON(w, status, openAIErrorBody(msg, "server_error", ""))
}

func (openAI) badRequest(w http.ResponseWriter, a *reply, status int, msg string) {
	w.Header().Set("X-Request-Id", "req_"+a.id)
	writeJSON(w, status, openAIErrorBody(msg, "invalid_request_error", ""))
}
