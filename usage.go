package keypool

import "math"

// RequestInfo is what the pool reads from a request before sending it: the
// model and what a token estimate needs. scanRequest fills it from the
// request body; its zero value is a request that names no model and carries
// no text.
type RequestInfo struct {
	// Model is the model the request body names in its top-level "model",
	// or "" when it names none (Gemini and Azure name it in the path).
	Model string
	// PromptBytes counts the request's text in bytes, as the JSON carries
	// it (escapes not decoded): every string value except keys, the model,
	// and image, audio, file and signature payloads. Bytes rather than
	// runes: a byte count over four tracks tokens about as well for Latin
	// scripts and better for scripts whose characters are several bytes
	// and about one token each.
	PromptBytes int64
	// MaxOutput is the output the request reserves, in tokens: the largest
	// of a top-level max_tokens or max_completion_tokens, and a
	// max_output_tokens or maxOutputTokens at any depth (Gemini's
	// generationConfig). Zero when it states none.
	MaxOutput int64
	// Images counts the images the request carries: data URLs
	// ("data:image/..."), base64 or file sources whose media type is an
	// image, and image_url, input_image and image parts.
	Images int
}

// The figures of DefaultEstimate.
const (
	// promptBytesPerToken is how many bytes of prompt text make a token.
	promptBytesPerToken = 4
	// defaultReservedOutput is the output, in tokens, reserved for a
	// request that states no maximum.
	defaultReservedOutput = 1024
	// maxReservedOutput caps the output, in tokens, reserved for one
	// request, whatever maximum it states.
	maxReservedOutput = 32768
	// tokensPerImage is what one image is counted as, in tokens.
	tokensPerImage = 1000
)

// DefaultEstimate is the pool's token estimate for a request before it is
// sent: its prompt bytes over four (rounded up), plus the output it reserves
// (MaxOutput, or 1024 when it states none, at most 32768), plus 1000 tokens
// per image. It is never negative: negative fields count as zero, and a sum
// past math.MaxInt64 stays there. Wrap it to weigh a vendor differently.
func DefaultEstimate(info RequestInfo) int64 {
	prompt := max(info.PromptBytes, 0)
	tokens := prompt / promptBytesPerToken
	if prompt%promptBytesPerToken != 0 {
		tokens++
	}
	output := info.MaxOutput
	if output <= 0 {
		output = defaultReservedOutput
	}
	tokens = addTokens(tokens, min(output, maxReservedOutput))
	images := int64(max(info.Images, 0))
	if images > math.MaxInt64/tokensPerImage {
		return math.MaxInt64
	}
	return addTokens(tokens, images*tokensPerImage)
}

// addTokens returns a+b for non-negative token counts, saturated at
// math.MaxInt64.
func addTokens(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
