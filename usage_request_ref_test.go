package keypool

// refScanRequest reads body as scanRequest does, with its tokens from
// jsonLexer — the lexer every other reader of JSON uses, fed whole — rather
// than from scanRequest's own lexing: FuzzScanRequest holds the two to the
// same reading.
func refScanRequest(body []byte, in *names) RequestInfo {
	var s requestScanner
	var lex jsonLexer
	for i := 0; i < len(body); {
		var tok jsonToken
		tok, i = lex.next(body, i)
		switch tok {
		case tokBeginObject, tokBeginArray:
			s.open(tok == tokBeginObject)
		case tokEndObject, tokEndArray:
			s.depth--
			s.close(s.depth + 1)
		case tokKey:
			s.key(lex.keyIn(body))
		case tokNumber:
			s.number(lex.num, lex.numOK)
		case tokString:
			s.text(body[lex.start:lex.end], lex.done)
		}
		if s.depth != lex.depth || s.depth <= maxTrackedDepth && s.inObject() != lex.inObject() {
			panic("refScanRequest: the scanner's depth left the lexer's")
		}
	}
	return s.finish(in)
}
