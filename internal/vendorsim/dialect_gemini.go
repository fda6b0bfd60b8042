package vendorsim

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
)

// gemini speaks Google's Gemini API (generativelanguage.googleapis.com). It
// sends no rate-limit headers: Gemini sends none.
//
// Sources for the shapes:
//   - the 429 RESOURCE_EXHAUSTED body with QuotaFailure violations
//     (quotaMetric, quotaId such as GenerateRequestsPerMinutePerProjectPerModel-FreeTier
//     or GenerateRequestsPerDayPerProjectPerModel-FreeTier or
//     GenerateContentInputTokensPerModelPerMinute-FreeTier, quotaDimensions,
//     quotaValue), a Help link and RetryInfo retryDelay ("26s"):
//     github.com/googleapis/python-genai/issues/2044,
//     github.com/RooCodeInc/Roo-Code/issues/3883 (the per-day token quota id
//     is the sim's extrapolation of the per-minute one);
//   - 400 INVALID_ARGUMENT API_KEY_INVALID with ErrorInfo and
//     LocalizedMessage: github.com/cequence-io/openai-scala-client/issues/109;
//   - 429 "Your prepayment credits are depleted":
//     github.com/dyad-sh/dyad/issues/3626;
//   - the stream: ?alt=sse sends "data:" events ended by CRLF pairs
//     (github.com/Routstr/routstr-core/pull/543,
//     github.com/envoyproxy/ai-gateway/pull/1536), each a
//     GenerateContentResponse carrying usageMetadata; without alt=sse,
//     :streamGenerateContent answers one JSON array of them
//     (github.com/nyo16/nous/pull/26);
//   - usageMetadata {promptTokenCount, candidatesTokenCount,
//     totalTokenCount, cachedContentTokenCount (part of promptTokenCount)}:
//     ai.google.dev/api/generate-content.
//
// Unknown and missing keys answer 401 UNAUTHENTICATED, as the sim's brief
// asks; Gemini itself answers 400 API_KEY_INVALID for an unknown key and 403
// for a missing one.
type gemini struct{}

func geminiErrorBody(code int, status, msg string, details ...any) map[string]any {
	e := map[string]any{"code": code, "message": msg, "status": status}
	if len(details) > 0 {
		e["details"] = details
	}
	return map[string]any{"error": e}
}

func (gemini) route(r *http.Request) (route, int, string) {
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1beta/models/")
	if !ok {
		rest, ok = strings.CutPrefix(r.URL.Path, "/v1/models/")
	}
	model, method, found := strings.Cut(rest, ":")
	if !ok || !found || model == "" || (method != "generateContent" && method != "streamGenerateContent") {
		return route{}, http.StatusNotFound, "The requested URL " + r.URL.Path + " was not found on this server."
	}
	if r.Method != http.MethodPost {
		return route{}, http.StatusMethodNotAllowed, "Method " + r.Method + " is not allowed for " + r.URL.Path + "."
	}
	rt := route{model: model, stream: method == "streamGenerateContent"}
	rt.sse = rt.stream && r.URL.Query().Get("alt") == "sse"
	return rt, 0, ""
}

func (gemini) parse(body []byte, rt route) (request, error) {
	var in struct {
		GenerationConfig *struct {
			MaxOutputTokens *int64 `json:"maxOutputTokens"`
		} `json:"generationConfig"`
	}
	if err := decodeBody(body, &in); err != nil {
		return request{}, err
	}
	req := request{model: rt.model, stream: rt.stream, prompt: promptTokens(body)}
	if g := in.GenerationConfig; g != nil && g.MaxOutputTokens != nil {
		if *g.MaxOutputTokens < 1 {
			return request{}, errors.New("max_output_tokens must be positive")
		}
		req.maxTokens = *g.MaxOutputTokens
	}
	return req, nil
}

// prompt returns the system instruction, when there is one, then the
// contents.
func (gemini) prompt(body []byte) ([]json.RawMessage, error) {
	var in struct {
		SystemInstruction json.RawMessage   `json:"systemInstruction"`
		Contents          []json.RawMessage `json:"contents"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, err
	}
	if len(in.SystemInstruction) == 0 || string(in.SystemInstruction) == "null" {
		return in.Contents, nil
	}
	return append([]json.RawMessage{in.SystemInstruction}, in.Contents...), nil
}

// windowsCountCacheReads is true: promptTokenCount, which includes the
// cached tokens, counts toward Gemini's token quotas.
func (gemini) windowsCountCacheReads() bool { return true }

func (gemini) faultStatus() int     { return http.StatusServiceUnavailable }
func (gemini) defaultModel() string { return "gemini-2.0-flash" }

// headers sets nothing: Gemini sends no rate-limit headers.
func (gemini) headers(http.Header, *state) {}

// chunk is one GenerateContentResponse.
func (gemini) chunk(a *reply, text, finish string, candidates int64) map[string]any {
	cand := map[string]any{
		"content": map[string]any{"parts": []any{map[string]any{"text": text}}, "role": "model"},
		"index":   0,
	}
	if finish != "" {
		cand["finishReason"] = finish
	}
	usage := map[string]any{
		"promptTokenCount":     a.req.prompt,
		"candidatesTokenCount": candidates,
		"totalTokenCount":      a.req.prompt + candidates,
	}
	if a.cache && a.cached > 0 { // Gemini leaves zero counts out
		usage["cachedContentTokenCount"] = a.cached
	}
	return map[string]any{
		"candidates":    []any{cand},
		"usageMetadata": usage,
		"modelVersion":  a.model,
		"responseId":    a.id,
	}
}

func (g gemini) serve(w http.ResponseWriter, a *reply) {
	finish := "STOP"
	if a.truncated {
		finish = "MAX_TOKENS"
	}
	text := replyText(a.completion)
	if !a.req.stream {
		writeJSON(w, http.StatusOK, g.chunk(a, text, finish, a.completion))
		return
	}
	pieces := chunkText(text, streamChunks)
	chunks := make([]any, len(pieces))
	for i, piece := range pieces {
		// Each chunk reports the candidates' tokens so far; the last, all.
		so := a.completion * int64(i+1) / int64(len(pieces))
		f := ""
		if i == len(pieces)-1 {
			f = finish
		}
		chunks[i] = g.chunk(a, piece, f, so)
	}
	if !a.rt.sse {
		var b strings.Builder
		b.WriteString("[")
		for i, c := range chunks {
			if i > 0 {
				b.WriteString(",\r\n")
			}
			data, _ := json.Marshal(c) // maps of plain values always marshal
			b.Write(data)
		}
		b.WriteString("]")
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(b.Len()))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(b.String()))
		return
	}
	s := startSSE(w, "\r\n")
	for _, c := range chunks {
		s.event("", c)
	}
}

// geminiQuota names a window the way Gemini's QuotaFailure does.
var geminiQuota = map[string]struct{ metric, id string }{
	"RPM": {"generativelanguage.googleapis.com/generate_content_free_tier_requests", "GenerateRequestsPerMinutePerProjectPerModel-FreeTier"},
	"RPD": {"generativelanguage.googleapis.com/generate_content_free_tier_requests", "GenerateRequestsPerDayPerProjectPerModel-FreeTier"},
	"TPM": {"generativelanguage.googleapis.com/generate_content_free_tier_input_token_count", "GenerateContentInputTokensPerModelPerMinute-FreeTier"},
	"TPD": {"generativelanguage.googleapis.com/generate_content_free_tier_input_token_count", "GenerateContentInputTokensPerModelPerDay-FreeTier"},
}

// quotaExceeded writes Gemini's 429 for a spent quota; retryDelay is in whole
// seconds, or left out when retry is false.
func (gemini) quotaExceeded(w http.ResponseWriter, a *reply, axis string, limit int64, retryDelay int64, retry bool) {
	q := geminiQuota[axis]
	violation := map[string]any{
		"quotaMetric":     q.metric,
		"quotaId":         q.id,
		"quotaDimensions": map[string]any{"location": "global", "model": a.model},
	}
	if limit > 0 {
		violation["quotaValue"] = itoa(limit)
	}
	details := []any{
		map[string]any{"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": []any{violation}},
		map[string]any{"@type": "type.googleapis.com/google.rpc.Help", "links": []any{map[string]any{
			"description": "Learn more about Gemini API quotas",
			"url":         "https://ai.google.dev/gemini-api/docs/rate-limits",
		}}},
	}
	if retry {
		details = append(details, map[string]any{
			"@type":      "type.googleapis.com/google.rpc.RetryInfo",
			"retryDelay": itoa(retryDelay) + "s",
		})
	}
	writeJSON(w, http.StatusTooManyRequests, geminiErrorBody(http.StatusTooManyRequests, "RESOURCE_EXHAUSTED",
		"You exceeded your current quota, please check your plan and billing details. "+
			"For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.",
		details...))
}

func (g gemini) rateLimited(w http.ResponseWriter, a *reply, rf refusal) {
	g.quotaExceeded(w, a, rf.axis, rf.limit, max(1, ceilSeconds(rf.wait)), !rf.tooLarge)
}

// usageLimited answers a spent subscription window as a spent per-day quota:
// Gemini has no longer window.
func (g gemini) usageLimited(w http.ResponseWriter, a *reply, ul usageLimit) {
	g.quotaExceeded(w, a, "RPD", 0, max(1, ceilSeconds(ul.wait)), true)
}

func (gemini) unauthorized(w http.ResponseWriter, _ *reply, why authFailure) {
	switch why {
	case authRevoked:
		const msg = "API key not valid. Please pass a valid API key."
		writeJSON(w, http.StatusBadRequest, geminiErrorBody(http.StatusBadRequest, "INVALID_ARGUMENT", msg,
			map[string]any{
				"@type":    "type.googleapis.com/google.rpc.ErrorInfo",
				"reason":   "API_KEY_INVALID",
				"domain":   "googleapis.com",
				"metadata": map[string]any{"service": "generativelanguage.googleapis.com"},
			},
			map[string]any{"@type": "type.googleapis.com/google.rpc.LocalizedMessage", "locale": "en-US", "message": msg},
		))
	case authMissing:
		writeJSON(w, http.StatusUnauthorized, geminiErrorBody(http.StatusUnauthorized, "UNAUTHENTICATED",
			"Method doesn't allow unregistered callers (callers without established identity). "+
				"Please use API Key or other form of API consumer identity to call this API."))
	default:
		writeJSON(w, http.StatusUnauthorized, geminiErrorBody(http.StatusUnauthorized, "UNAUTHENTICATED",
			"API key not valid. Please pass a valid API key."))
	}
}

func (gemini) noCredit(w http.ResponseWriter, _ *reply) {
	writeJSON(w, http.StatusTooManyRequests, geminiErrorBody(http.StatusTooManyRequests, "RESOURCE_EXHAUSTED",
		"Your prepayment credits are depleted. Please go to AI Studio at https://ai.studio/projects to manage your project and billing."))
}

func (gemini) fault(w http.ResponseWriter, _ *reply, status int) {
	switch status {
	case http.StatusServiceUnavailable, 529:
		writeJSON(w, status, geminiErrorBody(status, "UNAVAILABLE", "The model is overloaded. Please try again later."))
	case http.StatusGatewayTimeout:
		writeJSON(w, status, geminiErrorBody(status, "DEADLINE_EXCEEDED", "Deadline expired before operation could complete."))
	default:
		writeJSON(w, status, geminiErrorBody(status, "INTERNAL", "An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting"))
	}
}

func (gemini) badRequest(w http.ResponseWriter, _ *reply, status int, msg string) {
	s := "INVALID_ARGUMENT"
	switch status {
	case http.StatusNotFound:
		s = "NOT_FOUND"
	case http.StatusMethodNotAllowed:
		s = "UNIMPLEMENTED"
	}
	writeJSON(w, status, geminiErrorBody(status, s, msg))
}
