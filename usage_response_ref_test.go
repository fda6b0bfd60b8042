package keypool

import "strings"

// refScanner is usageScanner fed a token at a time by jsonLexer — the
// lexer every other reader of JSON uses — rather than by feed's own
// lexing; what each token means is the scanner's own open, close, key and
// number for both. FuzzUsageFeed holds the two readings to one tally and
// one state carried on.
type refScanner struct{ usageScanner }

// feed scans p a token at a time.
func (s *refScanner) feed(p []byte) {
	l := &s.lex
	for i := 0; i < len(p); {
		var tok jsonToken
		tok, i = l.next(p, i)
		switch tok {
		case tokBeginObject, tokBeginArray:
			s.open(l.depth, tok == tokBeginObject)
		case tokEndObject, tokEndArray:
			s.close(l.depth + 1)
		case tokKey:
			s.key(l.keyIn(p), l.depth)
		case tokNumber:
			s.number(l.num, l.numOK, l.depth)
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
