package keypool

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keypool-go/keypool/internal/refusal"
	"github.com/keypool-go/keypool/internal/windowspec"
)

// settler is told, once, the usage an answer's body reported — ok is false,
// and u zero, when it reported none — and the conversation its ID names (0
// for none; see usageScanner.named).
type settler interface {
	settle(u usageReport, ok bool, named conversation)
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
	body io.ReadCloser
	s    settler

	// scan is the scanners' state, borrowed from scans until the body
	// settles. Only the holder of the state's bodyScanning bit, or the call
	// that moves it to bodySettled from 0, touches it.
	scan *usageScan
	// state is 0 (no scan under way, not settled) or a set of the body
	// states above; once bodySettled, it stays so.
	state  atomic.Uint32
	events bool // the body is server-sent events
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
	var named conversation
	if b.scan != nil {
		u, ok = b.scan.usage.tally.report()
		named = b.scan.usage.named
		*b.scan = usageScan{}
		scans.Put(b.scan)
		b.scan = nil
	}
	b.s.settle(u, ok, named)
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
	// usageKeyID names the answer's "id" (see usageScanner.named).
	usageKeyID
)

// usageScanner reads usage from a JSON text that arrives in pieces. It looks
// at the value of a top-level "usage" or "usageMetadata", or of a "usage"
// inside a top-level "message" or "response"; a top-level array's elements
// count as top-level objects (Gemini's streamGenerateContent without
// alt=sse). Within that value it reads the integer members it knows, and the
// cached_tokens of OpenAI's prompt_tokens_details or input_tokens_details;
// it skips the rest of the text without storing it. When wantNamed, it also
// reads the ID of what the answer made (named). It holds no locks.
type usageScanner struct {
	lex   jsonLexer
	tally usageTally
	// wantNamed is set for an answer that may make what a later request
	// names (namesConversations); named is then the conversation of the
	// last such ID read, the answer's top-level "id" or its "response"'s
	// (a Responses stream's events), when it is an OpenAI response's
	// (resp_…) or conversation's (conv_…). Both are kept by zero, as the
	// tally is. An ID the pieces of the body cut is not read.
	wantNamed bool
	named     conversation
	// cut is set when the last string piece read did not close its
	// string: the next piece goes on from it.
	cut bool
	// root is the depth of the top-level objects: 1, or 2 in an array.
	root int
	// top is the meaning of the last key at depth root; holderUsage is set
	// when the last key at depth root+1, inside a holder, was "usage", and
	// holderID when it was "id".
	top         usageKey
	holderUsage bool
	holderID    bool
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
	s.root, s.top, s.holderUsage, s.holderID, s.inUsage, s.field = 0, usageKeyOther, false, false, 0, usageFieldNone
	s.details, s.inDetails, s.cut = false, 0, false
}

// feed scans the next piece of the text, a token at a time from jsonLexer,
// and records each through open, close, key and number. The lexer holds a
// token the piece cuts until the next piece ends it.
func (s *usageScanner) feed(p []byte) {
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
		case tokString:
			// A string is whole when its piece closes it and no piece of
			// it came before (cut unset) — one whose opening quote ended
			// the last input comes whole at 0 of this one.
			if s.wantNamed {
				if l.done && !s.cut {
					s.text(p[l.start:l.end], l.depth)
				}
				s.cut = !l.done
			}
		}
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
		s.holderUsage, s.holderID = false, false
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
		s.holderUsage, s.holderID = string(key) == "usage", string(key) == "id"
	}
}

// text records a whole string value in the container at depth d, raw: an
// answer's ID, when it names what a later request may name.
func (s *usageScanner) text(v []byte, d int) {
	if d == s.root && s.top == usageKeyID || d == s.root+1 && s.top == usageKeyHolder && s.holderID {
		if bytes.HasPrefix(v, []byte("resp_")) || bytes.HasPrefix(v, []byte("conv_")) {
			s.named = conversationOf(v)
		}
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
	case "id":
		return usageKeyID
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

// mulTokens returns a×b for non-negative a and b, saturated at
// math.MaxInt64.
func mulTokens(a, b int64) int64 {
	if a != 0 && b > math.MaxInt64/a {
		return math.MaxInt64
	}
	return a * b
}

// Price is what a model costs, in US dollars per million tokens, and the
// most it writes in one completion.
type Price struct {
	// Input prices input tokens; Output output tokens, reasoning included.
	Input, Output float64
	// CachedInput prices the input tokens a vendor reports it read from a
	// cache; zero prices them as Input.
	CachedInput float64
	// MaxOutput is the most output tokens, reasoning included, the model
	// writes in one completion (its vendor's maximum output); zero when
	// unknown. A budget reserves it for each completion of a request that
	// states no max_tokens, and never more than it for one that states
	// more (see Budget).
	MaxOutput int64
}

// Budget caps what a key (Key.Budget) or an account (WithAccountBudget)
// spends, in US dollars, per calendar day and per calendar month; a zero
// field is no cap, and a cap below a millionth of a dollar, the unit spend
// is counted in, is an error. Days follow the pool's calendar
// (WithCalendarDay, or midnight UTC), months start on the first day at the
// same hour in the same zone. In KeyStats a Budget also says what was
// spent today and this month, with what requests in flight reserve.
//
// A budget is a promise. Each request reserves what it can cost at most:
// its input as the pool estimates it (WithEstimator), and its output
// bound — its max_tokens (or max_completion_tokens, max_output_tokens,
// Gemini's maxOutputTokens), or the model's Price.MaxOutput when it states
// none, the smaller when both, for each completion it asks for (OpenAI's
// n, Gemini's candidateCount) — priced by WithPrices. The pool sends it
// only when that reserve fits what is left of each cap after what the
// requests in flight reserve, in one atomic step of the store; its answer
// then settles at what the vendor reported. A request with no output bound
// (no max_tokens, no MaxOutput) reserves all that is left, so nothing runs
// beside it; a request whose reserve is more than a whole cap is refused
// with an error. A request refused for what requests in flight reserve is
// told to retry a second later, when they may have settled; one refused
// for what was spent, when the day or the month ends.
//
// The bound: spend passes a cap only by what answers report beyond their
// requests' reserves, and only by the answers in flight when the cap
// filled. An answer never counts more output than its request's bound,
// nor more than 2^24 input or output tokens, so what
// passes a reserve is input beyond the estimate, or the cost of a request
// without a bound beyond all that was left: when one answer overruns, one
// request's difference between its reserve and what the vendor reported.
// A process that ends with requests in flight leaves their reserves
// counted as spent; Pool.ResetSpend lifts them.
type Budget struct {
	PerDay, PerMonth float64
}

func (b Budget) validate() error {
	if !(b.PerDay >= 0) || !(b.PerMonth >= 0) || math.IsInf(b.PerDay, 0) || math.IsInf(b.PerMonth, 0) {
		return fmt.Errorf("budget %+v: want finite, non-negative dollars", b)
	}
	for _, v := range []float64{b.PerDay, b.PerMonth} {
		if v != 0 && toMicros(v) == 0 {
			return fmt.Errorf("budget %+v: %g is below a millionth of a dollar, the unit spend is counted in, and would cap nothing (0 is no cap)", b, v)
		}
	}
	return nil
}

func (p Price) validate() error {
	for _, v := range []float64{p.Input, p.Output, p.CachedInput} {
		if !(v >= 0) || math.IsInf(v, 0) {
			return fmt.Errorf("price %+v: want finite, non-negative dollars per million tokens", p)
		}
	}
	if p.MaxOutput < 0 {
		return fmt.Errorf("price %+v: a negative MaxOutput", p)
	}
	return nil
}

// micros returns the budget in millionths of a dollar, the unit stores
// count spend in.
func (b Budget) micros() (day, month int64) { return toMicros(b.PerDay), toMicros(b.PerMonth) }

// toMicros returns dollars in millionths of a dollar, rounded down, within
// what a store counts exactly.
func toMicros(usd float64) int64 { return int64(min(math.Floor(usd*1e6), 1<<53)) }

// fromMicros returns millionths of a dollar in dollars.
func fromMicros(m int64) float64 { return float64(m) / 1e6 }

// usageReport is the tokens a vendor reported an answer used: input (all of
// it, cached included), the part of the input read from a cache, and output
// (reasoning included). The usage reader (usage_response.go) maps each
// vendor's fields to it.
type usageReport struct {
	input, cachedInput, output int64
	// limited, when hasLimited, is what the vendor's token rate limits
	// count where that is not input + output: the total the vendor states,
	// or Anthropic's input and output less its cache reads, which its
	// input-token limits do not count. The usage reader sets it.
	limited    int64
	hasLimited bool
}

// total returns the tokens the answer counts against the token windows:
// limited when set, else input + output.
func (u usageReport) total() int64 {
	if u.hasLimited {
		return max(u.limited, 0)
	}
	return addTokens(max(u.input, 0), max(u.output, 0))
}

// cost returns what u costs at price p, in millionths of a dollar, rounded
// up: a price in dollars per million tokens is millionths of a dollar per
// token.
func (p Price) cost(u usageReport) int64 {
	cached := min(max(u.cachedInput, 0), max(u.input, 0))
	cachedPrice := p.CachedInput
	if cachedPrice == 0 {
		cachedPrice = p.Input
	}
	c := float64(max(u.input, 0)-cached)*p.Input + float64(cached)*cachedPrice + float64(max(u.output, 0))*p.Output
	return int64(min(math.Ceil(c), 1<<53))
}

// maxAnswerTokens bounds the input and the output one answer counts,
// whatever the vendor reports: above every model's context window, so
// that no real answer is cut, and far below what a broken report may
// claim.
const maxAnswerTokens = 1 << 24

// outputBound returns the most output, in tokens, an answer to a request
// that states stated (its max_tokens and kin; 0: none) for each of its
// completions (0: one) can hold at price p (nil: none): stated, at most
// p's MaxOutput when known, for each; 0 when neither bounds it.
func (p *Price) outputBound(stated int64, completions int) int64 {
	each := max(stated, 0)
	if p != nil && p.MaxOutput > 0 && (stated <= 0 || stated > p.MaxOutput) {
		each = p.MaxOutput
	}
	return mulTokens(each, int64(max(completions, 1)))
}

// reserve returns what a request estimated at est, which states the output
// bound stated (0: none), reserves at p, in millionths of a dollar: the
// cost of its estimated input and of its output bound. When nothing bounds
// its output, it returns the cost of est and unbounded: a store then
// reserves all that is left (Claim.Unbounded).
func (p *Price) reserve(est usageReport, stated int64, completions int) (cost int64, unbounded bool) {
	bound := p.outputBound(stated, completions)
	if bound == 0 {
		return p.cost(est), true
	}
	return p.cost(usageReport{input: est.input, output: bound}), false
}

// clamp returns u within what its request could have used: output at
// most bound (the request's output bound, 0: none), input and output each
// at most maxAnswerTokens, cached input at most the input, and what the
// token limits count at most the two.
func (u usageReport) clamp(bound int64) usageReport {
	u.input = min(max(u.input, 0), maxAnswerTokens)
	u.output = min(max(u.output, 0), maxAnswerTokens)
	if bound > 0 {
		u.output = min(u.output, bound)
	}
	u.cachedInput = min(max(u.cachedInput, 0), u.input)
	u.limited = min(max(u.limited, 0), u.input+u.output)
	return u
}

// errNoPrice is the error of a request for a model without a price that
// only keys with a budget could take.
var errNoPrice = refusal.Errorf("has no price (WithPrices), and every key that could take it has a budget")

// tooDearError is the error of a request whose reserve is more than a whole
// cap of every key that could take it.
func tooDearError(provider, model string, reserve int64) error {
	return fmt.Errorf("keypool: %s: %w", provider, refusal.Errorf(
		"a request for model %q can cost up to $%.6f (its max_tokens, or the model's MaxOutput, at its price): more than a whole budget of every key that could take it",
		truncate(model, 64), fromMicros(reserve)))
}

// exceeds reports whether cost, in millionths of a dollar, is more than a
// whole cap of b.
func (b Budget) exceeds(cost int64) bool {
	day, month := b.micros()
	return (day > 0 && cost > day) || (month > 0 && cost > month)
}

// reservedRetry is how soon a request refused for what requests in flight
// reserve of a budget is told to try again: they settle as their answers
// end.
const reservedRetry = windowspec.ReservedRetry

// budgetDays returns the calendar budgets count by: the pool's calendar
// days, or midnight UTC when the pool's days slide.
func budgetDays(c calendar) calendar {
	if c.loc == nil {
		return calendar{loc: time.UTC}
	}
	return c
}

// spend counts what a key or an account spent, in millionths of a dollar,
// in the calendar day and month that hold its latest spend, and what
// requests in flight reserve of them. The zero spend has spent nothing.
type spend struct {
	day, month period
	// resets counts the resets of the spend (ResetSpend): a reservation
	// taken before the latest holds nothing since.
	resets uint32
}

// period is a calendar period, what was spent in it and what requests in
// flight reserve of it: [start, end), in Unix nanoseconds.
type period struct {
	start, end, spent, held int64
}

// roll starts the period that holds now once the current one has ended.
// A clock put back before the period began carries what it counts into
// the period that holds now: what was spent still counts.
func (p *period) roll(now int64, bounds func(int64) (int64, int64)) {
	switch {
	case now >= p.end:
		p.start, p.end = bounds(now)
		p.spent, p.held = 0, 0
	case now < p.start:
		p.start, p.end = bounds(now)
	}
}

// holds reports whether the period holds at.
func (p *period) holds(at int64) bool { return at >= p.start && at < p.end }

// room reports whether cost fits what is left of the day's and the month's
// caps (0: none) at now, after what requests in flight reserve. When it
// does not, it returns when it could: the end of the later period that is
// spent (spent); or, when only reservations fill them, a moment
// reservedRetry later, by which they may have settled.
func (s *spend) room(now, cost, dayCap, monthCap int64, c calendar) (ok bool, retryAt int64, spent bool) {
	s.day.roll(now, c.period)
	s.month.roll(now, c.month)
	ok = true
	for _, x := range [...]struct {
		p   *period
		cap int64
	}{{&s.day, dayCap}, {&s.month, monthCap}} {
		switch {
		case x.cap <= 0 || x.p.spent+x.p.held+cost <= x.cap:
		case x.p.spent+cost > x.cap:
			ok, spent, retryAt = false, true, max(retryAt, x.p.end)
		case !spent:
			ok, retryAt = false, now+int64(reservedRetry)
		}
	}
	return ok, retryAt, spent
}

// left returns what is left of the day's and the month's caps (0: none)
// after what was spent and what requests in flight reserve, the less of
// the two; room must have rolled the periods.
func (s *spend) left(dayCap, monthCap int64) int64 {
	left := int64(1 << 53)
	if dayCap > 0 {
		left = min(left, dayCap-s.day.spent-s.day.held)
	}
	if monthCap > 0 {
		left = min(left, monthCap-s.month.spent-s.month.held)
	}
	return max(left, 0)
}

// add counts cost (negative: gives it back) as spent at time at, in the
// periods that hold at, never below zero.
func (s *spend) add(at, cost int64) {
	for _, p := range []*period{&s.day, &s.month} {
		if at >= p.start && at < p.end {
			p.spent = max(p.spent+cost, 0)
		}
	}
}

// hold counts cost (negative: gives it back) as reserved at time at by a
// request in flight, in the periods that hold at, never below zero.
func (s *spend) hold(at, cost int64) {
	for _, p := range []*period{&s.day, &s.month} {
		if at >= p.start && at < p.end {
			p.held = max(p.held+cost, 0)
		}
	}
}

// reset forgets what was spent and what requests in flight reserve.
func (s *spend) reset() {
	s.day.spent, s.day.held, s.month.spent, s.month.held = 0, 0, 0, 0
	s.resets++
}

// spent returns what was spent, with what requests in flight reserve, in
// the day and the month that hold now.
func (s *spend) spent(now int64) (day, month int64) {
	if now < s.day.end && now >= s.day.start {
		day = s.day.spent + s.day.held
	}
	if now < s.month.end && now >= s.month.start {
		month = s.month.spent + s.month.held
	}
	return day, month
}

// usedKey is the context key of NotifySettle's function: a proxy that
// serves several clients — each with its own windows and budget, in the
// pool's Store — hears through it what each of their requests used.
type usedKey struct{}

// NotifySettle returns a copy of ctx under which a Pool's Transport (and so
// a Fallback) tells f what a request sent with it used, each time the pool
// settles it: at zero when a key refused it or its answer was not a
// success, and at what the vendor reported once a success's body is read
// (or closed) — with its Cost, unlike OnSettle, and whether or not the
// pool counts tokens itself. The last call counts; an answer that reports
// no usage is settled at the request's estimate and reserve, and f is not
// called for it. f runs on the goroutine that reads the body or sends the
// request, and must be quick; it never receives a secret. A nil f changes
// nothing.
func NotifySettle(ctx context.Context, f func(Settlement)) context.Context {
	if f == nil {
		return ctx
	}
	return context.WithValue(ctx, usedKey{}, f)
}

// usedOf returns the function NotifySettle put in ctx, or nil.
func usedOf(ctx context.Context) func(Settlement) {
	f, _ := ctx.Value(usedKey{}).(func(Settlement))
	return f
}

// Reserve returns what a request read as info, estimated at estimate
// tokens, can cost at most at price p, in millionths of a US dollar, as a
// Pool reserves it against a Budget: its estimated input and its output
// bound (info.MaxOutput, at most p.MaxOutput, or p.MaxOutput when it
// states none — for each of info.Completions). When nothing bounds its
// output it returns the cost of the estimate and unbounded, as a Claim's
// Unbounded says.
func (p Price) Reserve(info RequestInfo, estimate int64) (cost int64, unbounded bool) {
	return p.reserve(estimateUse(info, max(estimate, 0)), info.MaxOutput, info.Completions)
}
