package keypool

import (
	"bytes"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
)

// settler is told, once, the usage an answer's body reported: ok is false,
// and u zero, when it reported none.
type settler interface {
	settle(u usageReport, ok bool)
}

// start makes b read the body of a 2xx answer so that the usage the vendor
// reports is read as the caller reads the body. Read hands each byte to the
// caller as soon as body yields it: b never reads ahead, never buffers the
// body and never holds a byte back. b is meant to be embedded in a struct
// that is its own settler, so that reading an answer's usage costs one
// allocation; the scanners' state is borrowed from a pool while the body is
// read and given back when it settles.
//
// An answer whose Content-Type (in header h) is text/event-stream is read
// as server-sent events; any other as JSON. s.settle is called exactly once,
// with the usage the answer reported, at the first of: the end of the body,
// a read error, or Close. It reports the latest usage read so far, so a
// stream cut short settles what the vendor had reported by then; ok is
// false, and the report zero, when no usage was read — the pool then keeps
// its estimate.
//
// Read and Close may be called from different goroutines (net/http may close
// a body while another goroutine reads it); settle runs on the goroutine
// whose call settles, and never twice. A Close that comes while a Read is
// scanning what it read leaves the settle to that Read, which settles as
// soon as its scan ends, before it returns. A nil body settles at once and
// reads as empty.
func (b *usageBody) start(body io.ReadCloser, h http.Header, s settler) {
	// A lookup of the canonical name, as net/http gives it, spares
	// Header.Get's canonicalization.
	b.s, b.events = s, isEventStream(first(h, "Content-Type"))
	b.body = body
	if body == nil {
		b.body = http.NoBody
		b.finish()
		return
	}
	b.scan = scans.Get().(*usageScan)
}

// isEventStream reports whether a Content-Type is text/event-stream.
func isEventStream(contentType string) bool {
	if contentType == "" {
		return false
	}
	if c := contentType[0] | 0x20; c >= 'a' && c <= 'z' && c != 't' {
		// Most answers are JSON: a type that starts with a letter other
		// than t is refused without a look at the rest.
		return false
	}
	mediaType, _, _ := strings.Cut(contentType, ";")
	return strings.EqualFold(strings.TrimSpace(mediaType), "text/event-stream")
}

// usageScan is the scanners' state of one body: usage scans a JSON body;
// sse scans an event stream and feeds each event's data to usage. It holds
// no pointers (TestUsageScanHoldsNoPointers): the collector never scans it,
// and clearing it needs no write barrier.
type usageScan struct {
	usage usageScanner
	sse   sseScanner
}

// scans holds the scanners' states of bodies that have settled, zeroed, for
// the next bodies: a body costs no allocation for them.
var scans = sync.Pool{New: func() any { return new(usageScan) }}

// The states of a usageBody (see usageBody.state).
const (
	// bodyScanning: a Read is scanning what it read; it holds scan.
	bodyScanning uint32 = 1 << iota
	// bodySettling: a Close came while a Read was scanning; that Read
	// settles when its scan ends.
	bodySettling
	// bodySettled: settle has been called, or is being called, and scan
	// given back.
	bodySettled
)

// usageBody is an answer's body read for its usage; see start.
type usageBody struct {
	body   io.ReadCloser
	s      settler
	events bool // the body is server-sent events

	// scan is the scanners' state, borrowed from scans until the body
	// settles. Only the holder of the state's bodyScanning bit, or the call
	// that moves it to bodySettled from 0, touches it.
	scan *usageScan
	// state is 0 (no scan under way, not settled) or a set of the body
	// states above; once bodySettled, it stays so.
	state atomic.Uint32
}

// Read reads from the wrapped body and scans what it read for usage.
func (b *usageBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	if n > 0 && n <= len(p) && b.state.CompareAndSwap(0, bodyScanning) {
		if u := b.scan; b.events {
			u.sse.feed(p[:n], &u.usage)
		} else {
			u.usage.feed(p[:n])
		}
		if err != nil || !b.state.CompareAndSwap(bodyScanning, 0) {
			// The body ended with these bytes (as net/http's does when it
			// knows its length), or a Close came while this scan went
			// on: settle now. Holding bodyScanning, no other call
			// settles.
			b.state.Store(bodySettled)
			b.settle()
			return n, err
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

// finish calls settle unless it has been called, or leaves it to the Read
// that is scanning.
func (b *usageBody) finish() {
	for {
		switch st := b.state.Load(); {
		case st&(bodySettled|bodySettling) != 0:
			return
		case st&bodyScanning != 0:
			if b.state.CompareAndSwap(st, st|bodySettling) {
				return
			}
		case b.state.CompareAndSwap(st, bodySettled):
			b.settle()
			return
		}
	}
}

// settle tells the settler the usage read, and gives the scanners' state
// back. Only the call that moved the state to bodySettled calls it.
func (b *usageBody) settle() {
	var u usageReport
	var ok bool
	if b.scan != nil {
		u, ok = b.scan.usage.tally.report()
		*b.scan = usageScan{}
		scans.Put(b.scan)
		b.scan = nil
	}
	b.s.settle(u, ok)
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
// constant memory. Lines end with LF, CRLF or CR. It holds no locks, and
// no pointers: the scanners' state is cleared and pooled without the
// collector's write barriers.
type sseScanner struct {
	state sseState
	name  [4]byte // the first bytes of the field name
	// nameLen counts the field name's bytes, up to len(name)+1.
	nameLen int
	afterCR bool // the last line ended with CR: an LF now ends nothing
	// dataLines counts the event's data lines so far.
	dataLines int
}

// feed scans the next bytes of the stream, each event's data with usage.
func (s *sseScanner) feed(p []byte, usage *usageScanner) {
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
				usage.zero()
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
				s.startData(usage)
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
				usage.feed(p[:eol])
			}
			if eol == len(p) {
				return
			}
			s.endLine(p[eol])
			p = p[eol+1:]
		}
	}
}

// startData begins a data line of the current event, read by usage.
func (s *sseScanner) startData(usage *usageScanner) {
	if s.dataLines > 0 {
		usage.feed(lineFeed)
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
// alt=sse). Within that value it reads the integer members it knows, and the
// cached_tokens of OpenAI's prompt_tokens_details or input_tokens_details;
// it skips the rest of the text without storing it. It holds no locks.
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
	// details is set when the last key of the usage object names the
	// details of its input tokens; inDetails is the depth of that open
	// object, or 0.
	details   bool
	inDetails int
	// field is the usage member whose value comes next.
	field usageField
}

// zero readies s for a new JSON text; the tally is kept.
func (s *usageScanner) zero() {
	s.lex.zero()
	s.root, s.top, s.holderUsage, s.inUsage, s.field = 0, usageKeyOther, false, 0, usageFieldNone
	s.details, s.inDetails = false, 0
}

// feed scans the next piece of the text. It lexes the piece in its own
// loop, the lexer's depth and wantKey in the loop's variables, to the
// tokens jsonLexer reads (FuzzUsageFeed holds the two readings to one
// tally), and records each through open, close, key and number. The lexer
// itself reads only what the loop leaves to it: a token the piece cuts,
// which it holds until the next piece ends it, and a byte no JSON text
// holds there, on which the text breaks.
func (s *usageScanner) feed(p []byte) {
	l := &s.lex
	i := 0
	for i < len(p) && l.state != lexBetween {
		// The rest of a token the last piece cut, or a broken text.
		var tok jsonToken
		tok, i = l.next(p, i)
		switch tok {
		case tokKey:
			s.key(l.keyIn(p), l.depth)
		case tokNumber:
			s.number(l.num, l.numOK, l.depth)
		}
	}
	depth, wantKey := l.depth, l.wantKey
loop:
	for i < len(p) {
		c := p[i]
		switch {
		case c == '"':
			// Most strings are short and plain, and end in the piece:
			// they are read here, without a call.
			start := i + 1
			end := plainRun(p, start, min(len(p), start+shortString))
			if end == len(p) {
				break loop
			}
			if p[end] != '"' {
				var closed bool
				if end, closed, _ = stringEnd(p, end); !closed {
					break loop
				}
			}
			i = end + 1
			if wantKey {
				s.key(p[start:end], depth)
				wantKey = false
				if i < len(p) && p[i] == ':' {
					i++ // the colon that most keys are followed by
				}
			} else if i < len(p) && p[i] == ',' {
				wantKey = l.objects.objectAt(depth)
				i++ // the comma that most values are followed by
			}
		case c >= '0' && c <= '9' || c == '-':
			// Most numbers are small integers followed by a comma or a
			// closing bracket: they are read here, without a call.
			// readNumber reads on the rest — a sign, a fraction, an
			// exponent, a digit that may saturate, a number the piece cuts.
			end, n, ok := i, int64(0), true
			for end < len(p) && p[end] >= '0' && p[end] <= '9' && n < maxUnsaturated {
				n = n*10 + int64(p[end]-'0')
				end++
			}
			if end == len(p) || p[end] != ',' && p[end] != '}' && p[end] != ']' {
				end, n, ok = readNumber(p, end, n, true)
			}
			if end == len(p) {
				break loop // the number may go on in the next piece
			}
			s.number(n, ok, depth)
			i = end
			if p[i] == ',' {
				wantKey = l.objects.objectAt(depth)
				i++ // the comma that most values are followed by
			}
		case c == ',':
			wantKey = l.objects.objectAt(depth)
			i++
		case c == '{' || c == '[':
			depth++
			l.objects.open(depth, c == '{')
			wantKey = c == '{' && depth <= maxTrackedDepth
			s.open(depth, c == '{')
			i++
		case c == '}' || c == ']':
			if depth == 0 {
				break loop
			}
			s.close(depth)
			depth--
			wantKey = false
			i++
		case c == ':':
			wantKey = false
			i++
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c >= 'a' && c <= 'z':
			end := i + 1
			for end < len(p) && p[end] >= 'a' && p[end] <= 'z' {
				end++ // true, false or null: nothing the scanner reads
			}
			if end == len(p) {
				break loop // the literal may go on in the next piece
			}
			i = end
		default:
			break loop
		}
	}
	l.depth, l.wantKey = depth, wantKey
	if i < len(p) {
		// The token at i runs to the end of the piece, or the text breaks
		// at i: the lexer reads the rest of the piece, and reports no token
		// whole.
		l.next(p, i)
	}
}

// open records the beginning of the container at depth d, an object when
// object.
func (s *usageScanner) open(d int, object bool) {
	switch {
	case d == 1:
		s.root = 1
		if !object {
			s.root = 2
		}
		s.top = usageKeyOther
	case s.inUsage != 0:
		if object && d == s.inUsage+1 && s.details {
			s.inDetails = d
		}
	case object && d == s.root+1 && s.top == usageKeyUsage,
		object && d == s.root+2 && s.top == usageKeyHolder && s.holderUsage:
		s.inUsage = d
	case d == s.root:
		s.top = usageKeyOther
	case d == s.root+1:
		s.holderUsage = false
	}
}

// close records the end of the container at depth d.
func (s *usageScanner) close(d int) {
	switch d {
	case s.inDetails:
		s.inDetails, s.field = 0, usageFieldNone
	case s.inUsage:
		s.inUsage, s.details = 0, false
	}
}

// key records a key of the object at depth d, its raw bytes: a key longer
// than maxKeyLen, whole or nil as keyIn gives it, matches nothing key looks
// for.
func (s *usageScanner) key(key []byte, d int) {
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
}

// number records a number in the container at depth d: n when ok, else one
// that is no non-negative integer.
func (s *usageScanner) number(n int64, ok bool, d int) {
	if s.inUsage != 0 && (d == s.inUsage || d == s.inDetails) && ok {
		s.tally.set(s.field, n)
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

// isInputDetails reports whether a usage member holds the details of the
// input tokens, among them the cached ones: OpenAI chat's
// prompt_tokens_details, Responses' input_tokens_details.
func isInputDetails(key []byte) bool {
	switch string(key) {
	case "prompt_tokens_details", "input_tokens_details":
		return true
	}
	return false
}

// usageField is a usage member the tally keeps.
type usageField uint8

const (
	usageFieldNone usageField = iota
	// usageFieldTotal: the total the vendor states.
	usageFieldTotal
	// usageFieldInput: the input as the vendor counts it (Anthropic's
	// leaves its cache reads and writes out).
	usageFieldInput
	// usageFieldOutput: the output, Gemini's thoughts left out.
	usageFieldOutput
	// usageFieldCacheCreation: Anthropic's cache writes.
	usageFieldCacheCreation
	// usageFieldCacheRead: Anthropic's cache reads.
	usageFieldCacheRead
	// usageFieldCached: input read from a cache that the input count
	// already includes (OpenAI's cached_tokens, Gemini's
	// cachedContentTokenCount).
	usageFieldCached
	// usageFieldThoughts: Gemini's thinking output.
	usageFieldThoughts
	// usageFieldToolPrompt: Gemini's tool-use prompt input.
	usageFieldToolPrompt

	usageFields // the number of fields
)

// usageFieldOf maps a member of a usage object to the field it reports.
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
	case "cache_read_input_tokens":
		return usageFieldCacheRead
	case "cachedContentTokenCount":
		return usageFieldCached
	case "thoughtsTokenCount":
		return usageFieldThoughts
	case "toolUsePromptTokenCount":
		return usageFieldToolPrompt
	}
	return usageFieldNone
}

// settling are the fields whose report makes an answer's usage count: an
// answer that reports only cache or thinking figures settles nothing.
const settling = 1<<usageFieldTotal | 1<<usageFieldInput | 1<<usageFieldOutput | 1<<usageFieldCacheCreation

// usageTally is the usage an answer has reported so far. Each member
// reported replaces the last report of the same member, so cumulative
// counts (Anthropic's message_delta, Gemini's chunks) end at the last word.
type usageTally struct {
	value [usageFields]int64
	seen  uint16 // bit f set: field f was reported
}

// set records a report of field f.
func (t *usageTally) set(f usageField, n int64) {
	if f == usageFieldNone {
		return
	}
	t.value[f] = n
	t.seen |= 1 << f
}

// report returns the usage reported, and whether the answer reported any
// usage that settles. Every vendor's fields are read into one convention:
//
//   - input counts every input token, those read from a cache included:
//     OpenAI's prompt_tokens (chat) or input_tokens (Responses), which
//     already include the cached ones; Anthropic's input_tokens plus
//     cache_creation_input_tokens plus cache_read_input_tokens, since its
//     input_tokens counts only what follows the last cache breakpoint;
//     Gemini's promptTokenCount, which includes cachedContentTokenCount,
//     plus toolUsePromptTokenCount.
//   - cachedInput is the part of input read from a cache, billed lower:
//     OpenAI's prompt_tokens_details.cached_tokens (input_tokens_details in
//     Responses), Anthropic's cache_read_input_tokens, Gemini's
//     cachedContentTokenCount. It is never more than input, so input -
//     cachedInput is the uncached input; Anthropic's cache writes
//     (cache_creation_input_tokens) are uncached input.
//   - output counts every output token, reasoning included: OpenAI's
//     completion_tokens or output_tokens (which include reasoning_tokens),
//     Anthropic's output_tokens, Gemini's candidatesTokenCount plus
//     thoughtsTokenCount.
//   - limited, what settles the token windows as before the split: the
//     total the vendor states (OpenAI's total_tokens, Gemini's
//     totalTokenCount), else the vendor's input and output plus Anthropic's
//     cache writes — its cache reads left out, as its input-token limits
//     leave them out.
//
// Counts are non-negative and saturate at math.MaxInt64. A vendor that
// states only a total leaves the split zero; limited still holds it.
func (t *usageTally) report() (usageReport, bool) {
	if t.seen&settling == 0 {
		return usageReport{}, false
	}
	v := &t.value
	u := usageReport{
		input:  addTokens(addTokens(v[usageFieldInput], v[usageFieldCacheCreation]), addTokens(v[usageFieldCacheRead], v[usageFieldToolPrompt])),
		output: addTokens(v[usageFieldOutput], v[usageFieldThoughts]),
	}
	u.cachedInput = min(addTokens(v[usageFieldCacheRead], v[usageFieldCached]), u.input)
	u.hasLimited = true
	if t.seen&(1<<usageFieldTotal) != 0 {
		u.limited = v[usageFieldTotal]
	} else {
		u.limited = addTokens(addTokens(v[usageFieldInput], v[usageFieldOutput]), v[usageFieldCacheCreation])
	}
	return u, true
}

// addTokens returns a+b for non-negative token counts, saturated at
// math.MaxInt64.
func addTokens(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
