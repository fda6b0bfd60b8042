package keypool

import (
	"math"
	"slices"
	"time"

	"github.com/keypool-go/keypool/internal/windowspec"
)

// Windows count the requests and tokens a key has sent. They are pure
// arithmetic on times given as input: no locks, no clock, no goroutines. The
// store that owns them serializes access.
//
// A sliding window is conservative: it never admits more than its limit
// within any span of its length, and under saturating load it admits at
// least (n-1)/n of it, for n buckets: 98.7% of a minute (80 of 81), 96% of a day. It
// keeps n buckets of width span/(n-1), and counts a bucket until all of it
// has left the span, so what it counts always covers the last span in full.

// The shape of the windows, shared with every store that counts them.
const (
	minuteBuckets = windowspec.MinuteBuckets
	dayBuckets    = windowspec.DayBuckets
	minuteSpan    = windowspec.MinuteSpan
	daySpan       = windowspec.DaySpan
	minuteWidth   = int64(windowspec.MinuteWidth)
	dayWidth      = int64(windowspec.DayWidth)
)

// axis is one window's pair of limits: requests and tokens; 0 is no limit.
type axis struct{ requests, tokens int64 }

func (a axis) set() bool { return a.requests != 0 || a.tokens != 0 }

// sliding is the state of a sliding window of requests and tokens over the
// buckets a caller holds (buckets). Bucket i holds what was taken in
// [i*width, (i+1)*width) nanoseconds after the Unix epoch, in slot i mod n;
// the window at bucket head holds buckets head-n+1 through head. A bucket
// holds at most 2³²-1 requests and tokens: what would pass that is held at
// it, which no limit a vendor sets comes near in one bucket. The zero
// sliding is an empty window.
type sliding struct {
	head   int64
	sumReq int64
	sumTok int64
	// exact: the slots hold requests' exact times, not buckets (see
	// window_exact.go); head is then the base of their times.
	exact bool
}

// buckets are the slots of a sliding window: requests and tokens, of equal
// length.
type buckets struct {
	requests, tokens []uint32
}

// bucketOf returns the bucket, of width nanoseconds, that holds time t:
// t / width. The two widths the windows have are divided by as constants,
// which the compiler turns into a multiplication; a division of a variable
// costs several times as much, and a request makes a score of them.
func bucketOf(t, width int64) int64 {
	switch width {
	case minuteWidth:
		return t / minuteWidth
	case dayWidth:
		return t / dayWidth
	}
	return t / width
}

// slotOf returns the slot that holds bucket i in a window of n slots, i
// mod n, dividing by the two lengths the windows have as constants (see
// bucketOf).
func slotOf(i, n int64) int64 {
	switch n {
	case minuteBuckets:
		return i % minuteBuckets
	case dayBuckets:
		return i % dayBuckets
	}
	return i % n
}

// advance drops the buckets that have left the window by bucket c. A c
// before head keeps head: the window never moves back.
func (s *sliding) advance(b buckets, c int64) {
	n := int64(len(b.requests))
	if s.exact || c <= s.head {
		return
	}
	if c-s.head >= n {
		clear(b.requests)
		clear(b.tokens)
		*s = sliding{head: c}
		return
	}
	for i := s.head + 1; i <= c; i++ {
		slot := slotOf(i, n)
		s.sumReq -= int64(b.requests[slot])
		s.sumTok -= int64(b.tokens[slot])
		b.requests[slot], b.tokens[slot] = 0, 0
	}
	s.head = c
}

// shiftBack moves what the window holds m buckets earlier, as when the
// clock that dated it is put back: bucket i becomes bucket i-m. Moving by
// whole buckets no more than the clock moved keeps every take counted at
// least as long as it should be.
func (s *sliding) shiftBack(b buckets, m, width int64) {
	if s.exact {
		s.head -= m * width / nsPerMs // the entries' times move with their base
		return
	}
	m = min(m, s.head) // bucket indexes stay at or after the epoch
	if m <= 0 {
		return
	}
	n := int64(len(b.requests))
	if r := int((m%n + n) % n); r != 0 {
		// Slot i%n holds bucket i; bucket i-m goes to slot (i-m)%n: the
		// slots turn left by m.
		slices.Reverse(b.requests[:r])
		slices.Reverse(b.requests[r:])
		slices.Reverse(b.requests)
		slices.Reverse(b.tokens[:r])
		slices.Reverse(b.tokens[r:])
		slices.Reverse(b.tokens)
	}
	s.head -= m
}

// fits reports whether the window, less freedReq requests and freedTok
// tokens, has room under lim for one more request of tok tokens.
func (s *sliding) fits(lim axis, tok, freedReq, freedTok int64) bool {
	return (lim.requests == 0 || s.sumReq-freedReq+1 <= lim.requests) &&
		(lim.tokens == 0 || s.sumTok-freedTok+tok <= lim.tokens)
}

// room reports whether the window has room at now (Unix nanoseconds) for one
// more request of tok tokens under lim. When it has none it returns the
// earliest time, in Unix nanoseconds, at which the request would fit.
func (s *sliding) room(b buckets, now, width int64, lim axis, tok int64) (ok bool, retryAt int64) {
	s.use(b, exactFor(lim.requests, len(b.requests)), now, width)
	if s.exact {
		return s.roomExact(b, now, width, lim, tok)
	}
	n := int64(len(b.requests))
	s.advance(b, bucketOf(now, width))
	if s.fits(lim, tok, 0, 0) {
		return true, 0
	}
	var freedReq, freedTok int64
	for i := max(s.head-n+1, 0); i <= s.head; i++ {
		slot := slotOf(i, n)
		freedReq += int64(b.requests[slot])
		freedTok += int64(b.tokens[slot])
		if s.fits(lim, tok, freedReq, freedTok) {
			return false, (i + n) * width
		}
	}
	return false, (s.head + n) * width
}

// add changes what was taken at time at (Unix nanoseconds) by req requests
// and tok tokens, if that bucket is still in the window; a take is an add at
// now after room. It never takes a bucket below zero.
func (s *sliding) add(b buckets, at, width int64, req, tok int64) {
	if s.exact {
		s.addExact(b, at, width, req, tok)
		return
	}
	n := int64(len(b.requests))
	i := bucketOf(at, width)
	s.advance(b, i)
	if i > s.head || i <= s.head-n {
		return
	}
	slot := slotOf(i, n)
	r := min(max(int64(b.requests[slot])+req, 0), math.MaxUint32)
	t := min(max(int64(b.tokens[slot])+tok, 0), math.MaxUint32)
	s.sumReq += r - int64(b.requests[slot])
	s.sumTok += t - int64(b.tokens[slot])
	b.requests[slot], b.tokens[slot] = uint32(r), uint32(t)
}

// used returns the requests and tokens the window counts at now.
func (s *sliding) used(b buckets, now, width int64) (requests, tokens int64) {
	if s.exact {
		return s.usedExact(b, now, width)
	}
	n := int64(len(b.requests))
	c := bucketOf(now, width)
	if c-s.head >= n {
		return 0, 0
	}
	requests, tokens = s.sumReq, s.sumTok
	for i := s.head + 1; i <= c; i++ {
		slot := slotOf(i, n)
		requests -= int64(b.requests[slot])
		tokens -= int64(b.tokens[slot])
	}
	return requests, tokens
}

// fixed is a calendar window: it counts from start until end, then starts
// again from zero. The zero fixed has ended.
type fixed struct {
	start, end int64 // Unix nanoseconds
	requests   int64
	tokens     int64
}

// roll starts the period that holds now once the current one has ended. A
// clock that steps back stays in the current period.
func (f *fixed) roll(now int64, c calendar) {
	if now >= f.end {
		f.start, f.end = c.period(now)
		f.requests, f.tokens = 0, 0
	}
}

// room reports whether the period has room at now for one more request of tok
// tokens under lim; when it has none, it returns the period's end.
func (f *fixed) room(now int64, c calendar, lim axis, tok int64) (ok bool, retryAt int64) {
	f.roll(now, c)
	if (lim.requests != 0 && f.requests+1 > lim.requests) || (lim.tokens != 0 && f.tokens+tok > lim.tokens) {
		return false, f.end
	}
	return true, 0
}

// add changes what was taken at time at by req requests and tok tokens, if
// at falls in the current period.
func (f *fixed) add(at int64, req, tok int64) {
	if at < f.start || at >= f.end {
		return
	}
	f.requests = max(f.requests+req, 0)
	f.tokens = max(f.tokens+tok, 0)
}

// shiftBack carries what the period holds into the period that holds now,
// when the clock that dated it is put back before it began: what was taken
// then still counts.
func (f *fixed) shiftBack(now int64, c calendar) {
	if f.end != 0 && now < f.start {
		f.start, f.end = c.period(now)
	}
}

// used returns what the period counts at now.
func (f *fixed) used(now int64) (requests, tokens int64) {
	if now >= f.end {
		return 0, 0
	}
	return f.requests, f.tokens
}

// calendar says how day windows count: over the last 24 hours when loc is
// nil (the zero calendar), else by calendar days that start at hour o'clock
// in loc, as vendors that reset at midnight Pacific time count them.
type calendar struct {
	hour int
	loc  *time.Location
}

// period returns the calendar day that holds now, in Unix nanoseconds.
func (c calendar) period(now int64) (start, end int64) {
	s, e := windowspec.CalendarDay(time.Unix(0, now), c.hour, c.loc)
	return s.UnixNano(), e.UnixNano()
}

// month returns the calendar month that holds now, in Unix nanoseconds: it
// starts on the first day at the calendar's hour, in its zone.
func (c calendar) month(now int64) (start, end int64) {
	s, e := windowspec.CalendarMonth(time.Unix(0, now), c.hour, c.loc)
	return s.UnixNano(), e.UnixNano()
}

// windows is the window set of one key for one model, or of one key across
// its models: a sliding minute for RPM and TPM, and a day for RPD and TPD —
// sliding, or a calendar day when the pool counts days that way. The zero
// windows is empty.
type windows struct {
	minute, day          sliding
	minuteReq, minuteTok [minuteBuckets]uint32
	dayReq, dayTok       [dayBuckets]uint32
	cal                  fixed
}

func (w *windows) minuteBuckets() buckets { return buckets{w.minuteReq[:], w.minuteTok[:]} }
func (w *windows) dayBuckets() buckets    { return buckets{w.dayReq[:], w.dayTok[:]} }

// room reports whether the windows have room at now for one more request of
// tok tokens under lim. If not, it returns the earliest time they all will,
// and whether a day window is among the full ones.
func (w *windows) room(now int64, lim Limits, tok int64, c calendar) (ok bool, retryAt int64, dayFull bool) {
	ok = true
	if a := (axis{lim.RPM, lim.TPM}); a.set() {
		if fit, at := w.minute.room(w.minuteBuckets(), now, minuteWidth, a, tok); !fit {
			ok, retryAt = false, max(retryAt, at)
		}
	}
	if a := (axis{lim.RPD, lim.TPD}); a.set() {
		var fit bool
		var at int64
		if c.loc != nil {
			fit, at = w.cal.room(now, c, a, tok)
		} else {
			fit, at = w.day.room(w.dayBuckets(), now, dayWidth, a, tok)
		}
		if !fit {
			ok, retryAt, dayFull = false, max(retryAt, at), true
		}
	}
	return ok, retryAt, dayFull
}

// shiftBack moves what the windows hold d nanoseconds earlier, as when the
// clock that dated them is put back by d: by whole buckets, no more than d,
// so that nothing taken stops counting sooner than it should.
func (w *windows) shiftBack(d, now int64, c calendar) {
	w.minute.shiftBack(w.minuteBuckets(), d/minuteWidth, minuteWidth)
	w.day.shiftBack(w.dayBuckets(), d/dayWidth, dayWidth)
	w.cal.shiftBack(now, c)
}

// spans says which windows of a set a limit sets: the minute's (RPM or
// TPM) and the day's (RPD or TPD).
type spans uint8

const (
	spanMinute spans = 1 << iota
	spanDay
)

// spans returns the windows l sets.
func (l Limits) spans() spans {
	var s spans
	if l.RPM != 0 || l.TPM != 0 {
		s |= spanMinute
	}
	if l.RPD != 0 || l.TPD != 0 {
		s |= spanDay
	}
	return s
}

// add records req requests and tok tokens as taken at time at in the
// windows of s; negative counts give back what an earlier add recorded.
func (w *windows) add(at int64, s spans, req, tok int64, c calendar) {
	if s&spanMinute != 0 {
		w.minute.add(w.minuteBuckets(), at, minuteWidth, req, tok)
	}
	if s&spanDay != 0 {
		if c.loc != nil {
			w.cal.add(at, req, tok)
		} else {
			w.day.add(w.dayBuckets(), at, dayWidth, req, tok)
		}
	}
}

// raise makes each window count at least what a vendor counted in it (used;
// a negative field unknown), as of now: the difference counts as taken at a
// moment chosen so that it leaves a sliding window no sooner than
// minuteLeaves or dayLeaves (Unix nanoseconds; 0 is a whole window from
// now), and a calendar day at its end. A window that counts as much as the
// vendor already, as most do, is left as it is. Each window stays in its
// mode (exact times or buckets) until a take's limit says otherwise.
func (w *windows) raise(now int64, used Limits, minuteLeaves, dayLeaves int64, c calendar) {
	if used.RPM >= 0 || used.TPM >= 0 {
		b := w.minuteBuckets()
		w.minute.advance(b, bucketOf(now, minuteWidth))
		r, t := w.minute.used(b, now, minuteWidth)
		if req, tok := above(used.RPM, r), above(used.TPM, t); req > 0 || tok > 0 {
			at := w.minute.takenAt(now, minuteLeaves, minuteSpan, minuteWidth, minuteBuckets)
			w.minute.raiseAt(b, at, now, minuteWidth, req, tok)
		}
	}
	if used.RPD >= 0 || used.TPD >= 0 {
		if c.loc != nil {
			w.cal.roll(now, c)
			r, t := w.cal.used(now)
			w.cal.add(now, above(used.RPD, r), above(used.TPD, t))
			return
		}
		b := w.dayBuckets()
		w.day.advance(b, bucketOf(now, dayWidth))
		r, t := w.day.used(b, now, dayWidth)
		if req, tok := above(used.RPD, r), above(used.TPD, t); req > 0 || tok > 0 {
			at := w.day.takenAt(now, dayLeaves, daySpan, dayWidth, dayBuckets)
			w.day.raiseAt(b, at, now, dayWidth, req, tok)
		}
	}
}

// raiseAt counts req requests and tok tokens a vendor counted beyond the
// window as taken at at.
func (s *sliding) raiseAt(b buckets, at, now, width int64, req, tok int64) {
	if s.exact {
		s.raiseExact(b, at, now, width, req, tok)
		return
	}
	s.add(b, at, width, req, tok)
}

// above returns how far a vendor's count lies above the window's, or 0.
func above(vendor, window int64) int64 { return max(vendor-window, 0) }

// takenAt returns when to count a take so that it leaves the window no
// sooner than leaves (0: a whole span from now): a take counts until a span
// after its bucket (or, in exact mode, its millisecond), and the moment must
// lie in the window, no later than now.
func (s *sliding) takenAt(now, leaves int64, span time.Duration, width int64, n int) int64 {
	if leaves == 0 {
		return now
	}
	earliest := (bucketOf(now, width) - int64(n) + 2) * width // the oldest bucket that still counts a whole span
	if s.exact {
		earliest = now - int64(span) + nsPerMs
	}
	return min(max(leaves-int64(span), earliest), now)
}

// Usage is what a window set counts: requests and tokens in the last minute
// and in the last day (or the current calendar day).
type Usage struct {
	MinuteRequests, MinuteTokens int64
	DayRequests, DayTokens       int64
}

// usage returns what the windows count at now.
func (w *windows) usage(now int64, c calendar) Usage {
	var u Usage
	u.MinuteRequests, u.MinuteTokens = w.minute.used(w.minuteBuckets(), now, minuteWidth)
	if c.loc != nil {
		u.DayRequests, u.DayTokens = w.cal.used(now)
	} else {
		u.DayRequests, u.DayTokens = w.day.used(w.dayBuckets(), now, dayWidth)
	}
	return u
}

// A sliding window whose request limit is no more than its slots keeps the
// exact time of each request instead of buckets: only the latest limit
// requests can stand in the way of the next, so they fit. A bucket counts
// until all of it has left the span — up to a bucket's width longer than
// the request it holds, which leaves a key idle while the vendor has room —
// where an exact time counts for the span and no longer.
//
// In exact mode the window's slots hold entries: requests[i] is the time of
// a request in whole milliseconds after the window's base (head), plus one
// (0: the slot is free); tokens[i] its tokens. Times are rounded up to the
// millisecond, so a request never leaves sooner than it should. sumReq and
// sumTok count the entries still in the span.

const nsPerMs = int64(1_000_000)

// exactFor reports whether a window of n slots keeps exact times under a
// request limit of requests: a limit of at most n.
func exactFor(requests int64, n int) bool { return requests > 0 && requests <= int64(n) }

// ceilMs returns ns in whole milliseconds, rounded up.
func ceilMs(ns int64) int64 { return (ns + nsPerMs - 1) / nsPerMs }

// spanMs returns how long an exact window counts a request, in
// milliseconds: its span (its n-1 buckets) and the guard after it
// (windowspec.ExactGuard).
func spanMs(b buckets, width int64) int64 {
	return int64(len(b.requests)-1)*width/nsPerMs + int64(windowspec.ExactGuard/time.Millisecond)
}

// entryMs returns the time of the entry in slot i, in Unix milliseconds.
func (s *sliding) entryMs(b buckets, i int) int64 { return s.head + int64(b.requests[i]) - 1 }

// setMs stores a time, in Unix milliseconds, in slot i, moving the base
// first when the offset would not fit.
func (s *sliding) setMs(b buckets, i int, ms int64) {
	if ms-s.head+1 > math.MaxUint32/2 || ms < s.head {
		s.rebase(b, ms)
	}
	b.requests[i] = uint32(ms - s.head + 1)
}

// rebase moves the base of the entries so that ms fits with room to spare.
func (s *sliding) rebase(b buckets, ms int64) {
	base := ms - math.MaxUint32/4
	for i := range b.requests {
		if b.requests[i] != 0 {
			base = min(base, s.entryMs(b, i))
		}
	}
	for i := range b.requests {
		if b.requests[i] != 0 {
			b.requests[i] = uint32(s.entryMs(b, i) - base + 1)
		}
	}
	s.head = base
}

// prune frees the entries that have left the span by now (Unix
// milliseconds) and counts those left.
func (s *sliding) prune(b buckets, nowMs, span int64) {
	s.sumReq, s.sumTok = 0, 0
	for i := range b.requests {
		if b.requests[i] == 0 {
			continue
		}
		if s.entryMs(b, i)+span <= nowMs {
			b.requests[i], b.tokens[i] = 0, 0
			continue
		}
		s.sumReq++
		s.sumTok += int64(b.tokens[i])
	}
}

// entry is an exact window's request, as roomExact orders them.
type entry struct{ ms, tok int64 }

// roomExact is room for a window in exact mode.
func (s *sliding) roomExact(b buckets, now, width int64, lim axis, tok int64) (ok bool, retryAt int64) {
	span := spanMs(b, width)
	nowMs := now / nsPerMs
	s.prune(b, nowMs, span)
	if s.fits(lim, tok, 0, 0) {
		return true, 0
	}
	var buf [minuteBuckets]entry
	live := s.entries(b, buf[:0])
	var freedReq, freedTok int64
	for _, e := range live {
		freedReq++
		freedTok += e.tok
		if s.fits(lim, tok, freedReq, freedTok) {
			return false, (e.ms + span) * nsPerMs
		}
	}
	// Nothing the window holds is in the way: the request alone is over a
	// limit, which no wait mends; the window is clear a span after its last.
	last := nowMs
	if len(live) > 0 {
		last = live[len(live)-1].ms
	}
	return false, (last + span) * nsPerMs
}

// entries appends the window's entries to out, oldest first.
func (s *sliding) entries(b buckets, out []entry) []entry {
	for i := range b.requests {
		if b.requests[i] != 0 {
			out = append(out, entry{s.entryMs(b, i), int64(b.tokens[i])})
		}
	}
	slices.SortFunc(out, func(x, y entry) int { return int(x.ms - y.ms) })
	return out
}

// addExact is add for a window in exact mode: a take (req > 0) is a new
// entry at at; a settle (req 0) changes the tokens of the entry at at; a
// release (req < 0) frees it. What has left the span, or cannot be found,
// is left alone.
func (s *sliding) addExact(b buckets, at, width int64, req, tok int64) {
	span := spanMs(b, width)
	atMs := ceilMs(at)
	if req > 0 {
		for range req {
			s.insert(b, atMs, 0, span)
		}
		if i := s.find(b, atMs); i >= 0 {
			b.tokens[i] = uint32(min(max(int64(b.tokens[i])+tok, 0), math.MaxUint32))
		}
	} else if i := s.find(b, atMs); i >= 0 {
		if req < 0 {
			b.requests[i], b.tokens[i] = 0, 0
		} else {
			b.tokens[i] = uint32(min(max(int64(b.tokens[i])+tok, 0), math.MaxUint32))
		}
	}
	// at is no later than now: pruning at it (rounded down) frees no entry
	// that still counts.
	s.prune(b, at/nsPerMs, span)
}

// find returns the slot of an entry at ms, or -1.
func (s *sliding) find(b buckets, ms int64) int {
	for i := range b.requests {
		if b.requests[i] != 0 && s.entryMs(b, i) == ms {
			return i
		}
	}
	return -1
}

// insert adds an entry at ms with tok tokens, in the first free slot. With
// every slot taken, the oldest entry gives way: one that has left the span
// by ms simply goes; one still in it — a vendor's count raised past the
// window's slots — gives its tokens to the latest entry, which counts them
// longer than they should, never shorter.
func (s *sliding) insert(b buckets, ms, tok, span int64) {
	free, oldest := -1, -1
	for i := range b.requests {
		if b.requests[i] == 0 {
			free = i
			break
		}
		if oldest < 0 || s.entryMs(b, i) < s.entryMs(b, oldest) {
			oldest = i
		}
	}
	if free < 0 {
		carried := int64(b.tokens[oldest])
		if s.entryMs(b, oldest)+span <= ms {
			carried = 0
		}
		b.requests[oldest], b.tokens[oldest] = 0, 0
		free = oldest
		if j := s.latest(b); j >= 0 && s.entryMs(b, j) >= ms {
			b.tokens[j] = uint32(min(int64(b.tokens[j])+carried, math.MaxUint32))
		} else {
			tok += carried
		}
	}
	s.setMs(b, free, ms)
	b.tokens[free] = uint32(min(max(tok, 0), math.MaxUint32))
}

// latest returns the slot of the latest entry, or -1.
func (s *sliding) latest(b buckets) int {
	j := -1
	for i := range b.requests {
		if b.requests[i] != 0 && (j < 0 || s.entryMs(b, i) > s.entryMs(b, j)) {
			j = i
		}
	}
	return j
}

// usedExact is used for a window in exact mode.
func (s *sliding) usedExact(b buckets, now, width int64) (requests, tokens int64) {
	span, nowMs := spanMs(b, width), now/nsPerMs
	for i := range b.requests {
		if b.requests[i] != 0 && s.entryMs(b, i)+span > nowMs {
			requests++
			tokens += int64(b.tokens[i])
		}
	}
	return requests, tokens
}

// use puts the window in exact mode or in bucket mode, as its limit asks,
// converting what it holds. From buckets, each bucket's requests become
// entries at the bucket's last millisecond, or now for the bucket that holds
// now — they count no shorter than they did — its tokens on the last of
// them; from entries, each goes to its bucket.
func (s *sliding) use(b buckets, exact bool, now, width int64) {
	if s.exact == exact {
		return
	}
	n := int64(len(b.requests))
	span := spanMs(b, width)
	if exact {
		s.advance(b, bucketOf(now, width))
		head := s.head
		var req, tok [minuteBuckets]uint32
		copy(req[:], b.requests)
		copy(tok[:], b.tokens)
		clear(b.requests)
		clear(b.tokens)
		*s = sliding{exact: true, head: ceilMs(now) - math.MaxUint32/4}
		for i := max(head-n+1, 0); i <= head; i++ {
			slot := slotOf(i, n)
			last := min(ceilMs((i+1)*width-1), ceilMs(now)) // never in the future
			reqs := min(req[slot], uint32(n))               // no more than the slots can matter
			for r := range reqs {
				t := int64(0)
				if r == reqs-1 {
					t = int64(tok[slot])
				}
				s.insert(b, last, t, span)
			}
			if req[slot] == 0 && tok[slot] != 0 {
				s.insert(b, last, int64(tok[slot]), span) // tokens without a request: a settle's
			}
		}
		s.prune(b, now/nsPerMs, span)
		return
	}
	s.prune(b, now/nsPerMs, span) // what has left the span goes to no bucket
	var buf [minuteBuckets]entry
	live := s.entries(b, buf[:0])
	clear(b.requests)
	clear(b.tokens)
	*s = sliding{head: bucketOf(now, width)}
	for _, e := range live {
		s.add(b, e.ms*nsPerMs, width, 1, e.tok)
	}
}

// raiseExact counts, in a window in exact mode, req requests and tok tokens
// a vendor counted beyond the window, as taken at at: req entries (tok on
// the first of them); tokens without requests go to the latest entry when
// it leaves no sooner than one at at would, or else to a new entry — one
// request more than the vendor counted, which only holds the key longer.
func (s *sliding) raiseExact(b buckets, at, now, width int64, req, tok int64) {
	if req > 0 || tok > 0 {
		if s.prune(b, now/nsPerMs, spanMs(b, width)); s.sumReq == 0 {
			// An exact window that holds nothing is as an empty window of
			// buckets, and is raised as one — as the Redis store's, whose
			// empty windows expire, does.
			s.use(b, false, now, width)
			s.add(b, at, width, req, tok)
			return
		}
	}
	if req > 0 {
		s.addExact(b, at, width, req, tok)
		return
	}
	if tok <= 0 {
		return
	}
	if j := s.latest(b); j >= 0 && s.entryMs(b, j) >= ceilMs(at) {
		b.tokens[j] = uint32(min(int64(b.tokens[j])+tok, math.MaxUint32))
		s.sumTok += tok
		return
	}
	s.addExact(b, at, width, 1, tok)
}
