package keypool

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

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
				out = append(out, "key:"+string(l.keyBytes()))
			case tokString:
				str = append(str, in[l.start:l.end]...)
				if l.done {
					out = append(out, "str:"+string(str))
					str = str[:0]
				}
			case tokNumber:
				if l.numOK {
					out = append(out, "num:"+strconv.FormatInt(l.num, 10))
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
		{"sequence of values", `{} [] "x"`, []string{"{", "}", "[", "]", "str:x"}},
		{"stops at a stray byte", `{"a":1}#{"b":2}`, []string{"{", "key:a", "num:1", "}"}},
		{"stops at an unmatched close", `]{"a":1}`, nil},
		{"unterminated string", `{"a":"xy`, []string{"{", "key:a"}},
		{"number without delimiter", `[12`, []string{"["}},
		{"string value after a key without colon", `{"a" "b"}`, []string{"{", "key:a", "str:b", "}"}},
		{"containers deeper than tracked read as arrays", deep, deepWant},
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
