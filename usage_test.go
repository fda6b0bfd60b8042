package keypool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/keypool-go/keypool/internal/refusal"
	"github.com/keypool-go/keypool/internal/vendorsim"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recordedUsage lists the recorded answers in testdata/usage and the usage
// each reports; testdata/usage/README.md names their sources and explains
// each split.
var recordedUsage = []struct {
	file string
	want usageReport
}{
	{"openai_chat.json", split(14, 0, 37, 51)},
	{"openai_chat_cached.json", split(4597, 4480, 4, 4601)},
	{"openai_chat_stream.sse", split(14, 0, 47, 61)},
	{"openai_chat_stream_cached.sse", split(4597, 4480, 4, 4601)},
	{"openai_responses.json", split(14, 0, 50, 64)},
	{"openai_responses_cached.json", split(4595, 4480, 5, 4600)},
	{"openai_responses_stream.sse", split(12, 0, 2, 14)},
	{"anthropic_messages.json", split(12, 0, 6, 18)},
	{"anthropic_messages_cached.json", split(1+101+5169, 5169, 71, 1+71+101)},
	{"anthropic_messages_stream.sse", split(11, 0, 6, 17)},
	{"anthropic_messages_stream_cached.sse", split(3+5343, 5343, 6, 3+6)},
	{"anthropic_tool_use_stream.sse", split(377, 0, 65, 442)},
	{"gemini_generate.json", split(9, 0, 28+244, 281)},
	{"gemini_generate_cached.json", split(1107+1171, 1081, 21+41, 2340)},
	{"gemini_stream.sse", split(7, 0, 2+94, 103)},
	{"gemini_stream_cached.sse", split(1087, 1081, 2, 1089)},
	{"gemini_stream_cumulative.sse", split(9, 0, 23+185, 217)},
}

// split is a usage report as the usage reader makes it: input, of it
// cachedInput, output, and the total the rate limits count.
func split(input, cachedInput, output, total int64) usageReport {
	return usageReport{input: input, cachedInput: cachedInput, output: output, limited: total, hasLimited: true}
}

// Content types as vendors send them.
const (
	jsonType   = "application/json"
	streamType = "text/event-stream; charset=utf-8"
)

// contentTypeOf returns the content type of a recorded answer.
func contentTypeOf(file string) string {
	if strings.HasSuffix(file, ".sse") {
		return streamType
	}
	return jsonType
}

// chunkedBody is a body that yields its data in reads of the sizes given,
// in turn, and counts its Close calls.
type chunkedBody struct {
	data   []byte
	sizes  []int
	next   int
	closed int
}

func (c *chunkedBody) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), len(c.data), c.sizes[c.next%len(c.sizes)])
	c.next++
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

func (c *chunkedBody) Close() error {
	c.closed++
	return nil
}

// settlement records the calls of a settle function.
type settlement struct {
	mu     sync.Mutex
	calls  int
	report usageReport
	ok     bool
}

func (s *settlement) settle(u usageReport, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	s.report, s.ok = u, ok
}

func (s *settlement) get() (calls int, u usageReport, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls, s.report, s.ok
}

// chunkings are the ways the tests cut a body into reads: whole, a byte at
// a time, and random sizes from a fixed seed.
func chunkings(n int) map[string][]int {
	rng := rand.New(rand.NewPCG(1, uint64(n)))
	random := make([]int, 64)
	for i := range random {
		random[i] = 1 + rng.IntN(97)
	}
	return map[string][]int{"whole": {max(n, 1)}, "bytes": {1}, "random": random}
}

// readUsage reads data through newUsageBody in reads of the given sizes,
// closes it, and returns what passed through and how it settled.
func readUsage(t *testing.T, data []byte, contentType string, sizes []int) (passed []byte, s *settlement) {
	t.Helper()
	s = &settlement{}
	src := &chunkedBody{data: data, sizes: sizes}
	body := newUsageBody(src, contentType, s.settle)
	buf := make([]byte, len(data)+1)
	for {
		n, err := body.Read(buf)
		passed = append(passed, buf[:n]...)
		if err == io.EOF {
			break
		}
		require.NoError(t, err, "Read")
	}
	require.NoError(t, body.Close(), "Close")
	assert.Equal(t, 1, src.closed, "Close calls on the wrapped body")
	return passed, s
}

func TestUsageBodyRecorded(t *testing.T) {
	for _, rec := range recordedUsage {
		data, err := os.ReadFile(filepath.Join("testdata", "usage", rec.file))
		require.NoError(t, err)
		for name, sizes := range chunkings(len(data)) {
			t.Run(rec.file+"/"+name, func(t *testing.T) {
				passed, s := readUsage(t, data, contentTypeOf(rec.file), sizes)
				assert.Equal(t, data, passed, "bytes passed through")
				calls, got, ok := s.get()
				assert.Equal(t, 1, calls, "settle calls")
				assert.True(t, ok, "settle ok")
				assert.Equal(t, rec.want, got, "settled usage")
			})
		}
	}
}

// TestUsageSettlesTheLimitedTotal sends requests through the transport to a
// vendor whose answers report cached input: the key's token window settles
// at each answer's total, which for Anthropic leaves the cache reads out,
// never at input plus output.
func TestUsageSettlesTheLimitedTotal(t *testing.T) {
	for _, rec := range []struct {
		file   string
		tokens int64
	}{
		{"anthropic_messages_cached.json", 173},
		{"anthropic_messages_stream_cached.sse", 9},
		{"openai_chat_cached.json", 4601},
		{"gemini_generate_cached.json", 2340},
	} {
		t.Run(rec.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", "usage", rec.file))
			require.NoError(t, err)
			v, srv := newVendor(t)
			v.on("sk-a", answer{status: 200, header: map[string]string{"Content-Type": contentTypeOf(rec.file)}, body: string(data)})
			pool, err := New("test", []Key{{Secret: "sk-a"}}, WithClock(newTestClock().Now), WithLimits(Limits{TPM: 1 << 20}))
			require.NoError(t, err)
			status, err := post(&http.Client{Transport: pool.Transport(nil)}, srv.URL, "m", 400)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, status)
			st := pool.Stats()[0]
			require.Len(t, st.Models, 1)
			assert.Equal(t, rec.tokens, st.Models[0].Usage.MinuteTokens, "tokens settled for %s", rec.file)
		})
	}
}

// TestUsageSettlesSpendBySplit sends requests through the transport to a
// vendor whose answers report cached input, with a price for the model:
// each answer's spend is its uncached input, cached input and output at
// their prices.
func TestUsageSettlesSpendBySplit(t *testing.T) {
	price := Price{Input: 3, CachedInput: 0.3, Output: 15} // dollars per million tokens
	for _, rec := range []struct {
		file                     string
		uncached, cached, output int64
	}{
		{"anthropic_messages_cached.json", 1 + 101, 5169, 71},
		{"openai_chat_stream_cached.sse", 4597 - 4480, 4480, 4},
		{"gemini_generate_cached.json", 1107 + 1171 - 1081, 1081, 21 + 41},
	} {
		t.Run(rec.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", "usage", rec.file))
			require.NoError(t, err)
			v, srv := newVendor(t)
			v.on("sk-a", answer{status: 200, header: map[string]string{"Content-Type": contentTypeOf(rec.file)}, body: string(data)})
			pool, err := New("test", []Key{{Secret: "sk-a", Budget: Budget{PerDay: 1000}}},
				WithClock(newTestClock().Now), WithPrices(map[string]Price{"m": price}))
			require.NoError(t, err)
			status, err := post(&http.Client{Transport: pool.Transport(nil)}, srv.URL, "m", 400)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, status)
			want := (float64(rec.uncached)*price.Input + float64(rec.cached)*price.CachedInput + float64(rec.output)*price.Output) / 1e6
			assert.InDelta(t, want, pool.Stats()[0].Spent.PerDay, 1e-6, "spent on %s", rec.file)
		})
	}
}

// TestUsageRecordedListed keeps recordedUsage, the files and the README in
// step: every recorded file is read and its source named.
func TestUsageRecordedListed(t *testing.T) {
	dir := filepath.Join("testdata", "usage")
	readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
	require.NoError(t, err)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	listed := map[string]bool{}
	for _, rec := range recordedUsage {
		listed[rec.file] = true
	}
	for _, e := range entries {
		if e.Name() == "README.md" {
			continue
		}
		assert.True(t, listed[e.Name()], "%s is in recordedUsage", e.Name())
		assert.Contains(t, string(readme), "`"+e.Name()+"`", "README.md names %s", e.Name())
	}
	assert.Len(t, entries, len(recordedUsage)+1, "files in %s", dir)
}

// usageCases are answers, JSON and event streams, and what they settle.
// Each JSON answer is valid JSON; FuzzUsageOracle holds the reading of
// such answers to encoding/json's (usageOracle), and lenientUsageCases
// lists the answers it does not read alike.
var usageCases = []struct {
	name        string
	contentType string
	body        string
	want        usageReport
	ok          bool
}{
	{"json total", jsonType, `{"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":9}}`, split(3, 0, 4, 9), true},
	{"json prompt and completion", jsonType, `{"usage":{"prompt_tokens":3,"completion_tokens":4}}`, split(3, 0, 4, 7), true},
	{"json anthropic cache creation counts, cache reads do not", jsonType,
		`{"usage":{"input_tokens":10,"cache_creation_input_tokens":100,"cache_read_input_tokens":1000,"output_tokens":5}}`,
		split(10+100+1000, 1000, 5, 115), true},
	{"json gemini without total", jsonType, `{"usageMetadata":{"promptTokenCount":9,"candidatesTokenCount":28}}`, split(9, 0, 28, 37), true},
	{"json usage null", jsonType, `{"usage":null}`, usageReport{}, false},
	{"json no usage", jsonType, `{"id":"x","choices":[]}`, usageReport{}, false},
	{"json empty usage", jsonType, `{"usage":{}}`, usageReport{}, false},
	{"json usage not top-level", jsonType, `{"choices":[{"usage":{"total_tokens":9}}]}`, usageReport{}, false},
	{"json decoy before usage", jsonType, `{"tool_usage":{"total_tokens":9},"usage":{"total_tokens":3}}`, split(0, 0, 0, 3), true},
	{"json details ignored", jsonType, `{"usage":{"total_tokens":5,"prompt_tokens_details":{"total_tokens":99}}}`, split(0, 0, 0, 5), true},
	{"json members that are no non-negative integers", jsonType,
		`{"usage":{"input_tokens":-5,"output_tokens":2.5,"total_tokens":"7"}}`, usageReport{}, false},
	{"json count saturates", jsonType, `{"usage":{"total_tokens":99999999999999999999}}`, split(0, 0, 0, math.MaxInt64), true},
	{"json sum saturates", jsonType,
		`{"usage":{"input_tokens":9223372036854775807,"output_tokens":5}}`, split(math.MaxInt64, 0, 5, math.MaxInt64), true},
	{"json gemini array stream, last wins", jsonType,
		`[{"usageMetadata":{"totalTokenCount":4}},` + "\n" + `{"usageMetadata":{"totalTokenCount":9}}]`, split(0, 0, 0, 9), true},
	{"json unknown content type", "", `{"usage":{"total_tokens":2}}`, split(0, 0, 0, 2), true},

	{"json openai cached prompt tokens", jsonType,
		`{"usage":{"prompt_tokens":100,"completion_tokens":20,"total_tokens":120,` +
			`"prompt_tokens_details":{"audio_tokens":3,"cached_tokens":60},"completion_tokens_details":{"reasoning_tokens":15}}}`,
		split(100, 60, 20, 120), true},
	{"json responses cached input tokens", jsonType,
		`{"usage":{"input_tokens":50,"input_tokens_details":{"cached_tokens":30},"output_tokens":10,` +
			`"output_tokens_details":{"reasoning_tokens":4},"total_tokens":60}}`, split(50, 30, 10, 60), true},
	{"json cached tokens only in input details", jsonType,
		`{"usage":{"prompt_tokens":10,"completion_tokens_details":{"cached_tokens":7},"cached_tokens":8}}`, split(10, 0, 0, 10), true},
	{"json cached tokens deeper than the details ignored", jsonType,
		`{"usage":{"prompt_tokens":9,"prompt_tokens_details":{"x":{"cached_tokens":4}}}}`, split(9, 0, 0, 9), true},
	{"json details that are an array ignored", jsonType,
		`{"usage":{"prompt_tokens":9,"prompt_tokens_details":[{"cached_tokens":4}]}}`, split(9, 0, 0, 9), true},
	{"json details closed before the next member", jsonType,
		`{"usage":{"prompt_tokens_details":{"cached_tokens":5},"prompt_tokens":7,"cached_tokens":6}}`, split(7, 5, 0, 7), true},
	{"json cached tokens capped at the input", jsonType,
		`{"usage":{"prompt_tokens":10,"prompt_tokens_details":{"cached_tokens":50}}}`, split(10, 10, 0, 10), true},
	{"json gemini thoughts are output, tool-use prompts input", jsonType,
		`{"usageMetadata":{"promptTokenCount":12,"candidatesTokenCount":71,"totalTokenCount":237,"cachedContentTokenCount":4,` +
			`"cacheTokensDetails":[{"modality":"TEXT","tokenCount":4}],"toolUsePromptTokenCount":65,"thoughtsTokenCount":89}}`,
		split(12+65, 4, 71+89, 237), true},
	{"json only cache figures settle nothing", jsonType,
		`{"usage":{"cache_read_input_tokens":5,"prompt_tokens_details":{"cached_tokens":5}}}`, usageReport{}, false},

	{"sse openai final chunk", streamType,
		"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\n" +
			"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2,\"total_tokens\":3}}\n\n" +
			"data: [DONE]\n\n", split(1, 0, 2, 3), true},
	{"sse anthropic delta replaces input", streamType,
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":" +
			"{\"input_tokens\":5,\"cache_creation_input_tokens\":7,\"output_tokens\":1}}}\n\n" +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"input_tokens\":6,\"output_tokens\":9}}\n\n",
		split(6+7, 0, 9, 22), true},
	{"sse anthropic cache reads kept from message_start", streamType,
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":" +
			"{\"input_tokens\":2,\"cache_read_input_tokens\":40,\"output_tokens\":1}}}\n\n" +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":9}}\n\n",
		split(2+40, 40, 9, 11), true},
	{"sse responses nested usage", streamType,
		"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":" +
			"{\"usage\":{\"input_tokens\":2,\"input_tokens_details\":{\"cached_tokens\":1},\"output_tokens\":3,\"total_tokens\":5}}}\n\n",
		split(2, 1, 3, 5), true},
	{"sse details reset between events", streamType,
		"data: {\"usage\":{\"prompt_tokens_details\":{\n\ndata: {\"usage\":{\"a\":{\"cached_tokens\":4},\"prompt_tokens\":9}}\n\n",
		split(9, 0, 0, 9), true},
	{"sse gemini last wins", streamType,
		"data: {\"usageMetadata\":{\"totalTokenCount\":4}}\r\n\r\ndata: {\"usageMetadata\":{\"totalTokenCount\":9}}\r\n\r\n", split(0, 0, 0, 9), true},
	{"sse cr line ends", streamType,
		"event: x\rdata: {\"usage\":{\"total_tokens\":3}}\r\rdata: [DONE]\r\r", split(0, 0, 0, 3), true},
	{"sse data split over lines", streamType, "data: {\"usage\":\ndata: {\"total_tokens\":8}}\n\n", split(0, 0, 0, 8), true},
	{"sse blank line ends the event", streamType, "data: {\"usage\":\n\ndata: {\"total_tokens\":8}}\n\n", usageReport{}, false},
	{"sse comments and other fields", streamType,
		": keep-alive\nevent: usage\nid: 7\nretry: 100\ndata: {\"usage\":{\"total_tokens\":4}}\n\n", split(0, 0, 0, 4), true},
	{"sse data without space", streamType, "data:{\"usage\":{\"total_tokens\":4}}\n\n", split(0, 0, 0, 4), true},
	{"sse last event without blank line", streamType, "data: {\"usage\":{\"total_tokens\":4}}", split(0, 0, 0, 4), true},
	{"sse other field names", streamType,
		"datax: {\"usage\":{\"total_tokens\":4}}\nDATA: {\"usage\":{\"total_tokens\":4}}\ndat: {}\n\n", usageReport{}, false},
	{"sse broken event spares the next", streamType,
		"data: [DONE]\n\ndata: {\"usage\":{\"total_tokens\":2}}\n\n", split(0, 0, 0, 2), true},
	{"sse content type in capitals", "Text/Event-Stream; charset=UTF-8", "data: {\"usage\":{\"total_tokens\":6}}\n\n", split(0, 0, 0, 6), true},
	{"sse read as json when not labelled so", jsonType, "data: [DONE]\n\ndata: {\"usage\":{\"total_tokens\":2}}\n\n", usageReport{}, false},
	{"sse no usage", streamType, "data: {\"choices\":[]}\n\ndata: [DONE]\n\n", usageReport{}, false},
}

// lenientUsageCases are the JSON answers whose reading encoding/json does
// not give: answers cut short or broken, read up to where they end or
// break; keys with escapes, read as carried (no vendor escapes a key it
// writes); members repeated, where the last that is a count wins.
var lenientUsageCases = []struct {
	name        string
	contentType string
	body        string
	want        usageReport
	ok          bool
}{
	{"json cut after usage", jsonType, `{"usage":{"total_tokens":5},"choices":[{"mess`, split(0, 0, 0, 5), true},
	{"json cut inside usage", jsonType, `{"usage":{"total_tokens":5,"prompt_tok`, split(0, 0, 0, 5), true},
	{"json broken before usage", jsonType, `{"a":#,"usage":{"total_tokens":5}}`, usageReport{}, false},
	{"json cut inside a count", jsonType, `{"usage":{"prompt_tokens":5,"total_tokens":12`, split(5, 0, 0, 5), true},
	{"json cut inside a string before usage", jsonType, `{"id":"chatcmpl-\"1`, usageReport{}, false},
	{"json stray byte after usage", jsonType, `{"usage":{"total_tokens":5}}#{"usage":{"total_tokens":9}}`, split(0, 0, 0, 5), true},
	{"json unmatched close before usage", jsonType, `]{"usage":{"total_tokens":5}}`, usageReport{}, false},
	{"json sequence of values, last wins", jsonType, `{"usage":{"total_tokens":5}} {"usage":{"total_tokens":9}}`, split(0, 0, 0, 9), true},
	{"json escaped key read as carried", jsonType, `{"usag\u0065":{"total_tokens":5}}`, usageReport{}, false},
	{"json escaped member read as carried", jsonType, `{"usage":{"total_tok\u0065ns":5,"prompt_tokens":2}}`, split(2, 0, 0, 2), true},
	{"json escapes in strings skipped", jsonType, `{"a":"\"usage\":{\"total_tokens\":9}\\","usage":{"total_tokens":5}}`, split(0, 0, 0, 5), true},
	{"json repeated member, the last count wins", jsonType, `{"usage":{"total_tokens":5,"total_tokens":"x"}}`, split(0, 0, 0, 5), true},
}

// allUsageCases returns usageCases and lenientUsageCases.
func allUsageCases() []struct {
	name        string
	contentType string
	body        string
	want        usageReport
	ok          bool
} {
	return append(slices.Clone(usageCases), lenientUsageCases...)
}

func TestUsageBody(t *testing.T) {
	for _, tt := range allUsageCases() {
		for name, sizes := range chunkings(len(tt.body)) {
			t.Run(tt.name+"/"+name, func(t *testing.T) {
				passed, s := readUsage(t, []byte(tt.body), tt.contentType, sizes)
				assert.Equal(t, tt.body, string(passed), "bytes passed through")
				calls, got, ok := s.get()
				assert.Equal(t, 1, calls, "settle calls")
				assert.Equal(t, tt.ok, ok, "settle ok")
				assert.Equal(t, tt.want, got, "settled usage")
			})
		}
	}
}

func TestIsEventStream(t *testing.T) {
	for _, tt := range []struct {
		contentType string
		want        bool
	}{
		{"text/event-stream", true},
		{"text/event-stream; charset=utf-8", true},
		{" Text/Event-Stream ;charset=UTF-8", true},
		{"\u00a0text/event-stream", true}, // TrimSpace trims Unicode space too
		{"TEXT/EVENT-STREAM", true},
		{"", false},
		{"application/json", false},
		{"Application/json; charset=utf-8", false},
		{"text/plain", false},
		{"text/event-streams", false},
		{"x text/event-stream", false},
	} {
		if got := isEventStream(tt.contentType); got != tt.want {
			t.Errorf("isEventStream(%q) = %t, want %t", tt.contentType, got, tt.want)
		}
	}
}

// refIsEventStream is isEventStream without its refusal of a type that
// starts with another letter: the definition it is held to
// (FuzzIsEventStream).
func refIsEventStream(contentType string) bool {
	mediaType, _, _ := strings.Cut(contentType, ";")
	return strings.EqualFold(strings.TrimSpace(mediaType), "text/event-stream")
}

// FuzzIsEventStream holds isEventStream to refIsEventStream, its
// definition.
func FuzzIsEventStream(f *testing.F) {
	for _, seed := range []string{"text/event-stream", " Text/Event-Stream; x", "application/json", "\u00a0text/event-stream", ""} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, contentType string) {
		if got, want := isEventStream(contentType), refIsEventStream(contentType); got != want {
			t.Fatalf("isEventStream(%q) = %t, want %t", contentType, got, want)
		}
	})
}

func TestUsageBodySettlesOnce(t *testing.T) {
	stream, err := os.ReadFile(filepath.Join("testdata", "usage", "anthropic_messages_stream.sse"))
	require.NoError(t, err)
	// The message_start event: 11 input and 1 output token so far.
	start := bytes.Index(stream, []byte("event: content_block_start"))
	require.Positive(t, start)
	errReset := errors.New("connection reset")

	tests := []struct {
		name string
		read func(t *testing.T, body io.ReadCloser)
		want usageReport
		ok   bool
	}{
		{
			name: "at EOF, then never again",
			read: func(t *testing.T, body io.ReadCloser) {
				_, err := io.ReadAll(body)
				require.NoError(t, err)
				n, err := body.Read(make([]byte, 8))
				assert.Equal(t, 0, n, "Read after EOF")
				assert.ErrorIs(t, err, io.EOF, "Read after EOF")
				assert.NoError(t, body.Close())
				assert.NoError(t, body.Close())
			},
			want: split(11, 0, 6, 17), ok: true,
		},
		{
			name: "at Close before any read",
			read: func(t *testing.T, body io.ReadCloser) {
				assert.NoError(t, body.Close())
				assert.NoError(t, body.Close())
				_, err := io.ReadAll(body)
				assert.NoError(t, err, "ReadAll after Close")
			},
			ok: false,
		},
		{
			name: "at Close with the usage read so far",
			read: func(t *testing.T, body io.ReadCloser) {
				_, err := io.ReadFull(body, make([]byte, start))
				require.NoError(t, err)
				assert.NoError(t, body.Close())
			},
			want: split(11, 0, 1, 12), ok: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &settlement{}
			tt.read(t, newUsageBody(io.NopCloser(bytes.NewReader(stream)), streamType, s.settle))
			calls, got, ok := s.get()
			assert.Equal(t, 1, calls, "settle calls")
			assert.Equal(t, tt.ok, ok, "settle ok")
			assert.Equal(t, tt.want, got, "settled usage")
		})
	}

	t.Run("at a read that ends the body with its last bytes", func(t *testing.T) {
		s := &settlement{}
		body := newUsageBody(io.NopCloser(iotest.DataErrReader(bytes.NewReader(stream))), streamType, s.settle)
		buf := make([]byte, len(stream))
		n, err := io.ReadFull(body, buf)
		require.NoError(t, err)
		require.Equal(t, len(stream), n)
		calls, got, ok := s.get()
		assert.Equal(t, 1, calls, "settle calls before Close")
		assert.True(t, ok, "settle ok")
		assert.Equal(t, split(11, 0, 6, 17), got, "settled usage")
		n, err = body.Read(buf)
		assert.Zero(t, n, "Read after the end")
		assert.ErrorIs(t, err, io.EOF, "Read after the end")
		assert.NoError(t, body.Close())
		calls, _, _ = s.get()
		assert.Equal(t, 1, calls, "settle calls")
	})

	for _, tt := range []struct {
		name   string
		before int
		want   usageReport
		ok     bool
	}{
		{"on a read error after usage", start, split(11, 0, 1, 12), true},
		{"on a read error before usage", 10, usageReport{}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := &settlement{}
			src := io.MultiReader(bytes.NewReader(stream[:tt.before]), iotestErrReader{errReset})
			body := newUsageBody(io.NopCloser(src), streamType, s.settle)
			_, err := io.ReadAll(body)
			assert.ErrorIs(t, err, errReset, "ReadAll")
			assert.NoError(t, body.Close())
			calls, got, ok := s.get()
			assert.Equal(t, 1, calls, "settle calls")
			assert.Equal(t, tt.ok, ok, "settle ok")
			assert.Equal(t, tt.want, got, "settled usage")
		})
	}
}

// iotestErrReader fails every read with err.
type iotestErrReader struct{ err error }

func (r iotestErrReader) Read([]byte) (int, error) { return 0, r.err }

// TestUsageBodyConcurrentClose closes the body while another goroutine is
// blocked reading it, as net/http may: settle runs once, without a race.
func TestUsageBodyConcurrentClose(t *testing.T) {
	for range 50 {
		pr, pw := io.Pipe()
		s := &settlement{}
		body := newUsageBody(pr, streamType, s.settle)
		go func() {
			_, _ = pw.Write([]byte("data: {\"usage\":{\"total_tokens\":3}}\n\n"))
			_, _ = pw.Write([]byte("data: {}\n\n"))
		}()
		read := make(chan error)
		go func() {
			_, err := io.ReadAll(body)
			read <- err
		}()
		assert.NoError(t, body.Close())
		assert.ErrorIs(t, <-read, io.ErrClosedPipe, "ReadAll on a closed body")
		calls, got, ok := s.get()
		assert.Equal(t, 1, calls, "settle calls")
		if ok {
			assert.Equal(t, split(0, 0, 0, 3), got, "settled usage")
		}
		pw.Close()
	}
}

// TestUsageBodyPassesBytesAtOnce reads a stream whose writer blocks after
// its first bytes: Read must hand those bytes over without waiting for more.
func TestUsageBodyPassesBytesAtOnce(t *testing.T) {
	first := "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n"
	rest := "data: {\"choices\":[],\"usage\":{\"total_tokens\":7}}\n\ndata: [DONE]\n\n"
	pr, pw := io.Pipe()
	release := make(chan struct{})
	go func() {
		_, _ = pw.Write([]byte(first))
		<-release
		_, _ = pw.Write([]byte(rest))
		pw.Close()
	}()
	s := &settlement{}
	body := newUsageBody(pr, streamType, s.settle)
	buf := make([]byte, 4096)
	n, err := body.Read(buf)
	require.NoError(t, err)
	assert.Equal(t, first, string(buf[:n]), "first Read while the writer waits")
	calls, _, _ := s.get()
	assert.Zero(t, calls, "settle calls before the end")

	close(release)
	tail, err := io.ReadAll(body)
	require.NoError(t, err)
	assert.Equal(t, rest, string(tail), "the rest")
	calls, got, ok := s.get()
	assert.Equal(t, 1, calls, "settle calls")
	assert.True(t, ok, "settle ok")
	assert.Equal(t, split(0, 0, 0, 7), got, "settled usage")
}

// readLog is a body that records the size of each read asked of it.
type readLog struct {
	io.Reader
	asked []int
}

func (r *readLog) Read(p []byte) (int, error) {
	r.asked = append(r.asked, len(p))
	return r.Reader.Read(p)
}

func (r *readLog) Close() error { return nil }

// TestUsageBodyReadsNoMore checks that each Read of the wrapper is one Read
// of the body, of the caller's size: the wrapper reads nothing ahead.
func TestUsageBodyReadsNoMore(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "usage", "openai_chat_stream.sse"))
	require.NoError(t, err)
	src := &readLog{Reader: bytes.NewReader(data)}
	body := newUsageBody(src, streamType, func(usageReport, bool) {})
	var asked []int
	for size := 1; ; size = size%300 + 7 {
		asked = append(asked, size)
		if _, err := body.Read(make([]byte, size)); err != nil {
			break
		}
	}
	assert.Equal(t, asked, src.asked, "sizes of the body's reads")
}

func TestNewUsageBodyNil(t *testing.T) {
	src := io.NopCloser(strings.NewReader("{}"))
	assert.Equal(t, src, newUsageBody(src, jsonType, nil), "newUsageBody(body, type, nil)")

	s := &settlement{}
	body := newUsageBody(nil, jsonType, s.settle)
	n, err := body.Read(make([]byte, 8))
	assert.Equal(t, 0, n, "Read of a nil body")
	assert.ErrorIs(t, err, io.EOF, "Read of a nil body")
	assert.NoError(t, body.Close())
	calls, got, ok := s.get()
	assert.Equal(t, 1, calls, "settle calls")
	assert.False(t, ok, "settle ok")
	assert.Zero(t, got, "settled usage")
}

// rewindBody is a body that can be read again.
type rewindBody struct{ bytes.Reader }

func (r *rewindBody) Close() error { return nil }

// TestUsageBodyFootprint checks that the wrapper is one allocation, and its
// reads none. The scanners' state comes from a sync.Pool, which the race
// detector empties at random, so it runs without it (CI's footprint step).
func TestUsageBodyFootprint(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector empties sync.Pools at random")
	}
	for _, rec := range recordedUsage {
		t.Run(rec.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", "usage", rec.file))
			require.NoError(t, err)
			src := &rewindBody{}
			buf := make([]byte, 512)
			settle := func(usageReport, bool) {}
			h := http.Header{"Content-Type": {contentTypeOf(rec.file)}}
			got := testing.AllocsPerRun(50, func() {
				src.Reset(data)
				body := newUsageBodyOf(src, h, settle)
				for {
					if _, err := body.Read(buf); err != nil {
						break
					}
				}
				body.Close()
			})
			assert.Equal(t, 1.0, got, "allocations of newUsageBody and reading %s", rec.file)
		})
	}
}

// jsonAnswer returns an OpenAI chat answer of about n bytes.
func jsonAnswer(n int) []byte {
	head := `{"id":"chatcmpl-1","object":"chat.completion","created":1727346142,"model":"gpt-4o-2024-08-06",` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":"`
	tail := `","refusal":null},"logprobs":null,"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":14,"completion_tokens":437,"total_tokens":451,"completion_tokens_details":{"reasoning_tokens":0}},` +
		`"system_fingerprint":"fp_b40fb1c6fb"}`
	text := strings.Repeat(`The weather in \"San Francisco\" is mild.\n`, (n-len(head)-len(tail))/44+1)
	return []byte(head + text + tail)
}

func BenchmarkUsageBody(b *testing.B) {
	stream, err := os.ReadFile(filepath.Join("testdata", "usage", "openai_chat_stream.sse"))
	require.NoError(b, err)
	for _, bench := range []struct {
		name        string
		contentType string
		data        []byte
	}{
		{"json-overhead", jsonType, []byte(cannedBody)}, // BenchmarkOverhead's answer
		{"json-2KiB", jsonType, jsonAnswer(2 << 10)},
		{"sse-13KiB", streamType, stream},
	} {
		b.Run(bench.name, func(b *testing.B) {
			src := &rewindBody{}
			buf := make([]byte, 4096)
			settle := func(usageReport, bool) {}
			h := http.Header{"Content-Type": {bench.contentType}}
			b.SetBytes(int64(len(bench.data)))
			b.ReportAllocs()
			for b.Loop() {
				src.Reset(bench.data)
				body := newUsageBodyOf(src, h, settle)
				for {
					if _, err := body.Read(buf); err != nil {
						break
					}
				}
				body.Close()
			}
		})
	}
}

// fuzzUsage reads data through newUsageBody whole, a byte at a time and in
// reads of chunk bytes: each must pass the bytes through, settle once, settle
// a report that holds its invariants, and settle alike.
func fuzzUsage(t *testing.T, data []byte, contentType string, chunk uint8) {
	type result struct {
		u  usageReport
		ok bool
	}
	var first result
	for i, sizes := range [][]int{{max(len(data), 1)}, {1}, {int(chunk%64) + 1, int(chunk/64) + 1}} {
		passed, s := readUsage(t, data, contentType, sizes)
		if !bytes.Equal(passed, data) {
			t.Fatalf("newUsageBody(%q) passed %q", data, passed)
		}
		calls, u, ok := s.get()
		if calls != 1 {
			t.Fatalf("newUsageBody(%q) settled %d times, want 1", data, calls)
		}
		if err := checkReport(u, ok); err != "" {
			t.Fatalf("newUsageBody(%q) settled (%+v, %t): %s", data, u, ok, err)
		}
		if i == 0 {
			first = result{u, ok}
		} else if got := (result{u, ok}); got != first {
			t.Fatalf("newUsageBody(%q) in reads of %v settled %+v, want %+v as read whole", data, sizes, got, first)
		}
	}
}

// checkReport returns what is wrong with a settled report, or "": counts
// are never negative, the cached input is part of the input, and a report
// that is not ok is zero.
func checkReport(u usageReport, ok bool) string {
	switch {
	case u.input < 0 || u.cachedInput < 0 || u.output < 0 || u.total() < 0:
		return "a negative count"
	case u.cachedInput > u.input:
		return "more cached input than input"
	case !ok && u != usageReport{}:
		return "a report that is not ok is not zero"
	}
	return ""
}

// addUsageSeeds adds the recorded answers of one kind and the usage cases
// of one content type to f.
func addUsageSeeds(f *testing.F, ext, contentType string) {
	files, err := filepath.Glob(filepath.Join("testdata", "usage", "*"+ext))
	require.NoError(f, err)
	for _, name := range files {
		data, err := os.ReadFile(name)
		require.NoError(f, err)
		f.Add(data, uint8(len(data)))
	}
	for _, tt := range allUsageCases() {
		if tt.contentType == contentType {
			f.Add([]byte(tt.body), uint8(len(tt.body)))
		}
	}
}

func FuzzUsageJSON(f *testing.F) {
	addUsageSeeds(f, ".json", jsonType)
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		fuzzUsage(t, data, jsonType, chunk)
	})
}

func FuzzUsageSSE(f *testing.F) {
	addUsageSeeds(f, ".sse", streamType)
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		fuzzUsage(t, data, streamType, chunk)
	})
}

// settleFunc is a settler from a function.
type settleFunc func(u usageReport, ok bool)

func (f settleFunc) settle(u usageReport, ok bool, _ conversation) { f(u, ok) }

// newUsageBody wraps body, an answer of contentType, in a usageBody that
// tells settle, or returns body itself for a nil settle.
func newUsageBody(body io.ReadCloser, contentType string, settle func(u usageReport, ok bool)) io.ReadCloser {
	return newUsageBodyOf(body, http.Header{"Content-Type": {contentType}}, settle)
}

// newUsageBodyOf is newUsageBody for an answer with header h.
func newUsageBodyOf(body io.ReadCloser, h http.Header, settle func(u usageReport, ok bool)) io.ReadCloser {
	if settle == nil {
		return body
	}
	b := &usageBody{}
	b.start(body, h, settleFunc(settle))
	return b
}

// FuzzUsageOracle holds usageScanner, fed a valid JSON answer in pieces of
// any size, to encoding/json's reading of the same answer (usageOracle):
// the answer as encoding/json writes the value it decoded, whose objects
// repeat no key and whose members come in the order usageOracle reads
// them.
func FuzzUsageOracle(f *testing.F) {
	addUsageSeeds(f, ".json", jsonType)
	f.Add([]byte(`{"message":{"usage":{"input_tokens":3}},"response":{"usage":{"input_tokens":4}},"usage":{"output_tokens":1e2}}`), uint8(5))
	f.Add([]byte(strings.Repeat("[", maxTrackedDepth)+`{"usage":{"total_tokens":1}}`+strings.Repeat("]", maxTrackedDepth)), uint8(4))
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		if !json.Valid(data) {
			return
		}
		d := json.NewDecoder(bytes.NewReader(data))
		d.UseNumber()
		var v any
		require.NoError(t, d.Decode(&v))
		canon, want := jsonText(v), usageOracle(v)
		for _, n := range []int{len(canon) + 1, 1, int(chunk%64) + 1} {
			var s usageScanner
			for _, piece := range splitEvery(string(canon), n) {
				s.feed([]byte(piece))
			}
			if s.tally != want {
				t.Fatalf("%s in pieces of %d: tally %+v, want %+v as encoding/json reads it", canon, n, s.tally, want)
			}
		}
	})
}

// usageOracle reads the usage of a JSON answer as encoding/json decoded it
// into v (numbers as json.Number), each object's members in the order of
// their keys: the non-negative integer members (usageFieldOf) of a
// top-level "usage" or "usageMetadata" object, or of the "usage" object of
// a top-level "message" or "response" object, and the cached_tokens of
// its input details (isInputDetails); a top-level array's objects read as
// top-level objects, one after another.
func usageOracle(v any) usageTally {
	var t usageTally
	readUsage := func(u any) {
		m, _ := u.(map[string]any)
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if n, ok := nonNegative(m[k]); ok {
				t.set(usageFieldOf([]byte(k)), n)
			}
			if details, ok := m[k].(map[string]any); ok && isInputDetails([]byte(k)) {
				if n, ok := nonNegative(details["cached_tokens"]); ok {
					t.set(usageFieldCached, n)
				}
			}
		}
	}
	readTop := func(top any) {
		m, _ := top.(map[string]any)
		for _, k := range slices.Sorted(maps.Keys(m)) {
			switch k {
			case "usage", "usageMetadata":
				readUsage(m[k])
			case "message", "response":
				if holder, ok := m[k].(map[string]any); ok {
					readUsage(holder["usage"])
				}
			}
		}
	}
	if answers, ok := v.([]any); ok {
		for _, a := range answers {
			readTop(a)
		}
	}
	readTop(v)
	return t
}

// nonNegative returns v as a count when it is a non-negative integer,
// saturated at math.MaxInt64.
func nonNegative(v any) (int64, bool) {
	n, ok := v.(json.Number)
	if !ok || strings.Trim(string(n), "0123456789") != "" {
		return 0, false
	}
	if c, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return c, true
	}
	return math.MaxInt64, true
}

// TestUsageScanHoldsNoPointers holds the scanners' state free of pointers,
// as usageScan's doc says: the collector never scans it, and clearing it
// for the pool needs no write barrier.
func TestUsageScanHoldsNoPointers(t *testing.T) {
	assert.False(t, holdsPointers(reflect.TypeFor[usageScan]()), "usageScan holds a pointer")
}

// holdsPointers reports whether a value of type t holds a pointer the
// collector follows.
func holdsPointers(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Array:
		return t.Len() > 0 && holdsPointers(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if holdsPointers(t.Field(i).Type) {
				return true
			}
		}
		return false
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return false
	}
	return true
}

// Two free keys, then a paid key with a budget of $0.05 a day at $10 per
// million input tokens and $30 per million output: the free keys serve
// first, the paid key until its day's spend reaches the budget, then
// requests fail until the next calendar day, when it serves again.
func TestBudgetHoldsThePaidKeysSpend(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%t", stream), func(t *testing.T) {
			clock := newTestClock()
			sim := vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, Clock: clock.Now, OutputTokens: 60,
				Keys: []vendorsim.Key{{Secret: "sk-free-1", ID: "free-1"}, {Secret: "sk-free-2", ID: "free-2"}, {Secret: "sk-paid", ID: "paid"}}})
			t.Cleanup(sim.Close)
			budget := Budget{PerDay: 0.05}
			pool, err := New("openai", []Key{
				{Secret: "sk-free-1", ID: "free-1", Limits: Limits{RPD: 5}},
				{Secret: "sk-free-2", ID: "free-2", Limits: Limits{RPD: 5}},
				{Secret: "sk-paid", ID: "paid", Paid: true, Budget: budget},
			}, WithClock(clock.Now), WithCalendarDay(0, time.UTC), WithPrices(map[string]Price{"gpt-4o": {Input: 10, Output: 30}}))
			require.NoError(t, err)
			client := &http.Client{Transport: pool.Transport(nil)}
			body := `{"model":"gpt-4o","max_tokens":100,"messages":[{"role":"user","content":"` + strings.Repeat("hello ", 60) + `"}]}`
			if stream {
				body = strings.Replace(body, `"model"`, `"stream":true,"stream_options":{"include_usage":true},"model"`, 1)
			}
			send := func() (string, error) {
				resp, err := client.Post(sim.URL()+"/v1/chat/completions", "application/json", strings.NewReader(body))
				if err != nil {
					return "", err
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return resp.Header.Get("X-Sim-Key"), nil
			}
			served := map[string]int{}
			var na *NoAvailableKeyError
			for i := range 200 {
				_, err := send()
				if errors.As(err, &na) {
					break
				}
				require.NoError(t, err, "request %d", i)
				clock.Advance(time.Second)
			}
			require.NotNil(t, na, "the paid key's budget ran out")
			for _, ks := range sim.Stats() {
				served[ks.ID] = int(ks.Counts.Requests)
			}
			assert.Equal(t, 5, served["free-1"], "the free keys serve first")
			assert.Equal(t, 5, served["free-2"])
			assert.Positive(t, served["paid"], "then the paid key")
			midnight := time.Date(clock.Now().Year(), clock.Now().Month(), clock.Now().Day()+1, 0, 0, 0, 0, time.UTC)
			assert.Equal(t, midnight, na.RetryAt.UTC(), "back the next calendar day (the free keys' RPD slides, the budget's day does not)")

			var paid KeyStats
			for _, ks := range pool.Stats() {
				if ks.ID == "paid" {
					paid = ks
				}
			}
			// What one request spends: the sim counts a prompt as its
			// length / 4 tokens and answers 60 tokens; the pool estimates
			// the prompt as its bytes / 4 and reserves the 100 max_tokens.
			perRequest := float64(len(body)/4)*10/1e6 + 60*30/1e6
			assert.LessOrEqual(t, paid.Spent.PerDay, budget.PerDay, "never above the budget: each estimate covers what was spent")
			assert.GreaterOrEqual(t, paid.Spent.PerDay, budget.PerDay-2*perRequest-0.003, "the budget is used, not left idle: spent %.4f", paid.Spent.PerDay)
			assert.InDelta(t, float64(served["paid"])*perRequest, paid.Spent.PerDay, 1e-5,
				"what the vendor reported, input at its price and output at its own")
			assert.Equal(t, paid.Budget, budget)
			t.Logf("paid key: %d requests, spent $%.4f of $%.2f", served["paid"], paid.Spent.PerDay, budget.PerDay)

			clock.Advance(na.RetryAt.Sub(clock.Now()))
			_, err = send()
			require.NoError(t, err, "the next day the paid key serves again")
		})
	}
}

// budgetRun is one run of budgetUnderLoad: what the vendor billed, by its
// own usage reports, and what the pool recorded.
type budgetRun struct {
	billed   float64 // US dollars, from the answers' usage at the test's price
	answers  int
	maxOne   float64 // the dearest answer
	recorded float64 // the key's Spent.PerDay
	// mostAtOnce is the most requests the vendor had at once.
	mostAtOnce int
}

// budgetPrice is what the runs below price gpt-4o-mini at, in US dollars
// per million tokens.
var budgetPrice = Price{Input: 0.15, Output: 0.60}

// budgetUnderLoad sends requests from workers goroutines at once, each
// until the pool refuses it for a spent budget, to a vendor that writes
// output tokens per answer (or the request's max_tokens, when fewer),
// through a pool of one key with a day budget of $1.00 at price. A request
// refused while others are in flight, which may hold the budget, tries
// again once another has ended: as a client would, told to retry soon.
// body is the request.
func budgetUnderLoad(t *testing.T, workers int, output int64, price Price, body string) budgetRun {
	t.Helper()
	clock := newTestClock()
	sim := vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, Clock: clock.Now, OutputTokens: output,
		Keys: []vendorsim.Key{{Secret: "sk-paid", ID: "paid"}}})
	t.Cleanup(sim.Close)
	pool, err := New("openai", []Key{{Secret: "sk-paid", ID: "paid", Paid: true, Budget: Budget{PerDay: 1}}},
		WithClock(clock.Now), WithCalendarDay(0, time.UTC), WithPrices(map[string]Price{"gpt-4o-mini": price}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = pool.Close() })
	base := &http.Transport{MaxIdleConnsPerHost: workers}
	t.Cleanup(base.CloseIdleConnections)

	var (
		mu       sync.Mutex
		run      budgetRun
		inFlight int                   // requests the pool sent that have not ended
		ended    = make(chan struct{}) // closed, and made again, when one ends
	)
	sent := func() {
		mu.Lock()
		defer mu.Unlock()
		inFlight++
		run.mostAtOnce = max(run.mostAtOnce, inFlight)
	}
	current := func() (chan struct{}, int) {
		mu.Lock()
		defer mu.Unlock()
		return ended, inFlight
	}
	end := func(cost float64) {
		mu.Lock()
		defer mu.Unlock()
		run.billed += cost
		run.answers++
		run.maxOne = max(run.maxOne, cost)
		inFlight--
		close(ended)
		ended = make(chan struct{})
	}
	client := &http.Client{Transport: pool.Transport(roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent()
		return base.RoundTrip(r)
	}))}
	send := func() (again bool, err error) {
		wait, _ := current()
		resp, err := client.Post(sim.URL()+"/v1/chat/completions", "application/json", strings.NewReader(body))
		var na *NoAvailableKeyError
		if errors.As(err, &na) {
			if _, n := current(); n == 0 {
				return false, nil // refused with nothing in flight: the budget is spent
			}
			<-wait // requests in flight may hold the budget: try again once one has ended
			return true, nil
		}
		var own *refusal.Error
		if errors.As(err, &own) {
			return false, nil // the request itself cannot go: its bound costs more than the budget
		}
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		var answer struct {
			Usage struct {
				Prompt     int64 `json:"prompt_tokens"`
				Completion int64 `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
			return false, fmt.Errorf("status %d: %w", resp.StatusCode, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close() // settles, before the request counts as ended
		u := answer.Usage
		end((float64(u.Prompt)*price.Input + float64(u.Completion)*price.Output) / 1e6)
		return true, nil
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for range 10_000 { // a bound, never reached: the budget ends each loop first
				again, err := send()
				if err != nil {
					errs <- err
					return
				}
				if !again {
					return
				}
			}
			errs <- errors.New("a worker never saw the budget spent")
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for _, ks := range pool.Stats() {
		run.recorded = ks.Spent.PerDay
	}
	return run
}

// budgetBody is a chat request for gpt-4o-mini, with ", max_tokens" the
// text of extra when it is not empty.
func budgetBody(extra string) string {
	return `{"model":"gpt-4o-mini",` + extra + `"messages":[{"role":"user","content":"write a long story"}]}`
}

// A day budget of $1.00 holds under 150 requests at once: the pool
// reserves what each request can cost at most — its max_tokens, whatever
// its size, or, when it states none, all that is left of the budget — and
// counts what requests in flight reserve against what is left. Before, the
// pool reserved 1,024 output tokens for a request without max_tokens and
// at most 32,768 for any request: at gpt-4o's prices, 150 requests spent
// $3.98 and $3.00 of the $1.00.
//
// The bound (see Budget): spend passes the cap only by what answers report
// beyond their reserves. Here a request's input is estimated at its prompt
// text's bytes over four, and the sim counts the whole body's bytes over
// four; so each answer may pass its reserve by that difference, and an
// answer to a request without max_tokens, which runs alone, by what it
// cost beyond all that was left — at most one answer's cost.
func TestBudgetHoldsUnderConcurrentRequests(t *testing.T) {
	const workers = 150
	gpt4o := Price{Input: 2.50, Output: 10}
	cases := []struct {
		name      string
		price     Price
		extra     string
		output    int64 // what the vendor writes, when max_tokens allows
		unbounded bool  // nothing bounds the request's output
		refused   bool  // its bound costs more than the budget: never sent
	}{
		{"gpt-4o with MaxOutput 4096, no max_tokens, the vendor writes 4096", Price{Input: 2.50, Output: 10, MaxOutput: 4096}, "", 4096, false, false},
		{"gpt-4o, no max_tokens, the vendor writes 4096", gpt4o, "", 4096, true, false},
		{"gpt-4o, max_tokens 100000, the vendor writes all of it", gpt4o, `"max_tokens":100000,`, 100000, false, true},
		{"gpt-4o-mini, no max_tokens, the vendor writes 4096", budgetPrice, "", 4096, true, false},
		{"gpt-4o-mini, max_tokens 100000, the vendor writes 4096", budgetPrice, `"max_tokens":100000,`, 4096, false, false},
		{"gpt-4o-mini, max_tokens 100000, the vendor writes all of it", budgetPrice, `"max_tokens":100000,`, 100000, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body := budgetBody(c.extra)
			run := budgetUnderLoad(t, workers, c.output, c.price, body)
			// What each answer may count beyond its reserve's input: the
			// sim's prompt tokens less the pool's estimate, and a
			// millionth of a dollar of rounding.
			info := scanRequest([]byte(body), nil)
			estimated := DefaultEstimate(RequestInfo{PromptBytes: info.PromptBytes, Images: info.Images}) - defaultReservedOutput
			beyond := float64(max(int64(len(body))/4-estimated, 0))*c.price.Input/1e6 + 1e-6
			bound := float64(run.answers) * beyond
			if c.unbounded {
				bound += run.maxOne
			}
			t.Logf("%d answers billed $%.6f (recorded $%.6f); the bound allows $%.6f", run.answers, run.billed, run.recorded, 1+bound)
			assert.LessOrEqual(t, run.billed, 1+bound, "spend within the cap and the documented bound")
			assert.InDelta(t, run.billed, run.recorded, float64(run.answers)*1e-6+1e-9, "the pool recorded what the vendor billed")
			if c.refused {
				assert.Zero(t, run.answers, "a request that can cost more than the budget is never sent")
				return
			}
			if !c.unbounded {
				// (That one without a bound runs alone is storetest's
				// UnboundedTakesAllThatIsLeft: the test's own count of
				// what is in flight overlaps a settle.)
				assert.Greater(t, run.mostAtOnce, 1, "bounded requests run side by side")
			}
			reserve := float64(c.output)
			if c.extra != "" {
				reserve = 100_000
			}
			if c.unbounded {
				reserve = defaultReservedOutput
			}
			assert.Greater(t, run.billed, 1-2*reserve*c.price.Output/1e6, "and the budget was spent, not refused early")
		})
	}
}

// budgetPool returns a pool of one key with a day budget of $1.00 at
// price for gpt-4o, on a clock stopped at noon, and a client of it.
func budgetPool(t *testing.T, price Price) (*Pool, *http.Client, *testClock) {
	t.Helper()
	clock := newTestClock()
	pool, err := New("openai", []Key{{Secret: "sk-a", ID: "a", Budget: Budget{PerDay: 1}}},
		WithClock(clock.Now), WithCalendarDay(0, time.UTC), WithPrices(map[string]Price{"gpt-4o": price}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = pool.Close() })
	return pool, &http.Client{Transport: pool.Transport(nil)}, clock
}

// An answer counts no more than its request could have used: output within
// the request's bound (its max_tokens, or the model's MaxOutput), and
// input and output each within 2^24 tokens, however much the vendor
// reports — a broken report of billions of dollars spends what the request
// could have cost, not the month's budget.
func TestAnswerCountsAtMostWhatItsRequestCouldUse(t *testing.T) {
	cases := []struct {
		name    string
		price   Price
		request string
		usage   string
		want    int64 // millionths of a dollar
	}{
		{"within its bound", Price{Input: 1, Output: 2}, `"max_tokens":100`,
			`{"prompt_tokens":10,"completion_tokens":60}`, 10 + 60*2},
		{"output beyond max_tokens counts max_tokens", Price{Input: 1, Output: 2}, `"max_tokens":100`,
			`{"prompt_tokens":10,"completion_tokens":4096}`, 10 + 100*2},
		{"output beyond MaxOutput counts MaxOutput", Price{Input: 1, Output: 2, MaxOutput: 500}, ``,
			`{"prompt_tokens":10,"completion_tokens":4096}`, 10 + 500*2},
		{"billions of output tokens count max_tokens", Price{Input: 1, Output: 2}, `"max_tokens":100`,
			`{"prompt_tokens":10,"completion_tokens":9000000000000}`, 10 + 100*2},
		{"billions of input tokens count 2^24", Price{Input: 0.01, Output: 2}, `"max_tokens":100`,
			`{"prompt_tokens":9000000000000,"completion_tokens":1}`, 167773 + 2}, // 2^24 at a cent per million, rounded up
		{"negative counts are no report: the reserve stands", Price{Input: 1, Output: 2}, `"max_tokens":100`,
			`{"prompt_tokens":-5,"completion_tokens":-7}`, 2 + 100*2}, // "user" and "hi" are 2 tokens of input
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v, srv := newVendor(t)
			pool, client, _ := budgetPool(t, c.price)
			v.on("sk-a", answer{status: 200, header: map[string]string{"Content-Type": "application/json"},
				body: `{"usage":` + c.usage + `}`})
			body := `{"model":"gpt-4o",`
			if c.request != "" {
				body += c.request + ","
			}
			body += `"messages":[{"role":"user","content":"hi"}]}`
			resp, err := client.Post(srv.URL, "application/json", strings.NewReader(body))
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, resp.Body)
			require.NoError(t, resp.Body.Close())
			assert.InDelta(t, fromMicros(c.want), pool.Stats()[0].Spent.PerDay, 1e-9)
		})
	}
}

// A request refused because what requests in flight reserve fills the
// budget is told to retry a second later, not when the day ends; once they
// settle it goes through. Pool.Do names no max_tokens: without the model's
// MaxOutput, a call reserves all that is left of the budget.
func TestBudgetHeldByRequestsInFlightRetriesSoon(t *testing.T) {
	pool, _, clock := budgetPool(t, Price{Input: 1, Output: 2})
	err := pool.Do(t.Context(), "gpt-4o", func(ctx context.Context, _ Key) error {
		inner := pool.Do(ctx, "gpt-4o", func(context.Context, Key) error { return nil })
		var na *NoAvailableKeyError
		require.ErrorAs(t, inner, &na, "the first call reserves all that is left")
		assert.Equal(t, clock.Now().Add(reservedRetry), na.RetryAt, "retry when the first may have settled")
		Settle(ctx, 100, 100)
		return nil
	})
	require.NoError(t, err)
	assert.InDelta(t, 300e-6, pool.Stats()[0].Spent.PerDay, 1e-9, "the first spent what it used, and gave the rest back")
	require.NoError(t, pool.Do(t.Context(), "gpt-4o", func(context.Context, Key) error { return nil }))
}

// A request whose bound costs more than a whole budget of every key is
// the request's own fault, said at once, not a wait until a next day that
// never has room for it.
func TestRequestDearerThanAWholeBudgetIsRefused(t *testing.T) {
	v, srv := newVendor(t)
	_, client, _ := budgetPool(t, Price{Input: 2.5, Output: 10})
	_, err := client.Post(srv.URL, "application/json", strings.NewReader(`{"model":"gpt-4o","max_tokens":200000,"messages":[]}`))
	var own *refusal.Error
	require.ErrorAs(t, err, &own)
	assert.ErrorContains(t, err, `a request for model "gpt-4o" can cost up to $2.000000`)
	var na *NoAvailableKeyError
	assert.False(t, errors.As(err, &na), "not a wait")
	assert.Empty(t, v.received())
}

// A budget below a millionth of a dollar, the unit spend is counted in,
// would cap nothing: it is a mistake in the configuration, not "no cap".
func TestBudgetBelowTheCountingUnitIsAnError(t *testing.T) {
	prices := WithPrices(map[string]Price{"m": {Input: 1}})
	cases := []struct {
		name string
		keys []Key
		opts []Option
		want string
	}{
		{"a key's day", []Key{{Secret: "sk-a", Budget: Budget{PerDay: 4e-7}}}, []Option{prices}, "below a millionth of a dollar"},
		{"a key's month", []Key{{Secret: "sk-a", Budget: Budget{PerMonth: 1e-9}}}, []Option{prices}, "below a millionth of a dollar"},
		{"an account's", []Key{{Secret: "sk-a", Account: "org"}}, []Option{prices, WithAccountBudget("org", Budget{PerDay: 5e-7})}, "below a millionth of a dollar"},
		{"a negative MaxOutput", []Key{{Secret: "sk-a"}}, []Option{WithPrices(map[string]Price{"m": {MaxOutput: -1}})}, "negative MaxOutput"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := New("openai", c.keys, c.opts...)
			assert.ErrorContains(t, err, c.want)
		})
	}
	_, err := New("openai", []Key{{Secret: "sk-a", Budget: Budget{PerDay: 1e-6}}}, prices)
	assert.NoError(t, err, "a millionth of a dollar is a cap")
}

// ResetSpend gives a budget all its room again — an operator's answer to a
// report that was wrong, or to reservations left by a process that ended —
// for the key and its account; a store that cannot reset spend says so.
func TestResetSpendGivesTheBudgetItsRoomAgain(t *testing.T) {
	clock := newTestClock()
	pool, err := New("openai", []Key{{Secret: "sk-a", ID: "a", Account: "org", Budget: Budget{PerDay: 0.001}}},
		WithClock(clock.Now), WithPrices(map[string]Price{"m": {Input: 1, Output: 1, MaxOutput: 100}}),
		WithAccountBudget("org", Budget{PerDay: 0.001}))
	require.NoError(t, err)
	spendAll := func() error {
		return pool.Do(t.Context(), "m", func(ctx context.Context, _ Key) error {
			Settle(ctx, 900, 100)
			return nil
		})
	}
	require.NoError(t, spendAll())
	var na *NoAvailableKeyError
	require.ErrorAs(t, spendAll(), &na, "the day's $0.001 is spent")
	require.NoError(t, pool.ResetSpend(t.Context(), "a"))
	st := pool.Stats()[0]
	assert.Zero(t, st.Spent.PerDay)
	assert.Zero(t, st.AccountSpent.PerDay, "the account's spend too")
	assert.NoError(t, spendAll())
	assert.ErrorContains(t, pool.ResetSpend(t.Context(), "nope"), `no key with ID "nope"`)

	plain, err := New("openai", []Key{{Secret: "sk-a"}}, WithStore(struct{ Store }{NewMemoryStore()}))
	require.NoError(t, err)
	assert.ErrorContains(t, plain.ResetSpend(t.Context(), plain.keys[0].ID), "cannot reset spend")
}

// Unbench lifts what one answer set for a key of an account: the
// account's day, which the vendor stated spent, with the limit it stated.
func TestUnbenchLiftsAnAccountsStatedDay(t *testing.T) {
	clock := newTestClock()
	pool, err := New("openai", []Key{{Secret: "sk-a", ID: "a", Account: "org"}, {Secret: "sk-b", ID: "b", Account: "org"}},
		WithClock(clock.Now), WithAccountLimits("org", Limits{RPD: 1000}))
	require.NoError(t, err)
	require.NoError(t, pool.store.Learn(t.Context(), Stated{Provider: "openai", KeyID: "a", Account: "org", Model: "m",
		Limits: Limits{RPD: 1}, Used: Limits{RPM: -1, TPM: -1, RPD: 1, TPD: -1}, Now: clock.Now()}))
	call := func() error { return pool.Do(t.Context(), "m", func(context.Context, Key) error { return nil }) }
	var na *NoAvailableKeyError
	require.ErrorAs(t, call(), &na, "one answer said the account's day is spent")
	require.NoError(t, pool.Unbench(t.Context(), "a"))
	assert.NoError(t, call(), "lifted by the operator")
	assert.NoError(t, call(), "with the day limit it stated")
}

// NotifySettle hears what a request used once its answer's body is read,
// with the cost at the model's price, even when the pool counts neither
// tokens nor spend itself.
func TestNotifySettleHearsTheSettledUse(t *testing.T) {
	for _, tc := range []struct {
		name     string
		opts     []Option
		wantCost bool
	}{
		{"no limits, no price", nil, false},
		{"priced", []Option{WithPrices(map[string]Price{"gpt-4o-mini": {Input: 1, Output: 2}})}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newTestClock()
			route, _ := simRoute(t, "sim", clock, 100, "k1")
			pool, err := New("sim", []Key{{Secret: "k1", ID: "k1"}}, append(tc.opts, WithClock(clock.Now))...)
			require.NoError(t, err)
			route.Pool = pool
			fb, err := NewFallback([]Route{route}, WithClock(clock.Now))
			require.NoError(t, err)
			var got []Settlement
			req := chatRequest(t, "gpt-4o-mini")
			req = req.WithContext(NotifySettle(req.Context(), func(u Settlement) { got = append(got, u) }))
			resp, err := fb.RoundTrip(req)
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			require.Len(t, got, 1, "NotifySettle calls")
			assert.Equal(t, "sim", got[0].Provider)
			assert.Equal(t, "k1", got[0].KeyID)
			assert.Positive(t, got[0].Tokens, "tokens the answer reported")
			assert.Equal(t, tc.wantCost, got[0].Cost > 0, "cost %d", got[0].Cost)
		})
	}
}

// An answer that reports no usage — a stream without include_usage, a
// Pool.Do function that never calls Settle — is settled at its estimate:
// what it reserved of a budget is spent, not held as if the request were
// still in flight until the day ends, refusing the key's next requests a
// second at a time. Pool.Do names no max_tokens: its reserve is all that
// is left, and the next call would find nothing left all day.
func TestAnswerWithoutUsageSpendsItsReserve(t *testing.T) {
	pool, _, _ := budgetPool(t, Price{Input: 1, Output: 2})
	require.NoError(t, pool.Do(t.Context(), "gpt-4o", func(context.Context, Key) error { return nil }))
	assert.InDelta(t, 1024*2e-6, pool.Stats()[0].Spent.PerDay, 1e-9, "the estimate: 1,024 tokens of output at $2 a million")
	require.NoError(t, pool.Do(t.Context(), "gpt-4o", func(context.Context, Key) error { return nil }),
		"the first call's reserve of all that was left is no longer held")

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","choices":[]}`)
	}))
	t.Cleanup(srv.Close)
	pool, client, _ := budgetPool(t, Price{Input: 1, Output: 2})
	resp, err := client.Post(srv.URL, "application/json", strings.NewReader(`{"model":"gpt-4o","max_tokens":100,"messages":[{"role":"user","content":"12345678"}]}`))
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	assert.InDelta(t, (3*1+100*2)*1e-6, pool.Stats()[0].Spent.PerDay, 1e-9, "its reserve: 3 tokens of input (12 bytes of text), 100 of output")
}

// A request for n completions reserves n of them — each within its
// max_tokens and the model's MaxOutput — and its answer counts all the
// output the vendor reports for them, up to n times the bound.
func TestCompletionsReserveAndCountEach(t *testing.T) {
	price := Price{Input: 1, Output: 2, MaxOutput: 100}
	for _, tc := range []struct {
		info RequestInfo
		want int64
	}{
		{RequestInfo{MaxOutput: 100, Completions: 8}, 800 * 2},
		{RequestInfo{Completions: 8}, 800 * 2}, // no max_tokens: the model's MaxOutput, each
		{RequestInfo{MaxOutput: 50, Completions: 2}, 100 * 2},
		{RequestInfo{MaxOutput: 50}, 50 * 2},
	} {
		cost, unbounded := price.Reserve(tc.info, DefaultEstimate(tc.info))
		assert.False(t, unbounded)
		assert.Equal(t, tc.want, cost, "%+v", tc.info)
	}

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","usage":{"prompt_tokens":0,"completion_tokens":900,"total_tokens":900}}`)
	}))
	t.Cleanup(srv.Close)
	pool, client, _ := budgetPool(t, price)
	resp, err := client.Post(srv.URL, "application/json", strings.NewReader(`{"model":"gpt-4o","n":8,"max_tokens":100,"messages":[]}`))
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	assert.InDelta(t, 800*2e-6, pool.Stats()[0].Spent.PerDay, 1e-9, "the reported 900 counted at most 8 × 100")
}

// A request whose "n" comes after the part of its body the pool scans
// asks the vendor for n completions all the same: the answer's reported
// output for them counts whole, not clamped to one completion's bound as
// if the request had asked for one.
func TestCompletionsPastTheScannedBodyCountWhole(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","usage":{"prompt_tokens":0,"completion_tokens":800,"total_tokens":800}}`)
	}))
	t.Cleanup(srv.Close)
	pool, client, _ := budgetPool(t, Price{Output: 2, MaxOutput: 100})
	body := `{"model":"gpt-4o","messages":[{"role":"user","content":"` + strings.Repeat("x", maxBodyScan+10) + `"}],"n":8}`
	resp, err := client.Post(srv.URL, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	assert.InDelta(t, 800*2e-6, pool.Stats()[0].Spent.PerDay, 1e-9, "8 completions of 100 tokens, billed by the vendor, counted as one")
}
