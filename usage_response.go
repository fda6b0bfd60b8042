package keypool

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
)

// settler is told, once, the tokens an answer's body reported: ok is false,
// and tokens 0, when it reported none.
type settler interface {
	settle(tokens int64, ok bool)
}

// start makes b read the body of a 2xx answer so that the tokens the vendor
// reports are read as the caller reads the body. Read hands each byte to the
// caller as soon as body yields it: b never reads ahead, never buffers the
// body and never holds a byte back. b is meant to be embedded in a struct
// that is its own settler, so that reading an answer's usage costs one
// allocation.
//
// An answer whose contentType is text/event-stream is read as server-sent
// events; any other as JSON. s.settle is called exactly once, with the tokens
// the answer reported, at the first of: the end of the body, a read error, or
// Close. It reports the latest usage read so far, so a stream cut short
// settles what the vendor had reported by then; ok is false, and tokens 0,
// when no usage was read — the pool then keeps its estimate.
//
// Read and Close may be called from different goroutines (net/http may close
// a body while another goroutine reads it); settle runs on the goroutine
// whose call settles, and never twice. A nil body settles at once and reads
// as empty.
func (b *usageBody) start(body io.ReadCloser, contentType string, s settler) {
	b.s, b.events = s, isEventStream(contentType)
	b.sse.usage = &b.usage
	b.reported.Store(-1)
	b.body = body
	if body == nil {
		b.body = http.NoBody
		b.finish()
	}
}

// isEventStream reports whether a Content-Type is text/event-stream.
func isEventStream(contentType string) bool {
	mediaType, _, _ := strings.Cut(contentType, ";")
	return strings.EqualFold(strings.TrimSpace(mediaType), "text/event-stream")
}

// usageBody is an answer's body read for its usage; see start.
type usageBody struct {
	body   io.ReadCloser
	s      settler
	events bool // the body is server-sent events

	// usage scans a JSON body; sse scans an event stream and feeds each
	// event's data to usage. Only Read touches them, and io.Reader forbids
	// calling it concurrently.
	usage usageScanner
	sse   sseScanner

	// reported is the total of the usage read so far, or -1 before any;
	// Read stores it for Close to load from another goroutine.
	reported atomic.Int64
	// settled is set by the call that settles.
	settled atomic.Bool
}

// Read reads from the wrapped body and scans what it read for usage.
func (b *usageBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	if n > 0 && n <= len(p) && !b.settled.Load() {
		if b.events {
			b.sse.feed(p[:n])
		} else {
			b.usage.feed(p[:n])
		}
		if tokens, ok := b.usage.tally.tokens(); ok {
			b.reported.Store(tokens)
		}
	}
	if err != nil {
		b.finish()
	}
	return n, err
}

// Close settles, if nothing has yet, and closes the wrapped body.
func (b *usageBody) Close() error {
	b.finish()
	return b.body.Close()
}

// finish calls settle unless it has been called.
func (b *usageBody) finish() {
	if !b.settled.CompareAndSwap(false, true) {
		return
	}
	tokens := b.reported.Load()
	b.s.settle(max(tokens, 0), tokens >= 0)
}

// sseState is where in a server-sent event stream an sseScanner stands.
type sseState uint8

const (
	sseLineStart sseState = iota // at the start of a line
	sseName                      // in a field name
	sseSpace                     // after "data:", where one space may stand
	sseData                      // in the value of a data field
	sseSkip                      // in a line the scanner ignores
)

// lineFeed joins the data lines of one event, as the event-stream format
// joins them.
var lineFeed = []byte{'\n'}

// sseScanner reads usage from server-sent events. It never buffers a line:
// the value of each data field goes, as it arrives, to a streaming JSON
// usage scanner, reset at each event's end, so lines of any length take
// constant memory. Lines end with LF, CRLF or CR. It holds no locks.
type sseScanner struct {
	usage *usageScanner

	state sseState
	name  [4]byte // the first bytes of the field name
	// nameLen counts the field name's bytes, up to len(name)+1.
	nameLen int
	afterCR bool // the last line ended with CR: an LF now ends nothing
	// dataLines counts the event's data lines so far.
	dataLines int
}

// feed scans the next bytes of the stream.
func (s *sseScanner) feed(p []byte) {
	for len(p) > 0 {
		switch s.state {
		case sseLineStart:
			c := p[0]
			if c == '\n' && s.afterCR {
				s.afterCR = false
				p = p[1:]
				continue
			}
			s.afterCR = false
			if c == '\r' || c == '\n' {
				// A blank line ends the event.
				s.usage.zero()
				s.dataLines = 0
				s.endLine(c)
				p = p[1:]
				continue
			}
			s.state, s.nameLen = sseName, 0
		case sseName:
			i := 0
			for ; i < len(p) && p[i] != ':' && p[i] != '\r' && p[i] != '\n'; i++ {
				if s.nameLen < len(s.name) {
					s.name[s.nameLen] = p[i]
				}
				s.nameLen = min(s.nameLen+1, len(s.name)+1)
			}
			p = p[i:]
			if len(p) == 0 {
				return
			}
			isData := s.nameLen == len(s.name) && string(s.name[:]) == "data"
			if isData {
				s.startData()
			}
			if p[0] == ':' {
				s.state = sseSkip
				if isData {
					s.state = sseSpace
				}
				p = p[1:]
				continue
			}
			s.endLine(p[0]) // a field with no value
			p = p[1:]
		case sseSpace:
			s.state = sseData
			if p[0] == ' ' {
				p = p[1:]
			}
		default: // sseData, sseSkip
			eol := lineEnd(p)
			if s.state == sseData {
				s.usage.feed(p[:eol])
			}
			if eol == len(p) {
				return
			}
			s.endLine(p[eol])
			p = p[eol+1:]
		}
	}
}

// startData begins a data line of the current event.
func (s *sseScanner) startData() {
	if s.dataLines > 0 {
		s.usage.feed(lineFeed)
	}
	s.dataLines++
}

// endLine ends a line on its end byte c, CR or LF.
func (s *sseScanner) endLine(c byte) {
	s.state, s.afterCR = sseLineStart, c == '\r'
}

// lineEnd returns the offset of the first CR or LF in p, or len(p).
func lineEnd(p []byte) int {
	n := bytes.IndexByte(p, '\n')
	if n < 0 {
		n = len(p)
	}
	if r := bytes.IndexByte(p[:n], '\r'); r >= 0 {
		return r
	}
	return n
}

// usageKey is what a key of an answer's top-level object means to the
// usage scanner.
type usageKey uint8

const (
	usageKeyOther usageKey = iota
	// usageKeyUsage names the usage object: "usage", Gemini's
	// "usageMetadata".
	usageKeyUsage
	// usageKeyHolder names an object that holds a "usage": Anthropic's
	// message_start "message", OpenAI Responses' "response".
	usageKeyHolder
)

// usageScanner reads usage from a JSON text that arrives in pieces. It looks
// at the value of a top-level "usage" or "usageMetadata", or of a "usage"
// inside a top-level "message" or "response"; a top-level array's elements
// count as top-level objects (Gemini's streamGenerateContent without
// alt=sse). Within that value it reads the integer members it knows, and it
// skips the rest of the text without storing it. It holds no locks.
type usageScanner struct {
	lex   jsonLexer
	tally usageTally
	// root is the depth of the top-level objects: 1, or 2 in an array.
	root int
	// top is the meaning of the last key at depth root; holderUsage is set
	// when the last key at depth root+1, inside a holder, was "usage".
	top         usageKey
	holderUsage bool
	// inUsage is the depth of the open usage object, or 0.
	inUsage int
	// field is the usage member whose value comes next.
	field usageField
}

// reset readies s for a new JSON text; the tally is kept.
func (s *usageScanner) zero() {
	s.lex.zero()
	s.root, s.top, s.holderUsage, s.inUsage, s.field = 0, usageKeyOther, false, 0, usageFieldNone
}

// feed scans the next piece of the text.
func (s *usageScanner) feed(p []byte) {
	for i := 0; i < len(p); {
		var tok jsonToken
		tok, i = s.lex.next(p, i)
		s.take(tok)
	}
}

// take records one token of the text.
func (s *usageScanner) take(tok jsonToken) {
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
		case tok == tokBeginObject && d == s.root+1 && s.top == usageKeyUsage,
			tok == tokBeginObject && d == s.root+2 && s.top == usageKeyHolder && s.holderUsage:
			s.inUsage = d
		case d == s.root:
			s.top = usageKeyOther
		case d == s.root+1:
			s.holderUsage = false
		}
	case tokEndObject, tokEndArray:
		if d+1 == s.inUsage {
			s.inUsage = 0
		}
	case tokKey:
		key := s.lex.keyBytes()
		switch {
		case s.inUsage != 0:
			if d == s.inUsage {
				s.field = usageFieldOf(key)
			}
		case d == s.root:
			s.top = usageKeyOf(key)
		case d == s.root+1 && s.top == usageKeyHolder:
			s.holderUsage = string(key) == "usage"
		}
	case tokNumber:
		if s.inUsage != 0 && d == s.inUsage && s.lex.numOK {
			s.tally.set(s.field, s.lex.num)
		}
	}
}

// usageKeyOf says what a top-level key means.
func usageKeyOf(key []byte) usageKey {
	switch string(key) {
	case "usage", "usageMetadata":
		return usageKeyUsage
	case "message", "response":
		return usageKeyHolder
	}
	return usageKeyOther
}

// usageField is a usage member the tally keeps.
type usageField uint8

const (
	usageFieldNone usageField = iota
	usageFieldTotal
	usageFieldInput
	usageFieldOutput
	usageFieldCacheCreation
)

// usageFieldOf maps a usage member to the field it reports.
func usageFieldOf(key []byte) usageField {
	switch string(key) {
	case "total_tokens", "totalTokenCount":
		return usageFieldTotal
	case "prompt_tokens", "input_tokens", "promptTokenCount":
		return usageFieldInput
	case "completion_tokens", "output_tokens", "candidatesTokenCount":
		return usageFieldOutput
	case "cache_creation_input_tokens":
		return usageFieldCacheCreation
	}
	return usageFieldNone
}

// usageTally is the usage an answer has reported so far. Each member
// reported replaces the last report of the same member, so cumulative
// counts (Anthropic's message_delta, Gemini's chunks) end at the last word.
type usageTally struct {
	value [usageFieldCacheCreation + 1]int64
	seen  uint8 // bit f set: field f was reported
}

// set records a report of field f.
func (t *usageTally) set(f usageField, n int64) {
	if f == usageFieldNone {
		return
	}
	t.value[f] = n
	t.seen |= 1 << f
}

// tokens returns the answer's tokens, and whether it reported any usage:
// the total it states (OpenAI's total_tokens, Gemini's totalTokenCount,
// which counts thinking too), else input plus output plus Anthropic's
// cache_creation_input_tokens. Anthropic's cache reads are left out: they
// do not count against its input-token rate limits.
func (t *usageTally) tokens() (int64, bool) {
	if t.seen&(1<<usageFieldTotal) != 0 {
		return t.value[usageFieldTotal], true
	}
	sum := addTokens(t.value[usageFieldInput], t.value[usageFieldOutput])
	return addTokens(sum, t.value[usageFieldCacheCreation]), t.seen != 0
}
