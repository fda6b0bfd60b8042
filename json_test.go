package keypool

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
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

// tokenSource is a lexer under test: jsonLexer, or refLexer, the one it
// replaced.
type tokenSource interface {
	next(in []byte, i int) (jsonToken, int)
	view(in []byte, tok jsonToken) lexView
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
	return lexWith(&jsonLexer{}, chunks)
}

// lexWith runs l over chunks and renders its tokens as lexChunks does.
func lexWith(l tokenSource, chunks []string) []string {
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

// FuzzJSONLexer holds jsonLexer, fed in pieces of any size, to the tokens of
// refLexer, the plainer lexer it replaced, fed whole.
func FuzzJSONLexer(f *testing.F) {
	for _, seed := range []string{
		`{"a":1,"b":"x"}`, `["k",true,null,-2,3.5,1e3]`, `{"s":"a\"b\\"}`, `"\u00e9\n"`,
		`{"` + strings.Repeat("k", 40) + `":"` + strings.Repeat("v\\\"", 20) + `"}`,
		`]{"a":1}`, `{"a":1}#{"b":2}`, benchBody, cannedBody,
	} {
		f.Add([]byte(seed), uint8(3))
	}
	f.Fuzz(func(t *testing.T, data []byte, size uint8) {
		want := lexWith(&refLexer{}, []string{string(data)})
		for _, n := range []int{len(data) + 1, 1, int(size%32) + 1} {
			if got := lexWith(&jsonLexer{}, splitEvery(string(data), n)); !slices.Equal(got, want) {
				t.Fatalf("lex %q in pieces of %d = %q, want %q", data, n, got, want)
			}
		}
	})
}
