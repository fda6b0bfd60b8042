package keypool

import (
	"math"
	"slices"
)

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

// spanMs returns a window's span in milliseconds: its n-1 buckets.
func spanMs(b buckets, width int64) int64 { return int64(len(b.requests)-1) * width / nsPerMs }

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
