package keypool

import "strings"

// refScanner is usageScanner with the take it had before its feed lexed
// each piece in its own loop: every token of jsonLexer, recorded by one
// switch over the token and the scanner's state — a plainer reading of the
// same text, kept to hold feed to the same tally (FuzzUsageFeed).
type refScanner struct{ usageScanner }

// feed scans p a token at a time.
func (s *refScanner) feed(p []byte) {
	for i := 0; i < len(p); {
		var tok jsonToken
		tok, i = s.lex.next(p, i)
		s.take(tok, p)
	}
}

// take records one token of the text, read from the piece p.
func (s *refScanner) take(tok jsonToken, p []byte) {
	d := s.lex.depth
	switch tok {
	case tokBeginObject, tokBeginArray:
		switch {
		case d == 1:
			s.root = 1
			if tok == tokBeginArray {
				s.root = 2
			}
			s.top = usageKeyOther
		case s.inUsage != 0:
			if tok == tokBeginObject && d == s.inUsage+1 && s.details {
				s.inDetails = d
			}
		case tok == tokBeginObject && d == s.root+1 && s.top == usageKeyUsage,
			tok == tokBeginObject && d == s.root+2 && s.top == usageKeyHolder && s.holderUsage:
			s.inUsage = d
		case d == s.root:
			s.top = usageKeyOther
		case d == s.root+1:
			s.holderUsage = false
		}
	case tokEndObject, tokEndArray:
		switch d + 1 {
		case s.inDetails:
			s.inDetails, s.field = 0, usageFieldNone
		case s.inUsage:
			s.inUsage, s.details = 0, false
		}
	case tokKey:
		key := s.lex.keyIn(p)
		switch {
		case s.inUsage != 0:
			switch d {
			case s.inUsage:
				s.field = usageFieldOf(key)
				s.details = isInputDetails(key)
			case s.inDetails:
				s.field = usageFieldNone
				if string(key) == "cached_tokens" {
					s.field = usageFieldCached
				}
			}
		case d == s.root:
			s.top = usageKeyOf(key)
		case d == s.root+1 && s.top == usageKeyHolder:
			s.holderUsage = string(key) == "usage"
		}
	case tokNumber:
		if s.inUsage != 0 && (d == s.inUsage || d == s.inDetails) && s.lex.numOK {
			s.tally.set(s.field, s.lex.num)
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
