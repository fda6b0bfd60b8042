package vendorsim

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
)

// maxBody is the largest request body the sim reads.
const maxBody = 8 << 20

// defaultOutputTokens is the completion length of an answer when the
// configuration sets none.
const defaultOutputTokens = 100

// request is what the sim reads from a request body.
type request struct {
	model        string
	stream       bool
	includeUsage bool  // OpenAI's stream_options.include_usage
	maxTokens    int64 // max_tokens and its kin; 0 when the request states none
	prompt       int64 // prompt tokens: body length / 4, at least 1
	// prefixes are the prompt's prefixes, shortest first, when the prompt
	// cache is on (see prefixesOf); nil otherwise.
	prefixes []prefix
}

// route is what a request's method and path say.
type route struct {
	model  string // the model the path names (Gemini), else ""
	stream bool   // the path asks for a stream (Gemini's :streamGenerateContent)
	sse    bool   // the stream is SSE (Gemini's alt=sse), not a JSON array
}

// credential returns the key a request carries, looked for in
// "Authorization: Bearer", x-api-key, x-goog-api-key and the key query
// parameter, in that order; "" when it carries none.
func credential(r *http.Request) string {
	if v := r.Header.Get("Authorization"); v != "" {
		scheme, tok, ok := strings.Cut(v, " ")
		if tok = strings.TrimSpace(tok); ok && strings.EqualFold(scheme, "Bearer") && tok != "" {
			return tok
		}
	}
	if v := r.Header.Get("X-Api-Key"); v != "" {
		return v
	}
	if v := r.Header.Get("X-Goog-Api-Key"); v != "" {
		return v
	}
	return r.URL.Query().Get("key")
}

// errBodyTooLarge is returned by readBody for a body over maxBody.
var errBodyTooLarge = errors.New("request body too large")

// readBody reads a request body of at most maxBody bytes.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.Body == nil {
		return nil, nil
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return nil, errBodyTooLarge
	}
	return body, err
}

// decodeBody decodes a JSON request body into v and checks what every
// dialect needs: an object, and a max-token field that is not negative.
func decodeBody(body []byte, v any) error {
	if len(body) == 0 {
		return errors.New("the request body is empty; a JSON object is required")
	}
	if err := json.Unmarshal(body, v); err != nil {
		return errors.New("the request body is not valid JSON: " + err.Error())
	}
	return nil
}

// promptTokens is the sim's token count for a request body: its length / 4,
// at least 1.
func promptTokens(body []byte) int64 {
	return max(1, int64(len(body))/4)
}

// completionTokens returns the completion length of an answer to req when the
// sim's answers are output tokens long, and whether max_tokens cut it short.
func completionTokens(req request, output int64) (n int64, truncated bool) {
	if req.maxTokens > 0 && req.maxTokens < output {
		return req.maxTokens, true
	}
	return output, false
}

// replyText returns an answer text of about n tokens (4 characters each).
func replyText(n int64) string {
	return strings.TrimSuffix(strings.Repeat("sim ", int(n)), " ")
}
