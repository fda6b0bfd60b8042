package keypool

import (
	"bytes"
	"encoding/json"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lexView is what a lexer exposes after a token: the key, the bounds of a
// string piece, and the number read.
type lexView struct {
	key        string
	start, end int
	done       bool
	num        int64
	numOK      bool
}

// view returns what l exposes after it read tok from in: the key only
// after a key, as the lexer's readers ask for it.
func (l *jsonLexer) view(in []byte, tok jsonToken) lexView {
	v := lexView{start: l.start, end: l.end, done: l.done, num: l.num, numOK: l.numOK}
	if tok == tokKey {
		v.key = string(l.keyIn(in))
	}
	return v
}

// lexChunks runs a jsonLexer over chunks, fed one after another, and renders
// its tokens; the pieces of a string value are joined into one.
func lexChunks(chunks []string) []string {
	var l jsonLexer
	var out []string
	var str []byte
	for _, chunk := range chunks {
		in := []byte(chunk)
		for i := 0; i < len(in); {
			var tok jsonToken
			tok, i = l.next(in, i)
			v := l.view(in, tok)
			switch tok {
			case tokBeginObject:
				out = append(out, "{")
			case tokEndObject:
				out = append(out, "}")
			case tokBeginArray:
				out = append(out, "[")
			case tokEndArray:
				out = append(out, "]")
			case tokKey:
				out = append(out, "key:"+v.key)
			case tokString:
				str = append(str, in[v.start:v.end]...)
				if v.done {
					out = append(out, "str:"+string(str))
					str = str[:0]
				}
			case tokNumber:
				if v.numOK {
					out = append(out, "num:"+strconv.FormatInt(v.num, 10))
				} else {
					out = append(out, "num:?")
				}
			case tokLiteral:
				out = append(out, "lit")
			}
		}
	}
	return out
}

// splitEvery cuts s into pieces of n bytes (the last may be shorter).
func splitEvery(s string, n int) []string {
	var out []string
	for len(s) > n {
		out = append(out, s[:n])
		s = s[n:]
	}
	return append(out, s)
}

func TestJSONLexer(t *testing.T) {
	deep := strings.Repeat("[", maxTrackedDepth) + `{"k":1}`
	deepWant := append(strings.Fields(strings.Repeat("[ ", maxTrackedDepth)), "{", "str:k", "num:1", "}")
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"object", `{"a":1,"b":"x"}`, []string{"{", "key:a", "num:1", "key:b", "str:x", "}"}},
		{"array of values", `["k",true,null,-2,3.5,1e3]`, []string{"[", "str:k", "lit", "lit", "num:?", "num:?", "num:?", "]"}},
		{"nested", `{"a":{"b":[{}]}}`, []string{"{", "key:a", "{", "key:b", "[", "{", "}", "]", "}", "}"}},
		{"whitespace", " {\n\t\"a\" : [ 1 , 2 ] }\r\n", []string{"{", "key:a", "[", "num:1", "num:2", "]", "}"}},
		{"escaped quote and backslash", `{"s":"a\"b\\"}`, []string{"{", "key:s", `str:a\"b\\`, "}"}},
		{"unicode escape kept raw", `"\u00e9\n"`, []string{`str:\u00e9\n`}},
		{"escaped key", `{"k\"y":1}`, []string{"{", `key:k\"y`, "num:1", "}"}},
		{"empty string and key", `{"":""}`, []string{"{", "key:", "str:", "}"}},
		{"key longer than kept", `{"` + strings.Repeat("k", maxKeyLen+1) + `":1}`, []string{"{", "key:", "num:1", "}"}},
		{"key as long as kept", `{"` + strings.Repeat("k", maxKeyLen) + `":1}`, []string{"{", "key:" + strings.Repeat("k", maxKeyLen), "num:1", "}"}},
		{"number saturates", `[99999999999999999999]`, []string{"[", "num:9223372036854775807", "]"}},
		{"numbers at the bound", `[9223372036854775799,9223372036854775807,9223372036854775809]`,
			[]string{"[", "num:9223372036854775799", "num:9223372036854775807", "num:9223372036854775807", "]"}},
		{"sequence of values", `{} [] "x"`, []string{"{", "}", "[", "]", "str:x"}},
		{"stops at a stray byte", `{"a":1}#{"b":2}`, []string{"{", "key:a", "num:1", "}"}},
		{"stops at an unmatched close", `]{"a":1}`, nil},
		{"unterminated string", `{"a":"xy`, []string{"{", "key:a"}},
		{"number without delimiter", `[12`, []string{"["}},
		{"string value after a key without colon", `{"a" "b"}`, []string{"{", "key:a", "str:b", "}"}},
		{"containers deeper than tracked read as arrays", deep, deepWant},
		{"long strings", `{"` + strings.Repeat("k", 40) + `":"` + strings.Repeat("v", 41) + `"}`,
			[]string{"{", "key:", "str:" + strings.Repeat("v", 41), "}"}},
		{"escapes past the first word", `["abcdefgh\"ijklmnopq\\rs\"","0123456789abcdef\"gh"]`,
			[]string{"[", `str:abcdefgh\"ijklmnopq\\rs\"`, `str:0123456789abcdef\"gh`, "]"}},
		{"quote at a word's end", `["1234567","12345678","123456789012345"]`,
			[]string{"[", "str:1234567", "str:12345678", "str:123456789012345", "]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, chunking := range []struct {
				name   string
				chunks []string
			}{
				{"whole", []string{tt.in}},
				{"bytes", splitEvery(tt.in, 1)},
				{"pairs", splitEvery(tt.in, 2)},
			} {
				assert.Equal(t, tt.want, lexChunks(chunking.chunks), "lex %s %q", chunking.name, tt.in)
			}
		})
	}
}

func TestJSONLexerStringPieces(t *testing.T) {
	var l jsonLexer
	var pieces []string
	var done []bool
	for _, chunk := range []string{`"ab`, `c\`, `"d`, `e"`} {
		in := []byte(chunk)
		for i := 0; i < len(in); {
			var tok jsonToken
			tok, i = l.next(in, i)
			if tok == tokString {
				pieces = append(pieces, string(in[l.start:l.end]))
				done = append(done, l.done)
			}
		}
	}
	assert.Equal(t, []string{"ab", `c\`, `"d`, "e"}, pieces, "string pieces")
	assert.Equal(t, []bool{false, false, false, true}, done, "string pieces done")
}

// FuzzJSONLexer holds jsonLexer, fed any text in pieces of any size, to
// its tokens of the text fed whole; and, on valid JSON, to the tokens of
// encoding/json's Decoder (decoderTokens), on the value it decoded written
// again by encoding/json, compact and indented.
func FuzzJSONLexer(f *testing.F) {
	for _, seed := range []string{
		`{"a":1,"b":"x"}`, `["k",true,null,-2,3.5,1e3]`, `{"s":"a\"b\\"}`, `"\u00e9\n"`,
		`{"` + strings.Repeat("k", 40) + `":"` + strings.Repeat("v\\\"", 20) + `"}`,
		`]{"a":1}`, `{"a":1}#{"b":2}`, `0`, `true`, benchBody, cannedBody,
		strings.Repeat(`{"a":[`, maxTrackedDepth/2) + `{"deep":{"k":1}}` + strings.Repeat("]}", maxTrackedDepth/2),
	} {
		f.Add([]byte(seed), uint8(3))
	}
	f.Fuzz(func(t *testing.T, data []byte, size uint8) {
		whole := lexChunks([]string{string(data)})
		for _, n := range []int{1, int(size%32) + 1} {
			if got := lexChunks(splitEvery(string(data), n)); !slices.Equal(got, whole) {
				t.Fatalf("lex %q in pieces of %d = %q, want %q as read whole", data, n, got, whole)
			}
		}
		if !json.Valid(data) {
			return
		}
		d := json.NewDecoder(bytes.NewReader(data))
		d.UseNumber()
		var v any
		require.NoError(t, d.Decode(&v))
		canon := jsonText(v)
		var indented bytes.Buffer
		require.NoError(t, json.Indent(&indented, canon, "", "\t"))
		for _, text := range [][]byte{canon, indented.Bytes()} {
			want := decoderTokens(t, text)
			for _, n := range []int{len(text) + 1, int(size%32) + 1} {
				if got := lexChunks(splitEvery(string(text), n)); !slices.Equal(got, want) {
					t.Fatalf("lex %s in pieces of %d = %q, want %q as encoding/json reads it", text, n, got, want)
				}
			}
		}
	})
}

// decoderTokens renders the tokens of text, valid JSON that encoding/json
// wrote (jsonText), as lexChunks renders jsonLexer's: strings and keys as
// text carries them (as jsonText writes them), a key longer than maxKeyLen
// as an empty one, a key of an object deeper than maxTrackedDepth as a
// string, a number as itself when a non-negative integer (saturated), and
// true, false and null alike; a number or a literal that is the whole
// text not at all, as the lexer waits for what may follow it.
func decoderTokens(t *testing.T, text []byte) []string {
	d := json.NewDecoder(bytes.NewReader(text))
	d.UseNumber()
	type open struct{ object, wantKey bool }
	var stack []open
	var out []string
	value := func() { // a value ended: an object's next string is a key
		if len(stack) > 0 && stack[len(stack)-1].object {
			stack[len(stack)-1].wantKey = true
		}
	}
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return out
		}
		require.NoError(t, err)
		switch tok := tok.(type) {
		case json.Delim:
			out = append(out, string(tok))
			if tok == '{' || tok == '[' {
				stack = append(stack, open{object: tok == '{', wantKey: tok == '{'})
				continue
			}
			stack = stack[:len(stack)-1]
			value()
		case string:
			raw := string(jsonRaw(tok))
			top := len(stack) - 1
			switch {
			case top < 0 || !stack[top].wantKey:
				out = append(out, "str:"+raw)
				value()
			case len(stack) > maxTrackedDepth:
				out = append(out, "str:"+raw)
				stack[top].wantKey = false
			case len(raw) > maxKeyLen:
				out = append(out, "key:")
				stack[top].wantKey = false
			default:
				out = append(out, "key:"+raw)
				stack[top].wantKey = false
			}
		case json.Number:
			if len(stack) == 0 {
				continue // a number that ends the text may go on: the lexer waits
			}
			if n, ok := nonNegative(tok); ok {
				out = append(out, "num:"+strconv.FormatInt(n, 10))
			} else {
				out = append(out, "num:?")
			}
			value()
		default: // true, false, null
			if len(stack) == 0 {
				continue // as a number
			}
			out = append(out, "lit")
			value()
		}
	}
}
