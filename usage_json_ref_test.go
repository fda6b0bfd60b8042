package keypool

import "bytes"

// refLexer is jsonLexer with the next and string it had before they were
// made faster: a plainer reading of the same text, kept to hold the faster
// one to the same tokens (FuzzJSONLexer).
type refLexer struct{ jsonLexer }

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
			l.objects.open(l.depth, c == '{')
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
