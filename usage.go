package keypool

import "io"

// RequestInfo is what the pool reads from a request before sending it: the
// model and what a token estimate needs.
type RequestInfo struct {
	// Model is the model the request names, or "" when it names none.
	Model string
	// PromptChars counts the characters of the request's text content.
	PromptChars int64
	// MaxOutput is the output the request reserves (max_tokens and its
	// kin), or 0 when it states none.
	MaxOutput int64
	// Images counts the images the request carries.
	Images int
}

// scanRequest reads a JSON request body in one pass.
func scanRequest(body []byte) RequestInfo { return RequestInfo{} }

// modelFromPath returns the model a request path names, or "".
func modelFromPath(path string) string { return "" }

// DefaultEstimate is the pool's token estimate for a request.
func DefaultEstimate(info RequestInfo) int64 { return 0 }

// newUsageBody wraps a response body so that the tokens the answer reports are
// read as the caller reads it; settle is called once, at EOF or Close.
func newUsageBody(body io.ReadCloser, contentType string, settle func(tokens int64, ok bool)) io.ReadCloser {
	return body
}
