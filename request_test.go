package keypool

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
	"unsafe"

	"github.com/keypool-go/keypool/internal/windowspec"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// requestCases are request bodies, each valid JSON, and what scanRequest
// reads from them. PromptBytes is worked out by hand in each comment.
var requestCases = []struct {
	name string
	body string
	want RequestInfo
}{
	{
		// "user" 4 + "Hello there" 11
		name: "openai chat text",
		body: `{"model":"gpt-4o","messages":[{"role":"user","content":"Hello there"}],"max_tokens":100}`,
		want: RequestInfo{Model: "gpt-4o", PromptBytes: 15, MaxOutput: 100},
	},
	{
		// "user" 4 + "text" 4 + "What is this?" 13 + "high" 4
		name: "openai chat image url",
		body: `{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"text","text":"What is this?"},` +
			`{"type":"image_url","image_url":{"url":"https://example.com/a.png","detail":"high"}}]}]}`,
		want: RequestInfo{Model: "gpt-4o", PromptBytes: 25, Images: 1},
	},
	{
		// "user" 4
		name: "openai chat data url",
		body: `{"model":"gpt-4o","messages":[{"role":"user","content":[` +
			`{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}}]}]}`,
		want: RequestInfo{Model: "gpt-4o", PromptBytes: 4, Images: 1},
	},
	{
		// "user" 4 + "input_text" 10 + "describe" 8
		name: "responses input_image url",
		body: `{"model":"gpt-4.1","input":[{"role":"user","content":[{"type":"input_text","text":"describe"},` +
			`{"type":"input_image","image_url":"https://example.com/y.jpg"}]}],"max_output_tokens":300}`,
		want: RequestInfo{Model: "gpt-4.1", PromptBytes: 22, MaxOutput: 300, Images: 1},
	},
	{
		// "user" 4
		name: "responses input_image data url before its type",
		body: `{"model":"gpt-4.1","input":[{"role":"user","content":[` +
			`{"image_url":"data:image/jpeg;base64,/9j/4AAQ","type":"input_image"}]}]}`,
		want: RequestInfo{Model: "gpt-4.1", PromptBytes: 4, Images: 1},
	},
	{
		// "user" 4 + "input_file" 10 + "a.pdf" 5
		name: "responses file data url is no prompt",
		body: `{"input":[{"role":"user","content":[` +
			`{"type":"input_file","filename":"a.pdf","file_data":"data:application/pdf;base64,JVBERi0xLjQ="}]}]}`,
		want: RequestInfo{PromptBytes: 19},
	},
	{
		// "user" 4 + "base64" 6 + "text" 4 + "Describe." 9
		name: "anthropic base64 image",
		body: `{"model":"claude-sonnet-4-5","max_tokens":1024,"messages":[{"role":"user","content":[` +
			`{"type":"image","source":{"type":"base64","media_type":"image/jpeg","data":"/9j/4AAQSkZJRg=="}},` +
			`{"type":"text","text":"Describe."}]}]}`,
		want: RequestInfo{Model: "claude-sonnet-4-5", PromptBytes: 23, MaxOutput: 1024, Images: 1},
	},
	{
		// "user" 4 + "url" 3 + "base64" 6
		name: "anthropic url and base64 images",
		body: `{"messages":[{"role":"user","content":[` +
			`{"type":"image","source":{"type":"url","url":"https://example.com/a.png"}},` +
			`{"type":"image","source":{"data":"iVBORw0KGgo=","media_type":"image/png","type":"base64"}}]}]}`,
		want: RequestInfo{PromptBytes: 13, Images: 2},
	},
	{
		// "user" 4 + "document" 8 + "base64" 6
		name: "anthropic pdf document",
		body: `{"messages":[{"role":"user","content":[` +
			`{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"JVBERi0xLjQ="}}]}]}`,
		want: RequestInfo{PromptBytes: 18},
	},
	{
		// "user" 4 + "document" 8 + "text" 4 + "The grass is green." 19
		name: "anthropic plain text document counts its data",
		body: `{"messages":[{"role":"user","content":[` +
			`{"type":"document","source":{"type":"text","media_type":"text/plain","data":"The grass is green."}}]}]}`,
		want: RequestInfo{PromptBytes: 35},
	},
	{
		// "assistant" 9 + "thinking" 8 + "Let me think" 12
		name: "anthropic thinking signature is no prompt",
		body: `{"messages":[{"role":"assistant","content":[` +
			`{"type":"thinking","thinking":"Let me think","signature":"EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxq"}]}]}`,
		want: RequestInfo{PromptBytes: 29},
	},
	{
		// "What is in this picture?" 24
		name: "gemini inline_data",
		body: `{"generationConfig":{"maxOutputTokens":256},"contents":[{"parts":[{"text":"What is in this picture?"},` +
			`{"inline_data":{"mime_type":"image/jpeg","data":"/9j/4AAQSkZJRg=="}}]}]}`,
		want: RequestInfo{PromptBytes: 24, MaxOutput: 256, Images: 1},
	},
	{
		// "user" 4 + "Caption" 7
		name: "gemini inlineData and fileData",
		body: `{"contents":[{"role":"user","parts":[{"inlineData":{"mimeType":"image/png","data":"iVBORw0KGgo="}},` +
			`{"fileData":{"mimeType":"image/jpeg","fileUri":"gs://bucket/a.jpg"}},{"text":"Caption"}]}]}`,
		want: RequestInfo{PromptBytes: 11, Images: 2},
	},
	{
		// "Transcribe" 10
		name: "gemini audio is no image and no prompt",
		body: `{"contents":[{"parts":[{"text":"Transcribe"},{"inline_data":{"mime_type":"audio/mp3","data":"SUQzBAAAAA=="}}]}],` +
			`"generation_config":{"max_output_tokens":77}}`,
		want: RequestInfo{PromptBytes: 10, MaxOutput: 77},
	},
	{
		name: "data urls in an array count each",
		body: `{"images":["data:image/png;base64,AAAA","data:image/png;base64,BBBB"]}`,
		want: RequestInfo{Images: 2},
	},
	{
		name: "largest reserve wins",
		body: `{"max_tokens":10,"max_completion_tokens":20,"generationConfig":{"maxOutputTokens":15}}`,
		want: RequestInfo{MaxOutput: 20},
	},
	{
		// "x" 1
		name: "nested max_tokens and model are not the request's",
		body: `{"metadata":{"max_tokens":5,"model":"x"}}`,
		want: RequestInfo{PromptBytes: 1},
	},
	{
		// "100" 3
		name: "reserve that is no non-negative integer",
		body: `{"max_tokens":1.5,"max_completion_tokens":-4,"max_output_tokens":"100"}`,
		want: RequestInfo{PromptBytes: 3},
	},
	{
		// h é(2) l l o: 6 bytes; 日本: 6 bytes
		name: "text counted in bytes",
		body: `{"messages":[{"content":"héllo"},{"content":"日本"}]}`,
		want: RequestInfo{PromptBytes: 12},
	},
	{
		name: "last model wins",
		body: `{"model":"a","model":"b"}`,
		want: RequestInfo{Model: "b"},
	},
	{
		name: "model that is no string",
		body: `{"model":5}`,
		want: RequestInfo{},
	},
	{
		name: "last model that is no string",
		body: `{"model":"a","model":5}`,
		want: RequestInfo{},
	},
	{name: "top-level array", body: `["ab","c"]`, want: RequestInfo{PromptBytes: 3}},
	{name: "keys are no prompt", body: `{"aaaa":"b"}`, want: RequestInfo{PromptBytes: 1}},
}

// lenientRequestCases are the request bodies whose reading encoding/json
// does not give (FuzzScanRequest holds the rest to it): bodies cut short or
// malformed, read up to where they break; escapes, counted as carried yet
// decoded in names; keys repeated, where the largest reserve wins.
var lenientRequestCases = []struct {
	name string
	body string
	want RequestInfo
}{
	{
		// a \ n b \ u 0 0 e 9: 10 bytes
		name: "escapes counted as carried",
		body: `{"messages":[{"content":"a\nb\u00e9"}]}`,
		want: RequestInfo{PromptBytes: 10},
	},
	{
		// "user" 4 + "base64" 6
		name: "prefix cut inside an image payload",
		body: `{"model":"claude-x","messages":[{"role":"user","content":[{"type":"image","source":` +
			`{"type":"base64","media_type":"image/png","data":"iVBORw0KGgoAAAANSUhEUgAA`,
		want: RequestInfo{Model: "claude-x", PromptBytes: 10, Images: 1},
	},
	{
		// "gpt-" is cut: no model; "Hel" 3
		name: "prefix cut inside the model",
		body: `{"messages":[{"content":"Hel`,
		want: RequestInfo{PromptBytes: 3},
	},
	{
		name: "prefix cut inside the model name",
		body: `{"model":"gpt-`,
		want: RequestInfo{},
	},
	{
		name: "malformed after the model",
		body: `{"model":"m","max_tokens":#,"messages":[{"content":"lost"}]}`,
		want: RequestInfo{Model: "m"},
	},
	{name: "empty", body: ``, want: RequestInfo{}},
	{name: "not json", body: `hello`, want: RequestInfo{}},
	{name: "stray byte after the model", body: `{"model":"m"}#{"max_tokens":5}`, want: RequestInfo{Model: "m"}},
	{name: "unmatched close", body: `]{"model":"m"}`, want: RequestInfo{}},
	{name: "number the body cuts", body: `{"model":"m","max_tokens":12`, want: RequestInfo{Model: "m"}},
	{name: "key the body cuts", body: `{"model":"m","max_tok`, want: RequestInfo{Model: "m"}},
	{name: "repeated max_tokens: the largest", body: `{"max_tokens":10,"max_tokens":5}`, want: RequestInfo{MaxOutput: 10}},
	{name: "n completions of max_tokens each", body: `{"n":8,"max_tokens":1000}`, want: RequestInfo{MaxOutput: 1000, Completions: 8}},
	{name: "n before max_tokens", body: `{"max_completion_tokens":10,"n":3}`, want: RequestInfo{MaxOutput: 10, Completions: 3}},
	{name: "n of 1", body: `{"n":1,"max_tokens":10,"x":{"candidateCount":0}}`, want: RequestInfo{MaxOutput: 10, Completions: 1}},
	{name: "n below the top level is no count", body: `{"max_tokens":10,"x":{"n":4}}`, want: RequestInfo{MaxOutput: 10}},
	{name: "Gemini's candidateCount", body: `{"generationConfig":{"candidateCount":2,"maxOutputTokens":64}}`, want: RequestInfo{MaxOutput: 64, Completions: 2}},
	{name: "n without a bound", body: `{"n":5}`, want: RequestInfo{Completions: 5}},
	{name: "n past the int32s", body: `{"n":99999999999}`, want: RequestInfo{Completions: math.MaxInt32}},
	// Names as the vendor reads them: escapes decoded.
	{name: "escaped model", body: `{"model":"\u0067pt-4o"}`, want: RequestInfo{Model: "gpt-4o"}},
	{name: "escaped model key", body: `{"mod\u0065l":"gpt-4o","model2":"x"}`, want: RequestInfo{Model: "gpt-4o", PromptBytes: 1}},
	{name: "escaped max_tokens key", body: `{"max_tok\u0065ns":5}`, want: RequestInfo{MaxOutput: 5}},
	{name: "escaped control character", body: `{"model":"a\u0007b"}`, want: RequestInfo{Model: "a\x07b"}},
	{name: "escaped surrogate pair", body: `{"model":"m\ud83d\ude00"}`, want: RequestInfo{Model: "m\U0001F600"}},
	{name: "escaped slash", body: `{"model":"org\/m"}`, want: RequestInfo{Model: "org/m"}},
	{name: "no JSON escape", body: `{"model":"bad\q"}`, want: RequestInfo{Model: `bad\q`}},
}

func TestScanRequest(t *testing.T) {
	for _, tt := range allRequestCases() {
		t.Run(tt.name, func(t *testing.T) {
			got := scanRequest([]byte(tt.body), nil)
			assert.Equal(t, tt.want, got, "scanRequest(%s)", tt.body)
		})
	}
}

// TestScanRequestPrefixes reads every prefix of each case: none may panic
// or report more than the prefix holds.
func TestScanRequestPrefixes(t *testing.T) {
	for _, tt := range allRequestCases() {
		t.Run(tt.name, func(t *testing.T) {
			for n := range len(tt.body) + 1 {
				checkRequestInfo(t, []byte(tt.body[:n]), scanRequest([]byte(tt.body[:n]), nil))
			}
		})
	}
}

// A prefix that cuts the model's name leaves the model unknown, unless what
// it holds of the name is already longer than a name may be: then the
// model is that much of it, which the pool refuses.
func TestScanRequestCutModel(t *testing.T) {
	long := `{"model":"` + strings.Repeat("m", 400)
	assert.Len(t, scanRequest([]byte(long), nil).Model, 257, "over the bound by one byte, enough to refuse it")
	assert.Empty(t, scanRequest([]byte(`{"model":"gpt-4o-mi`), nil).Model, "a short name cut is unknown")
	assert.Equal(t, "gpt-4o-mini", scanRequest([]byte(`{"model":"gpt-4o-mini"`), nil).Model)
}

// checkRequestInfo fails t when info is not something body can hold.
func checkRequestInfo(t *testing.T, body []byte, info RequestInfo) {
	t.Helper()
	if info.PromptBytes < 0 || info.PromptBytes > int64(len(body)) {
		t.Errorf("scanRequest(%q).PromptBytes = %d, want 0..%d", body, info.PromptBytes, len(body))
	}
	if info.MaxOutput < 0 {
		t.Errorf("scanRequest(%q).MaxOutput = %d, want >= 0", body, info.MaxOutput)
	}
	if info.Images < 0 || info.Images > len(body) {
		t.Errorf("scanRequest(%q).Images = %d, want 0..%d", body, info.Images, len(body))
	}
	if !bytes.Contains(body, []byte(info.Model)) && !bytes.Contains(body, []byte(`\`)) {
		t.Errorf("scanRequest(%q).Model = %q, want a substring of the body", body, info.Model)
	}
	if len(info.Model) > windowspec.MaxModelName+1 {
		t.Errorf("scanRequest(%q).Model is %d bytes, want at most one over the bound", body, len(info.Model))
	}
}

// TestScanRequestLargeImagePrefix reads the first MiB of a request whose
// image is three: the pool hands scanRequest such a prefix.
func TestScanRequestLargeImagePrefix(t *testing.T) {
	body := `{"generationConfig":{"maxOutputTokens":512},"contents":[{"parts":[{"text":"What is this?"},` +
		`{"inline_data":{"mime_type":"image/png","data":"` + strings.Repeat("iVBORw0K", 3<<20/8) + `"}}]}]}`
	got := scanRequest([]byte(body)[:1<<20], nil)
	want := RequestInfo{PromptBytes: len64("What is this?"), MaxOutput: 512, Images: 1}
	assert.Equal(t, want, got, "scanRequest(first MiB of a 3 MiB image request)")
}

func len64(s string) int64 { return int64(len(s)) }

func TestScanRequestAllocs(t *testing.T) {
	for _, tt := range []struct {
		name string
		body string
		want float64
	}{
		{"with model", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`, 1},
		{"without model", `{"contents":[{"parts":[{"text":"hi"}]}]}`, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			body := []byte(tt.body)
			got := testing.AllocsPerRun(100, func() { scanRequest(body, nil) })
			assert.Equal(t, tt.want, got, "allocations of scanRequest(%s)", tt.body)
		})
	}
}

func TestModelFromPath(t *testing.T) {
	tests := []struct {
		path string
		want string
	}{
		{"/v1beta/models/gemini-2.0-flash:generateContent", "gemini-2.0-flash"},
		{"/v1beta/models/gemini-2.0-flash:streamGenerateContent", "gemini-2.0-flash"},
		{"/v1/models/gemini-1.5-pro:countTokens", "gemini-1.5-pro"},
		{"/v1beta/tunedModels/my-tuned-abc123:generateContent", "my-tuned-abc123"},
		{"/v1/projects/p/locations/us-central1/publishers/google/models/gemini-1.5-pro:streamGenerateContent", "gemini-1.5-pro"},
		{"/v1beta/models/gemini-pro:streamGenerateContent?alt=sse", "gemini-pro"},
		{"/openai/deployments/gpt4o-prod/chat/completions", "gpt4o-prod"},
		{"/openai/deployments/embed-small/embeddings", "embed-small"},
		{"/v1/chat/completions", ""},
		{"/v1/messages", ""},
		{"/v1/models", ""},
		{"/v1beta/models/:generateContent", ""},
		{"", ""},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			assert.Equal(t, tt.want, modelFromPath(tt.path), "modelFromPath(%q)", tt.path)
		})
	}
}

func TestModelFromPathAllocs(t *testing.T) {
	got := testing.AllocsPerRun(100, func() {
		modelFromPath("/v1beta/models/gemini-2.0-flash:streamGenerateContent")
		modelFromPath("/openai/deployments/gpt4o-prod/chat/completions")
	})
	assert.Zero(t, got, "allocations of modelFromPath")
}

// chatBody returns an OpenAI chat request of at least n bytes.
func chatBody(n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"model":"gpt-4o","max_tokens":512,"messages":[{"role":"system","content":"You are terse."}`)
	for b.Len() < n {
		b.WriteString(`,{"role":"user","content":"Summarise the \"quarterly\" report:\nrevenue rose, costs fell, ` +
			`and the outlook is steady."},{"role":"assistant","content":"Revenue up, costs down, outlook steady."}`)
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

func BenchmarkScanRequest(b *testing.B) {
	for _, size := range []struct {
		name string
		body []byte
	}{
		{"overhead-body", []byte(benchBody)}, // BenchmarkOverhead's request
		{"1KiB", chatBody(1 << 10)},
		{"64KiB", chatBody(64 << 10)},
	} {
		body := size.body
		b.Run(size.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				scanRequest(body, nil)
			}
		})
	}
}

func BenchmarkModelFromPath(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		modelFromPath("/v1beta/models/gemini-2.0-flash:streamGenerateContent")
	}
}

// FuzzScanRequest holds scanRequest, on any body, to what a body can hold
// (checkRequestInfo), and, on a body that is valid JSON, to encoding/json's
// reading of it (requestOracle): the model of the body as it comes, and
// the model, the reserve and the conversation of the same value written
// again by encoding/json, whose objects repeat no key.
func FuzzScanRequest(f *testing.F) {
	for _, tt := range allRequestCases() {
		f.Add([]byte(tt.body))
	}
	files, err := filepath.Glob(filepath.Join("testdata", "usage", "*.json"))
	require.NoError(f, err)
	for _, name := range files {
		body, err := os.ReadFile(name)
		require.NoError(f, err)
		f.Add(body)
	}
	f.Add(chatBody(1 << 10))
	f.Add([]byte(`{"prompt_cache_key":7,"metadata":{"user_id":"a\"b"},"user":"u","max_completion_tokens":99999999999999999999}`))
	f.Add([]byte(strings.Repeat(`{"a":`, maxTrackedDepth) + `{"max_output_tokens":5}` + strings.Repeat("}", maxTrackedDepth)))
	f.Fuzz(func(t *testing.T, body []byte) {
		info := scanRequest(body, nil)
		checkRequestInfo(t, body, info)
		if !utf8.Valid(body) || !json.Valid(body) {
			return
		}
		d := json.NewDecoder(bytes.NewReader(body))
		d.UseNumber()
		var v any
		require.NoError(t, d.Decode(&v))
		// The model is the last "model": repeated keys read alike.
		if want := requestOracle(v); len(want.model) <= windowspec.MaxModelName && info.Model != want.model {
			t.Errorf("scanRequest(%q).Model = %q, want %q", body, info.Model, want.model)
		}
		canon := jsonText(v)
		info, conv, _ := readRequest(canon, nil)
		got := requestReading{model: info.Model, maxOutput: info.MaxOutput, completions: info.Completions, conv: conv}
		want := requestOracle(v)
		if len(want.model) > windowspec.MaxModelName {
			got.model, want.model = "", "" // cut, and refused (TestScanRequestCutModel)
		}
		if got != want {
			t.Fatalf("readRequest(%q) = %+v, want %+v as encoding/json reads it", canon, got, want)
		}
	})
}

// allRequestCases returns requestCases and lenientRequestCases.
func allRequestCases() []struct {
	name string
	body string
	want RequestInfo
} {
	return append(slices.Clone(requestCases), lenientRequestCases...)
}

// requestReading is what requestOracle reads of a request.
type requestReading struct {
	model       string
	maxOutput   int64
	completions int
	conv        conversation
}

// requestOracle reads a request body as encoding/json decoded it into v
// (numbers as json.Number): the top-level "model" when a string; the
// largest non-negative integer of a top-level max_tokens or
// max_completion_tokens, or of a max_output_tokens or maxOutputTokens in
// any object the lexer tracks (maxTrackedDepth), saturated at
// math.MaxInt64; the largest top-level "n" or candidateCount at any depth,
// at most math.MaxInt32; and the conversation of the strongest of the top-level
// prompt_cache_key, metadata.user_id and user that holds a string not empty, named
// by that string as JSON writes it (escapes not decoded, conversationOf).
func requestOracle(v any) requestReading {
	var r requestReading
	var completions int64
	var walk func(v any, d int)
	walk = func(v any, d int) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				n, isNum := x.(json.Number)
				reserve := k == "max_output_tokens" || k == "maxOutputTokens" ||
					d == 1 && (k == "max_tokens" || k == "max_completion_tokens")
				if isNum && reserve && d <= maxTrackedDepth {
					r.maxOutput = max(r.maxOutput, tokenCount(n))
				}
				if isNum && (k == "candidateCount" || k == "candidate_count" || d == 1 && k == "n") && d <= maxTrackedDepth {
					completions = max(completions, tokenCount(n))
				}
				walk(x, d+1)
			}
		case []any:
			for _, x := range v {
				walk(x, d+1)
			}
		}
	}
	walk(v, 1)
	r.completions = int(min(completions, math.MaxInt32))
	top, _ := v.(map[string]any)
	r.model, _ = top["model"].(string)
	meta, _ := top["metadata"].(map[string]any)
	for _, name := range []any{top["prompt_cache_key"], meta["user_id"], top["user"]} {
		if s, ok := name.(string); ok && s != "" {
			r.conv = conversationOf(jsonRaw(s))
			break
		}
	}
	return r
}

// tokenCount returns n when it is a non-negative integer, saturated at
// math.MaxInt64, else 0.
func tokenCount(n json.Number) int64 {
	c, _ := nonNegative(n)
	return c
}

// jsonText writes v, decoded by encoding/json, as encoding/json writes it,
// HTML characters unescaped.
func jsonText(v any) []byte {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	if err := e.Encode(v); err != nil {
		panic(err) // a value encoding/json decoded encodes
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

func TestDefaultEstimate(t *testing.T) {
	tests := []struct {
		name string
		info RequestInfo
		want int64
	}{
		{"nothing stated reserves the default output", RequestInfo{}, 1024},
		{"one byte is a token", RequestInfo{PromptBytes: 1}, 1 + 1024},
		{"four bytes are a token", RequestInfo{PromptBytes: 4}, 1 + 1024},
		{"five bytes round up", RequestInfo{PromptBytes: 5}, 2 + 1024},
		{"stated output", RequestInfo{PromptBytes: 400, MaxOutput: 50}, 100 + 50},
		{"stated output capped", RequestInfo{MaxOutput: 100000}, 32768},
		{"each completion's output", RequestInfo{MaxOutput: 100, Completions: 3}, 300},
		{"the default for each completion", RequestInfo{Completions: 2}, 2048},
		{"completions capped together", RequestInfo{MaxOutput: 10000, Completions: 8}, 32768},
		{"images", RequestInfo{Images: 2, MaxOutput: 1}, 2000 + 1},
		{"all together", RequestInfo{PromptBytes: 4000, MaxOutput: 500, Images: 1}, 1000 + 500 + 1000},
		{"negatives count as zero", RequestInfo{PromptBytes: -9, MaxOutput: -9, Images: -9}, 1024},
		{"huge prompt", RequestInfo{PromptBytes: math.MaxInt64, MaxOutput: 1}, math.MaxInt64/4 + 1 + 1},
		{"huge image count saturates", RequestInfo{Images: math.MaxInt}, math.MaxInt64},
		{"sum saturates", RequestInfo{Images: math.MaxInt64 / 1000, MaxOutput: 32768}, math.MaxInt64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := DefaultEstimate(tt.info); got != tt.want {
				t.Errorf("DefaultEstimate(%+v) = %d, want %d", tt.info, got, tt.want)
			}
		})
	}
}

// TestDefaultEstimateOfRequest estimates a request from its body, as the
// pool does.
func TestDefaultEstimateOfRequest(t *testing.T) {
	body := []byte(`{"model":"claude-sonnet-4-5","max_tokens":300,"messages":[{"role":"user","content":[` +
		`{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}},` +
		`{"type":"text","text":"What does this chart show about revenue?"}]}]}`)
	// Prompt: "user" 4 + "base64" 6 + "text" 4 + the question 40 = 54 bytes,
	// 14 tokens; 300 reserved; one image.
	if got, want := DefaultEstimate(scanRequest(body, nil)), int64(14+300+1000); got != want {
		t.Errorf("DefaultEstimate(scanRequest(%s)) = %d, want %d", body, got, want)
	}
}

func TestNamesInterns(t *testing.T) {
	var n names
	a := n.get([]byte("gpt-4o"))
	b := n.get([]byte("gpt-4o"))
	assert.Equal(t, "gpt-4o", a)
	assert.Same(t, unsafeData(a), unsafeData(b), "the same bytes give the same string")
	n.get([]byte("claude"))
	i := 0
	allocs := testing.AllocsPerRun(100, func() {
		n.get([]byte([]string{"gpt-4o", "claude"}[i%2]))
		i++
	})
	assert.Zero(t, allocs, "a known name costs no allocation, repeated or not")
	for i := range maxNames + 10 {
		n.get(fmt.Appendf(nil, "model-%d", i))
	}
	assert.Len(t, n.m, maxNames, "the interned names are bounded")
	var none *names
	assert.Equal(t, "x", none.get([]byte("x")))
}

func unsafeData(s string) *byte { return unsafe.StringData(s) }

func TestNamesHoldOnlyCheckedNames(t *testing.T) {
	var n names
	assert.False(t, n.holds(""), "nothing got yet")
	a := n.get([]byte("gpt-4o"))
	assert.True(t, n.holds(a), "a name got is held from its first get")
	assert.True(t, n.holds(strings.Clone(a)), "held by its bytes, not only as the very string")
	assert.False(t, n.holds("gpt-4o-mini"), "another name is not held until it is got")
	for _, bad := range []string{"gpt\x00evil", "gpt\nX-Injected: 1", "\xff\xfe", strings.Repeat("m", windowspec.MaxModelName+1)} {
		got := n.get([]byte(bad))
		assert.Equal(t, bad, got)
		assert.False(t, n.holds(got), "%q: a name CheckModel refuses is never held, so never spared the check", bad)
		assert.NotContains(t, n.m, bad, "%q: nor does it take a place among the interned names", bad)
	}
	assert.True(t, n.holds(n.get([]byte("gpt-4o"))))
	var none *names
	assert.False(t, none.holds("gpt-4o"))
}

// Model names come from clients: one no store may keep is refused before
// anything is sent, and endless names never grow the pool's memory.
func TestTransportRefusesModelNamesItCannotKeep(t *testing.T) {
	sent := 0
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent++
		return okResponse(r), nil
	})
	pool, err := New("test", threeKeys(), WithLimits(Limits{RPM: 1000, TPM: 1 << 30}))
	require.NoError(t, err)
	rt := pool.Transport(base)
	send := func(body, path string) error {
		req, _ := http.NewRequest(http.MethodPost, "http://vendor.test"+path, strings.NewReader(body))
		resp, err := rt.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	assert.ErrorContains(t, send(`{"model":"`+strings.Repeat("m", 300)+`"}`, "/v1/chat"), "longer than 256")
	assert.ErrorContains(t, send(`{}`, "/v1beta/models/"+strings.Repeat("g", 300)+":generateContent"), "longer than 256")
	assert.ErrorContains(t, send("{\"model\":\"a\x07b\"}", "/v1/chat"), "control character")
	assert.ErrorContains(t, pool.Do(t.Context(), strings.Repeat("d", 300), func(context.Context, Key) error { return nil }), "longer than 256")
	assert.Zero(t, sent, "nothing is sent")
	require.NoError(t, send(`{"model":"`+strings.Repeat("m", 256)+`"}`, "/v1/chat"), "256 bytes is a name")
	for range 3 { // a name the last request named is checked once: the next bad one is not spared
		require.NoError(t, send(`{"model":"gpt-4o"}`, "/v1/chat"))
		assert.ErrorContains(t, send("{\"model\":\"gpt-4o\u0000\"}", "/v1/chat"), "control character")
		assert.ErrorContains(t, send("{\"model\":\"gpt-4o\r\nX: y\"}", "/v1/chat"), "control character")
	}

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range 100 {
		name := fmt.Sprintf("%04d", i) + strings.Repeat("x", 1<<20)
		require.ErrorContains(t, send(`{"model":"`+name+`"}`, "/v1/chat"), "longer than 256", "a name longer than the body the pool reads")
	}
	for i := range 3000 {
		_ = send(fmt.Sprintf(`{"model":"client-chosen-%d"}`, i), "/v1/chat")
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	grown := int64(after.HeapInuse) - int64(before.HeapInuse)
	assert.Less(t, grown, int64(16<<20), "100 names of a MiB and 3000 short ones grew the heap by %d bytes", grown)
	for _, ks := range pool.Stats() {
		assert.LessOrEqual(t, len(ks.Models), maxModelsPerKey+1, "key %s", ks.ID)
		for _, m := range ks.Models {
			assert.LessOrEqual(t, len(m.Model), 256)
		}
	}
	var buf bytes.Buffer
	fmt.Fprint(&buf, pool.Stats())
	assert.Less(t, buf.Len(), 4<<20, "stats stay small")
}

// jsonRaw returns s as jsonText writes it, without its quotes: the bytes
// the lexer reports of it.
func jsonRaw(s string) []byte {
	b := jsonText(s)
	return b[1 : len(b)-1]
}

// scanRequest is readRequest without the conversation, as most tests read
// a request.
func scanRequest(body []byte, in *names) RequestInfo {
	info, _, _ := readRequest(body, in)
	return info
}

func TestReadRequestAndReserve(t *testing.T) {
	info := ReadRequest("/v1/chat/completions", []byte(`{"model":"m","max_tokens":100,"messages":[{"role":"user","content":"12345678"}]}`))
	assert.Equal(t, "m", info.Model)
	assert.Equal(t, int64(100), info.MaxOutput)
	assert.Equal(t, "gemini-2.0-flash", ReadRequest("/v1beta/models/gemini-2.0-flash:generateContent", nil).Model)
	cost, unbounded := Price{Input: 1, Output: 10}.Reserve(info, DefaultEstimate(info))
	assert.False(t, unbounded)
	assert.Equal(t, int64((DefaultEstimate(info)-100)*1+100*10), cost, "reserve: the estimated input and the output bound")
	_, unbounded = Price{Input: 1}.Reserve(ReadRequest("/", []byte(`{"model":"m"}`)), 10)
	assert.True(t, unbounded, "no output bound")
}
