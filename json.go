package keypool

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"math/bits"
)

// jsonToken is one step of JSON text as jsonLexer reports it.
type jsonToken uint8

const (
	// tokMore means the input is used up; the lexer waits for more.
	tokMore jsonToken = iota
	tokBeginObject
	tokEndObject
	tokBeginArray
	tokEndArray
	// tokKey is a complete object key; jsonLexer.keyIn returns it.
	tokKey
	// tokString is a piece of a string value: the raw bytes in[start:end]
	// of the last input, escapes not decoded. A string that spans inputs
	// comes in several pieces; done is set on the piece that closes it.
	tokString
	// tokNumber is a complete number; num holds it when numOK.
	tokNumber
	// tokLiteral is true, false or null.
	tokLiteral
)

// lexState is where in the JSON text a jsonLexer stands.
type lexState uint8

const (
	lexBetween lexState = iota // between tokens
	lexKey                     // inside an object key
	lexString                  // inside a string value
	lexNumber                  // inside a number
	lexLiteral                 // inside true, false or null
	lexBroken                  // after a byte no JSON text holds: the rest is ignored
)

// maxKeyLen is the longest key, in bytes, that jsonLexer keeps; longer
// keys match nothing the pool looks for.
const maxKeyLen = 32

// maxTrackedDepth is the deepest nesting, in containers, whose kind
// (object or array) jsonLexer remembers. Deeper containers are read as
// arrays: their keys come back as string values.
const maxTrackedDepth = 64

// jsonLexer splits JSON text into tokens. It keeps its whole state between
// calls, so the text may arrive in pieces of any size, and it allocates
// nothing. It is lenient: it does not validate, accepts a sequence of
// top-level values, and on a byte no JSON text holds it stops, ignoring the
// rest of the input until it is zeroed. The zero value is ready to use. It holds no
// locks and is not safe for concurrent use.
type jsonLexer struct {
	state lexState
	// depth counts the containers open.
	depth int
	// objects says which of the open containers are objects.
	objects containers
	// wantKey is set when the next string is an object key.
	wantKey bool
	// escaped is set inside a string when the last input ended on a
	// backslash.
	escaped bool

	key    [maxKeyLen]byte
	keyLen int // bytes of the current key; above maxKeyLen when cut
	// keyWhole is set when the last key was read whole from one input:
	// it is in[start:end] of that input, not copied into key
	// (BenchmarkUsageBody/sse-13KiB, a stream of short objects: 6%
	// faster than copying each key). Such a key holds no backslash: its
	// run ended at the closing quote, so it needs no unescaping.
	keyWhole bool

	num   int64 // the number read, saturated at math.MaxInt64
	numOK bool  // the number is a non-negative integer

	start, end int  // the bounds of a tokString piece, or of a key read whole, in the last input
	done       bool // the tokString piece closes its string
}

// zero readies l for a new JSON text.
func (l *jsonLexer) zero() { *l = jsonLexer{} }

// inObject reports whether the innermost open container is an object.
func (l *jsonLexer) inObject() bool { return l.objects.objectAt(l.depth) }

// containers records which open containers are objects: bit d-1 for the
// one at depth d, to maxTrackedDepth, as each reader of JSON here keeps
// them.
type containers uint64

// open records the container opened at depth d, an object when object.
func (c *containers) open(d int, object bool) {
	if d < 1 || d > maxTrackedDepth {
		return
	}
	if bit := containers(1) << (d - 1); object {
		*c |= bit
	} else {
		*c &^= bit
	}
}

// objectAt reports whether the container open at depth d is an object; a
// container deeper than maxTrackedDepth reads as an array.
func (c containers) objectAt(d int) bool {
	return d > 0 && d <= maxTrackedDepth && c&(1<<(d-1)) != 0
}

// keyIn returns the last key read, in being the input the lexer reported
// it from, or nil when it was longer than maxKeyLen: no key the package
// looks for is.
func (l *jsonLexer) keyIn(in []byte) []byte {
	switch {
	case l.keyWhole && l.end-l.start <= maxKeyLen:
		return in[l.start:l.end]
	case l.keyWhole || l.keyLen > maxKeyLen:
		return nil
	}
	return l.key[:l.keyLen]
}

// next reads in from offset i and returns the next token and the offset
// after it. It returns tokMore with len(in) when in holds no further token.
func (l *jsonLexer) next(in []byte, i int) (jsonToken, int) {
	if l.state != lexBetween {
		return l.resume(in, i)
	}
	for ; i < len(in); i++ {
		// Each token is read by the code its first byte dispatches to,
		// without passing through the state again.
		switch c := in[i]; c {
		case ' ', '\t', '\n', '\r':
		case '"':
			// Most strings are short and plain, and end in the input:
			// they are read here, where the loop holds the lexer's state,
			// without a call. The rest — an escape, a long string, one
			// the input cuts — go to stringFrom, which searches on from
			// where the run stopped (BenchmarkScanRequest: 6% faster
			// than from the string's start). Read here, strings make
			// BenchmarkScanRequest 10-17% faster and
			// BenchmarkUsageBody/sse-13KiB 19% than read by stringFrom.
			start := i + 1
			j := plainRun(in, start, min(len(in), start+shortString))
			if j < len(in) && in[j] == '"' {
				if l.wantKey {
					l.wantKey, l.keyWhole, l.start, l.end = false, true, start, j
					// The colon that most keys are followed by, and
					// below the comma that most values are, are read
					// with the string (BenchmarkScanRequest 5-8% and
					// BenchmarkUsageBody/sse-13KiB 6% faster than on
					// the next call).
					if j+1 < len(in) && in[j+1] == ':' {
						return tokKey, j + 2
					}
					return tokKey, j + 1
				}
				l.start, l.end, l.done = start, j, true
				if j+1 < len(in) && in[j+1] == ',' {
					l.wantKey = l.inObject()
					return tokString, j + 2
				}
				return tokString, j + 1
			}
			l.state, l.escaped = lexString, false
			if l.wantKey {
				l.state, l.keyLen, l.keyWhole = lexKey, 0, false
			}
			if start == len(in) {
				return tokMore, len(in)
			}
			return l.stringFrom(in, start, j)
		case ',':
			l.wantKey = l.inObject()
		case ':':
			l.wantKey = false
		case '{', '[':
			l.depth++
			l.objects.open(l.depth, c == '{')
			l.wantKey = l.inObject()
			if c == '{' {
				return tokBeginObject, i + 1
			}
			return tokBeginArray, i + 1
		case '}', ']':
			if l.depth == 0 {
				l.state = lexBroken
				return tokMore, len(in)
			}
			l.depth--
			l.wantKey = false
			if c == '}' {
				return tokEndObject, i + 1
			}
			return tokEndArray, i + 1
		case '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			// Most numbers are small counts — tokens, max_tokens — that
			// the input holds whole: they are read here, with the comma
			// after one, without a call (BenchmarkScanRequest and
			// BenchmarkUsageBody; see wholeNumber). The rest go to
			// number, from their first byte.
			if n, j, ok := wholeNumber(in, i); ok {
				l.num, l.numOK = n, true
				if in[j] == ',' {
					l.wantKey = l.inObject()
					return tokNumber, j + 1
				}
				return tokNumber, j
			}
			l.state, l.num, l.numOK = lexNumber, 0, true
			return l.number(in, i)
		case '-':
			l.state, l.num, l.numOK = lexNumber, 0, true
			return l.number(in, i)
		default:
			if c < 'a' || c > 'z' {
				l.state = lexBroken
				return tokMore, len(in)
			}
			l.state = lexLiteral
			return l.literal(in, i)
		}
	}
	return tokMore, i
}

// resume reads on from in[i:] the token the last input cut, or ignores in
// when the text broke.
func (l *jsonLexer) resume(in []byte, i int) (jsonToken, int) {
	switch {
	case i >= len(in):
		return tokMore, i
	case l.state == lexKey || l.state == lexString:
		return l.string(in, i)
	case l.state == lexNumber:
		return l.number(in, i)
	case l.state == lexLiteral:
		return l.literal(in, i)
	}
	return tokMore, len(in) // lexBroken
}

// literal reads the rest of true, false or null from in[i:]. It reports the
// literal at the first byte after it, which it leaves for the next call.
func (l *jsonLexer) literal(in []byte, i int) (jsonToken, int) {
	for ; i < len(in); i++ {
		if c := in[i]; c < 'a' || c > 'z' {
			l.state = lexBetween
			return tokLiteral, i
		}
	}
	return tokMore, i
}

// shortString is how many bytes of a string the lexer reads eight at a
// time (plainRun) before it searches for the closing quote with
// bytes.IndexByte: most keys and many values — ids, models, a stream's
// words — are shorter, and that loop over them costs less than the
// searches' calls (BenchmarkUsageBody: 64 bytes read a stream 14% faster
// than 16).
const shortString = 64

// string reads on the body of a key or a string value, which the last
// input cut, from in[i:], up to and including its closing quote.
func (l *jsonLexer) string(in []byte, i int) (jsonToken, int) {
	start := i
	if l.escaped {
		// The last input ended on a backslash: this byte is escaped.
		l.escaped = false
		i++
	}
	return l.stringFrom(in, start, i)
}

// stringFrom reads the body of a key or a string value that goes on at
// in[start:], up to and including its closing quote, searching for the
// quote from i: the bytes before i are plain.
func (l *jsonLexer) stringFrom(in []byte, start, i int) (jsonToken, int) {
	isKey := l.state == lexKey
	end, closed, escaped := closingQuoteOf(in, i)
	l.escaped = escaped
	i = end
	if closed {
		i++ // the closing quote
		l.state = lexBetween
	}
	if isKey {
		l.appendKey(in[start:end])
		l.keyWhole = false
		if !closed {
			return tokMore, i
		}
		l.wantKey = false
		return tokKey, i
	}
	l.start, l.end, l.done = start, end, closed
	return tokString, i
}

// closingQuoteOf finds the closing quote of the string whose body goes on
// at in[i:], i within in. It returns the quote's offset and true, or
// len(in) and false when in ends first — escaped when it ends on a
// backslash, whose escaped byte is the next input's first.
func closingQuoteOf(in []byte, i int) (end int, closed, escaped bool) {
	i = plainRun(in, i, min(len(in), i+shortString))
	switch {
	case i >= len(in):
		return len(in), false, false
	case in[i] == '"':
		return i, true, false
	}
	return stringEnd(in, i)
}

// The bytes plainRun looks for, in each of a word's bytes.
const (
	quotes      = 0x2222222222222222 // '"'
	backslashes = 0x5c5c5c5c5c5c5c5c // '\\'
	lowBits     = 0x0101010101010101
	highBits    = 0x8080808080808080
)

// plainRun returns the offset of the first quote or backslash in
// in[i:limit], or limit when there is none. It reads eight bytes at a time
// while eight remain (BenchmarkScanRequest/64KiB and
// BenchmarkUsageBody/sse-13KiB: 22% faster than a byte at a time). It is
// small enough to be inlined.
func plainRun(in []byte, i, limit int) int {
	for ; i+8 <= limit; i += 8 {
		if found := quoteOrBackslash(binary.LittleEndian.Uint64(in[i:])); found != 0 {
			return i + bits.TrailingZeros64(found)/8
		}
	}
	for i < limit && in[i] != '"' && in[i] != '\\' {
		i++
	}
	return i
}

// quoteOrBackslash returns w with the high bit set of its first byte that
// is a quote or a backslash (and perhaps of later ones), or 0 when none is.
func quoteOrBackslash(w uint64) uint64 {
	q, b := w^quotes, w^backslashes
	// A byte of q or b is zero where w holds a quote or a backslash; the
	// lowest byte flagged is exact.
	return ((q-lowBits)&^q | (b-lowBits)&^b) & highBits
}

// stringEnd finds the closing quote of a string in in[i:], stepping over
// escapes, with bytes.IndexByte. It returns the offset of the quote and
// true, or len(in) and false when in ends first (escaped when it ends on a
// backslash).
func stringEnd(in []byte, i int) (end int, closed, escaped bool) {
	for i < len(in) {
		q := bytes.IndexByte(in[i:], '"')
		if q < 0 {
			q = len(in)
		} else {
			q += i
		}
		// Step over the escapes before q; one may swallow the quote.
		for i < q {
			b := bytes.IndexByte(in[i:q], '\\')
			if b < 0 {
				i = q
				break
			}
			i += b + 2
		}
		if i > q {
			if i > len(in) {
				return len(in), false, true
			}
			continue
		}
		return q, q < len(in), false
	}
	return len(in), false, false
}

// appendKey adds b to the key being read.
func (l *jsonLexer) appendKey(b []byte) {
	if l.keyLen <= maxKeyLen {
		copy(l.key[l.keyLen:], b)
		l.keyLen += min(len(b), maxKeyLen+1)
	}
}

// wholeNumber reads the digits of a non-negative integer at in[i:], below
// maxUnsaturated, and reports it, with the offset of the byte after it,
// when that byte is in and ends a value as JSON has it (a comma, a closing
// bracket or white space): ok is false for anything else — a fraction, an
// exponent, a number the input cuts or one too long — which readNumber
// reads from i. It is small enough to be inlined.
func wholeNumber(in []byte, i int) (n int64, end int, ok bool) {
	for ; i < len(in) && in[i]-'0' <= 9 && n < maxUnsaturated; i++ {
		n = n*10 + int64(in[i]-'0')
	}
	if i < len(in) {
		switch in[i] {
		case ',', '}', ']', ' ', '\n', '\r', '\t':
			return n, i, true
		}
	}
	return 0, i, false
}

// maxUnsaturated is the largest number below which ten times it plus a
// digit is still an int64.
const maxUnsaturated = (math.MaxInt64 - 9) / 10

// number reads the rest of a number from in[i:]. It reports the number at
// the first byte after it, which it leaves for the next call.
func (l *jsonLexer) number(in []byte, i int) (jsonToken, int) {
	i, l.num, l.numOK = readNumber(in, i, l.num, l.numOK)
	if i == len(in) {
		return tokMore, i
	}
	l.state = lexBetween
	return tokNumber, i
}

// readNumber reads on a number from in[i:], having read n so far (ok: a
// non-negative integer so far; a number starts at 0, ok): its digits make
// n, saturated at math.MaxInt64, and a sign, a fraction's dot or an
// exponent's E makes it no non-negative integer. It returns the offset of
// the first byte after the number, or len(in) when in ends first.
func readNumber(in []byte, i int, n int64, ok bool) (end int, _ int64, _ bool) {
	for ; i < len(in); i++ {
		c := in[i]
		switch {
		case c >= '0' && c <= '9':
			// Below maxUnsaturated a digit needs no check against the
			// bound.
			if d := int64(c - '0'); n <= maxUnsaturated || n <= (math.MaxInt64-d)/10 {
				n = n*10 + d
			} else {
				n = math.MaxInt64
			}
		case c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E':
			ok = false
		default:
			return i, n, ok
		}
	}
	return len(in), n, ok
}

// maxEscape is the most bytes of JSON text one byte of a string takes:
// \u0007 is six for one, a surrogate pair twelve for four.
const maxEscape = 6

// jsonUnescape returns a JSON string's bytes between its quotes as a reader of
// the JSON reads them: "\u0067pt-4o" is gpt-4o to the vendor, and so to the
// pool. Bytes without a backslash — nearly every string — come back as
// they are, without a copy (TestScanRequestAllocs: no allocation for a
// request's keys); bytes that are no JSON string come back as
// they are too (the vendor refuses the request).
func jsonUnescape(raw []byte) []byte {
	if bytes.IndexByte(raw, '\\') < 0 {
		return raw
	}
	literal := make([]byte, 0, len(raw)+2)
	literal = append(append(append(literal, '"'), raw...), '"')
	var s string
	if json.Unmarshal(literal, &s) != nil {
		return raw
	}
	return []byte(s)
}
