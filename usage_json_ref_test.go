package keypool

import (
	"bytes"
	"math"
)

// refLexer is jsonLexer as it was before it was made faster: a plainer
// reading of the same text, kept to hold the faster one to the same tokens
// (FuzzJSONLexer).
type refLexer struct {
	state lexState
	// depth counts the containers open.
	depth int
	// objects has bit d-1 set when the container at depth d is an object.
	objects uint64
	// wantKey is set when the next string is an object key.
	wantKey bool
	// escaped is set inside a string when the last input ended on a
	// backslash.
	escaped bool

	key    [maxKeyLen]byte
	keyLen int // bytes of the current key; above maxKeyLen when cut

	num   int64 // the number read, saturated at math.MaxInt64
	numOK bool  // the number is a non-negative integer

	start, end int  // the bounds of a tokString piece in the last input
	done       bool // the tokString piece closes its string
}

// inObject reports whether the innermost open container is an object.
func (l *refLexer) inObject() bool {
	return l.depth > 0 && l.depth <= maxTrackedDepth && l.objects&(1<<(l.depth-1)) != 0
}

// keyBytes returns the last key read, or nil when it was longer than
// maxKeyLen.
func (l *refLexer) keyBytes() []byte {
	if l.keyLen > maxKeyLen {
		return nil
	}
	return l.key[:l.keyLen]
}

// next reads in from offset i and returns the next token and the offset
// after it. It returns tokMore with len(in) when in holds no further token.
func (l *refLexer) next(in []byte, i int) (jsonToken, int) {
	for i < len(in) {
		switch l.state {
		case lexBroken:
			return tokMore, len(in)
		case lexKey, lexString:
			return l.string(in, i)
		case lexNumber:
			return l.number(in, i)
		case lexLiteral:
			for ; i < len(in); i++ {
				if c := in[i]; c < 'a' || c > 'z' {
					l.state = lexBetween
					return tokLiteral, i
				}
			}
			return tokMore, i
		}
		c := in[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == ',':
			l.wantKey = l.inObject()
			i++
		case c == ':':
			l.wantKey = false
			i++
		case c == '{' || c == '[':
			l.depth++
			if l.depth <= maxTrackedDepth {
				bit := uint64(1) << (l.depth - 1)
				if c == '{' {
					l.objects |= bit
				} else {
					l.objects &^= bit
				}
			}
			l.wantKey = l.inObject()
			if c == '{' {
				return tokBeginObject, i + 1
			}
			return tokBeginArray, i + 1
		case c == '}' || c == ']':
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
		case c == '"':
			l.state, l.escaped = lexString, false
			if l.wantKey {
				l.state, l.keyLen = lexKey, 0
			}
			i++
		case c == '-' || c >= '0' && c <= '9':
			l.state, l.num, l.numOK = lexNumber, 0, true
		case c >= 'a' && c <= 'z':
			l.state = lexLiteral
		default:
			l.state = lexBroken
			return tokMore, len(in)
		}
	}
	return tokMore, i
}

// string reads the body of a key or a string value from in[i:], up to and
// including its closing quote.
func (l *refLexer) string(in []byte, i int) (jsonToken, int) {
	start, isKey := i, l.state == lexKey
	if l.escaped {
		// The last input ended on a backslash: this byte is escaped.
		l.escaped = false
		i++
	}
	closed := false
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
				l.escaped = true
				i = len(in)
			}
			continue
		}
		if q < len(in) {
			closed = true
		}
		break
	}
	end := i
	if closed {
		i++ // the closing quote
		l.state = lexBetween
	}
	if isKey {
		l.appendKey(in[start:end])
		if !closed {
			return tokMore, i
		}
		l.wantKey = false
		return tokKey, i
	}
	l.start, l.end, l.done = start, end, closed
	return tokString, i
}

// appendKey adds b to the key being read.
func (l *refLexer) appendKey(b []byte) {
	if l.keyLen <= maxKeyLen {
		copy(l.key[l.keyLen:], b)
		l.keyLen += min(len(b), maxKeyLen+1)
	}
}

// number reads the rest of a number from in[i:]. It reports the number at
// the first byte after it, which it leaves for the next call.
func (l *refLexer) number(in []byte, i int) (jsonToken, int) {
	for ; i < len(in); i++ {
		c := in[i]
		switch {
		case c >= '0' && c <= '9':
			d := int64(c - '0')
			if l.num > (math.MaxInt64-d)/10 {
				l.num = math.MaxInt64
			} else {
				l.num = l.num*10 + d
			}
		case c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E':
			l.numOK = false
		default:
			l.state = lexBetween
			return tokNumber, i
		}
	}
	return tokMore, i
}

func (l *refLexer) view() lexView {
	return lexView{string(l.keyBytes()), l.start, l.end, l.done, l.num, l.numOK}
}
