package keypool

import (
	"bytes"
	"math"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/keypool-go/keypool/internal/windowspec"
)

// RequestInfo is what the pool reads from a request before sending it — the
// model and what a token estimate needs — and hands to the estimator
// (WithEstimator). Its zero value is a request that names no model and
// carries no text.
type RequestInfo struct {
	// Model is the request's model: from WithModelFunc when set, else from
	// the path (Gemini's /models/{model}:…, Azure's /deployments/{name}/),
	// else the JSON body's top-level "model"; "" when none names one.
	Model string
	// PromptBytes counts the request's text in bytes, as the JSON carries
	// it (escapes not decoded): every string value except keys, the model,
	// and image, audio, file and signature payloads. Bytes rather than
	// runes: a byte count over four tracks tokens about as well for Latin
	// scripts and better for scripts whose characters are several bytes
	// and about one token each.
	PromptBytes int64
	// MaxOutput is the output the request reserves for each completion,
	// in tokens: the largest of a top-level max_tokens or
	// max_completion_tokens, and a max_output_tokens or maxOutputTokens at
	// any depth (Gemini's generationConfig). Zero when it states none.
	MaxOutput int64
	// Completions is how many completions the request asks for — OpenAI's
	// top-level "n", Gemini's candidateCount — each of up to MaxOutput
	// tokens, which the vendor bills together; 0 when it does not say
	// (one).
	Completions int
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
// sent: its prompt bytes over four (rounded up), plus the output it
// reserves (MaxOutput, or 1024 when it states none, for each of its
// Completions; at most 32768), plus 1000 tokens per image. It is never
// negative: negative fields count as zero, and a sum past math.MaxInt64
// stays there. Wrap it to weigh a vendor differently.
func DefaultEstimate(info RequestInfo) int64 {
	prompt := max(info.PromptBytes, 0)
	tokens := prompt / promptBytesPerToken
	if prompt%promptBytesPerToken != 0 {
		tokens++
	}
	tokens = addTokens(tokens, min(info.reservedOutput(), maxReservedOutput))
	images := int64(max(info.Images, 0))
	if images > math.MaxInt64/tokensPerImage {
		return math.MaxInt64
	}
	return addTokens(tokens, images*tokensPerImage)
}

// requestKey is what a key in a request body means to the pool.
type requestKey uint8

const (
	keyOther       requestKey = iota
	keyModel                  // the top-level "model"
	keyMaxOutput              // a reserved output: max_tokens and its kin
	keyCompletions            // how many completions: OpenAI's "n", Gemini's candidateCount
	keyType                   // "type", which names an image part
	keyMime                   // a media type: mime_type, mimeType, media_type
	keyPayload                // base64 data, URLs, file URIs and signatures: never prompt text
	keyMetadata               // the top-level "metadata", which holds Anthropic's user_id
	// The keys that name a conversation (see conversationOf), weakest
	// first: a stronger one read anywhere in the body outranks a weaker.
	keyUser           // OpenAI's top-level "user"
	keyMetadataUser   // Anthropic's metadata.user_id
	keyPromptCacheKey // OpenAI's top-level "prompt_cache_key"
	// OpenAI Responses' top-level "conversation", a conversation's ID or
	// an object whose "id" is one, and its "previous_response_id": the
	// vendor keeps these for the organisation whose key made them, and
	// answers another's with previous_response_not_found (see
	// usageScanner.text, which reads the IDs an answer makes).
	keyConversation
	keyPreviousResponse
)

// flags on an open container of a request body.
const (
	// flagImage: the container is an image (an image part, or a source
	// whose media type is an image).
	flagImage uint8 = 1 << iota
	// flagCounted: an image in or at the container has been counted.
	flagCounted
	// flagText: the container is a source whose media type is text, so its
	// payload is prompt text (Anthropic's plain-text document source).
	flagText
)

// requestScanner reads a request body in one pass: jsonLexer lexes it
// (scan), and what each token means to the pool is in its methods — key,
// open, close, number and text. It holds no locks.
type requestScanner struct {
	info  RequestInfo
	model []byte // the last top-level "model", a slice of the body, escapes not decoded
	// modelCut: the body ends inside the model's string.
	modelCut bool
	// lex reads the body's tokens; its depth counts the containers open.
	lex jsonLexer
	// keys holds the meaning of the last key read at each depth; flags
	// the image evidence of each open container. Index 0 is the top level,
	// outside any container.
	keys  [maxTrackedDepth + 1]requestKey
	flags [maxTrackedDepth + 1]uint8
	// conv is the strongest conversation key's value so far, a slice of
	// the body, escapes not decoded; convKey is which key it was.
	conv    []byte
	convKey requestKey
	// completions is how many completions the request asks for, 0 when
	// it does not say.
	completions int64
}

// readRequest reads a JSON request body — OpenAI chat completions and
// Responses, Anthropic messages, Gemini generateContent and their kin — in
// one pass, without decoding it, and returns what the pool needs to know
// before sending it, and the conversation it names (see conversationOf; 0
// for none). The body may be a prefix of a longer one: readRequest reports
// what the prefix holds, counting an image whose payload the prefix cuts.
// Malformed JSON never makes it panic: it returns what it read before the
// fault. It allocates nothing but the model name, and not that when names
// already holds it (names may be nil).
//
// pinned reports whether the conversation is one the vendor keeps for one
// organisation (previous_response_id, conversation): a request naming it
// can be served only by a key of the organisation that made it.
func readRequest(body []byte, in *names) (_ RequestInfo, _ conversation, pinned bool) {
	var s requestScanner
	s.scan(body)
	return s.finish(in), conversationOf(s.conv), s.convKey >= keyConversation
}

// finish ends the scan: the containers left open close, and the model is
// named.
func (s *requestScanner) finish(in *names) RequestInfo {
	for d := min(s.lex.depth, maxTrackedDepth); d >= 1; d-- {
		s.close(d)
	}
	s.info.Completions = int(min(s.completions, math.MaxInt32))
	if !s.modelCut && len(s.model) <= maxEscape*(windowspec.MaxModelName+1) {
		// The name as the vendor reads it, when it may be short enough
		// to keep: no escape is longer than maxEscape bytes.
		s.model = jsonUnescape(s.model)
	}
	if len(s.model) > windowspec.MaxModelName {
		// One byte over the bound is enough to refuse it, and copying
		// a name of megabytes is what a hostile client would want.
		s.model = s.model[:windowspec.MaxModelName+1]
	}
	if len(s.model) > 0 {
		s.info.Model = in.get(s.model)
	}
	return s.info
}

// scan reads the whole of in, a token at a time from jsonLexer, and
// records each through open, close, key, number and text. A token the body
// cuts reads as the lexer reports it: a key or a number not at all, a
// string value as what the body holds of it.
func (s *requestScanner) scan(in []byte) {
	l := &s.lex
	for i := 0; i < len(in); {
		var tok jsonToken
		tok, i = l.next(in, i)
		switch tok {
		case tokBeginObject, tokBeginArray:
			s.open(l.depth)
		case tokEndObject, tokEndArray:
			s.close(l.depth + 1)
		case tokKey:
			s.key(l.keyIn(in), l.keyWhole)
		case tokNumber:
			s.number(l.num, l.numOK)
		case tokString:
			s.text(in[l.start:l.end], l.done)
		}
	}
}

// open records the beginning of the container at depth d.
func (s *requestScanner) open(d int) {
	if d <= maxTrackedDepth {
		s.keys[d], s.flags[d] = keyOther, 0
	}
}

// key records an object key of the container at the current depth. A key
// the lexer read whole holds no escape — its run stopped at the closing
// quote, not at a backslash — and is not searched for one again.
func (s *requestScanner) key(k []byte, whole bool) {
	if d := s.lex.depth; d <= maxTrackedDepth {
		parent := keyOther
		if d > 1 {
			parent = s.keys[d-1]
		}
		if !whole {
			k = jsonUnescape(k)
		}
		s.keys[d] = classifyRequestKey(k, d, parent)
		if s.keys[d] == keyModel {
			s.model, s.modelCut = nil, false // the last "model" names the model, as in JSON
		}
	}
}

// number records a number of the container at the current depth: n when
// ok, else one that is no non-negative integer.
func (s *requestScanner) number(n int64, ok bool) {
	if d := s.lex.depth; d <= maxTrackedDepth && ok {
		switch s.keys[d] {
		case keyMaxOutput:
			s.info.MaxOutput = max(s.info.MaxOutput, n)
		case keyCompletions:
			s.completions = max(s.completions, n)
		}
	}
}

// text records a string value of the container at the current depth: v
// is all of it, or, when not done, what the body holds of it before its
// end.
func (s *requestScanner) text(v []byte, done bool) {
	d := s.lex.depth
	key := keyOther
	if d <= maxTrackedDepth {
		key = s.keys[d]
	}
	if key >= keyUser && key >= s.convKey && done && len(v) > 0 { // an empty name names nothing, and hides no weaker one
		s.conv, s.convKey = v, key
	}
	switch {
	case key == keyModel:
		// A name the prefix cuts is unknown, unless what the prefix
		// holds of it is already too long to be a name.
		if done || len(v) > windowspec.MaxModelName {
			s.model, s.modelCut = v, !done
		}
	case bytes.HasPrefix(v, []byte("data:")):
		// A data URL is a payload, never text; an image one is an image.
		if bytes.HasPrefix(v, []byte("data:image/")) {
			s.dataImage(d)
		}
	case key == keyPayload && s.flags[d]&flagText == 0:
	case key == keyMime:
		switch {
		case bytes.HasPrefix(v, []byte("image/")):
			s.flags[d] |= flagImage
		case bytes.HasPrefix(v, []byte("text/")):
			s.flags[d] |= flagText
		}
	case key == keyType && isImageType(v):
		s.flags[d] |= flagImage
	default:
		s.info.PromptBytes += int64(len(v))
	}
}

// dataImage records an image data URL held by the container at depth d.
// In an object it marks the object as an image, counted when it closes
// (once, whatever else marks it); elsewhere it counts at once.
func (s *requestScanner) dataImage(d int) {
	if s.lex.inObject() {
		s.flags[d] |= flagImage
		return
	}
	s.info.Images++
	if d >= 1 && d <= maxTrackedDepth {
		s.flags[d] |= flagCounted
	}
}

// close ends the container at depth d: an image that holds no counted
// image counts as one, and a counted image marks its parent, so that an
// image part (OpenAI's image_url, Anthropic's image) around a source that
// already counted is not counted again.
func (s *requestScanner) close(d int) {
	if d < 1 || d > maxTrackedDepth {
		return
	}
	f := s.flags[d]
	if f&(flagImage|flagCounted) == flagImage {
		s.info.Images++
		f |= flagCounted
	}
	if f&flagCounted != 0 && d > 1 {
		s.flags[d-1] |= flagCounted
	}
}

// classifyRequestKey says what key, read at depth d in a container that is
// the value of a key meaning parent, means.
func classifyRequestKey(key []byte, d int, parent requestKey) requestKey {
	switch string(key) {
	case "model":
		if d == 1 {
			return keyModel
		}
	case "max_tokens", "max_completion_tokens":
		if d == 1 {
			return keyMaxOutput
		}
	case "max_output_tokens", "maxOutputTokens":
		return keyMaxOutput
	case "n":
		if d == 1 {
			return keyCompletions
		}
	case "candidateCount", "candidate_count":
		return keyCompletions
	case "metadata":
		if d == 1 {
			return keyMetadata
		}
	case "user_id":
		if d == 2 && parent == keyMetadata {
			return keyMetadataUser
		}
	case "user":
		if d == 1 {
			return keyUser
		}
	case "prompt_cache_key":
		if d == 1 {
			return keyPromptCacheKey
		}
	case "previous_response_id":
		if d == 1 {
			return keyPreviousResponse
		}
	case "conversation":
		if d == 1 {
			return keyConversation
		}
	case "id":
		if d == 2 && parent == keyConversation {
			return keyConversation
		}
	case "type":
		return keyType
	case "mime_type", "mimeType", "media_type":
		return keyMime
	case "data", "url", "image_url", "file_uri", "fileUri",
		"signature", "thoughtSignature", "thought_signature", "encrypted_content":
		return keyPayload
	}
	return keyOther
}

// isImageType reports whether a part's "type" names an image part:
// OpenAI chat's image_url, Responses' input_image, Anthropic's image.
func isImageType(v []byte) bool {
	switch string(v) {
	case "image_url", "input_image", "image":
		return true
	}
	return false
}

// modelFromPath returns the model a request path names, or "": the model
// of a Gemini path ("/v1beta/models/gemini-2.0-flash:generateContent",
// "/v1beta/tunedModels/NAME:generateContent", and Vertex's
// ".../publishers/google/models/NAME:streamGenerateContent"), or the
// deployment of an Azure OpenAI path ("/openai/deployments/NAME/chat/
// completions"). The name is a substring of path: it allocates nothing.
func modelFromPath(path string) string {
	if !strings.Contains(path, "s/") {
		return "" // every marker ends so: most paths are refused in one pass
	}
	for _, marker := range [...]string{"/models/", "/tunedModels/", "/deployments/"} {
		if i := strings.Index(path, marker); i >= 0 {
			name := path[i+len(marker):]
			if end := strings.IndexAny(name, ":/?"); end >= 0 {
				name = name[:end]
			}
			return name
		}
	}
	return ""
}

// reservedOutput is the output info reserves before DefaultEstimate's cap:
// MaxOutput, or 1024 when it states none, for each of its completions.
func (info RequestInfo) reservedOutput() int64 {
	output := info.MaxOutput
	if output <= 0 {
		output = defaultReservedOutput
	}
	return mulTokens(output, int64(max(info.Completions, 1)))
}

// estimateUse splits a request's token estimate into the input and the
// output it reserves: the output is what the request reserves (as
// DefaultEstimate counts it), the input the rest.
func estimateUse(info RequestInfo, estimate int64) usageReport {
	output := min(info.reservedOutput(), maxReservedOutput, estimate)
	return usageReport{input: estimate - output, output: output}
}

// maxNames bounds the names a names holds: model names come from requests,
// and a client sending endless names must not grow memory without end.
const maxNames = 1024

// names interns model names: a pool's requests name a few models, and
// looking the name up spares an allocation per request. It interns only
// names windowspec.CheckModel passes, so that a name it holds needs no
// check again (holds), and a client's unusable names take none of its
// room. It is safe for concurrent use; a nil names interns nothing.
type names struct {
	last atomic.Pointer[string] // the name got last: most requests repeat it
	mu   sync.RWMutex           // guards m
	m    map[string]*string
}

// get returns b as a string, the same string each time for the same bytes.
func (n *names) get(b []byte) string {
	if n == nil {
		return string(b)
	}
	if last := n.last.Load(); last != nil && *last == string(b) {
		return *last
	}
	n.mu.RLock()
	p, ok := n.m[string(b)]
	n.mu.RUnlock()
	if ok {
		n.last.Store(p)
		return *p
	}
	s := string(b)
	if windowspec.CheckModel(s) != nil {
		return s
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.m == nil {
		n.m = make(map[string]*string)
	}
	if p, ok := n.m[s]; ok {
		return *p // interned since the look above
	}
	if len(n.m) < maxNames {
		n.m[s] = &s
		n.last.Store(&s)
	}
	return s
}

// holds reports whether s is the name get returned last from what it
// holds — a name windowspec.CheckModel has passed. Most requests name the
// model the one before named, and the check of such a name is one
// comparison of two strings that are one string.
func (n *names) holds(s string) bool {
	if n == nil {
		return false
	}
	last := n.last.Load()
	return last != nil && *last == s
}

// ReadRequest returns what a Pool reads from a request before sending it,
// given its URL path and its body (or the start of it): the model — from the
// path (Gemini's /models/{model}:…, Azure's /deployments/{name}/), else the
// JSON body's top-level "model" — and what DefaultEstimate counts. It reads
// the body in one pass, with the pool's own reader, and never panics on
// malformed JSON.
func ReadRequest(path string, body []byte) RequestInfo {
	info, _, _ := readRequest(body, nil)
	if m := modelFromPath(path); m != "" {
		info.Model = m
	}
	return info
}
