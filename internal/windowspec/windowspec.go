// Package windowspec holds the shape of keypool's windows — bucket counts,
// spans and widths, the bound on models per key, the calendar day — which
// every store that counts them must share: the root package's MemoryStore
// and the Redis store count the same way, bucket for bucket.
package windowspec

import (
	"time"
	"unicode/utf8"

	"github.com/keypool-go/keypool/internal/refusal"
)

// The bucket counts of the two sliding windows: a minute of 0.75 s buckets,
// a day of one-hour buckets. A sliding window of n buckets admits at least
// (n-1)/n of its limit under saturating load.
const (
	MinuteBuckets = 81
	DayBuckets    = 25
)

// The spans of the two sliding windows, and their bucket widths: the width
// is rounded up so that n-1 buckets always cover the span.
const (
	MinuteSpan  = time.Minute
	DaySpan     = 24 * time.Hour
	MinuteWidth = (MinuteSpan + MinuteBuckets - 2) / (MinuteBuckets - 1)
	DayWidth    = (DaySpan + DayBuckets - 2) / (DayBuckets - 1)
)

// ExactGuard is how much longer than its span an exact window counts a
// request: the vendor counts it when it arrives, a moment after the take,
// and a client on a fixed period that divides the span would otherwise meet
// the vendor's window that moment early, once a span.
const ExactGuard = 5 * time.Millisecond

// MaxStepBack is the longest step back of a clock a key's windows ride out
// by counting at the latest time they have seen; a longer one is a clock
// put right after running ahead, and what the windows and benches hold,
// dated by the wrong clock, moves back with it.
const MaxStepBack = time.Hour

// MaxModelsPerKey bounds the models a store tracks for one key: model names
// come from requests, and a client sending endless names must not grow the
// state without end. Models beyond it share one entry, OverflowModel.
const (
	MaxModelsPerKey = 1024
	OverflowModel   = "\x00other"
)

// ReservedRetry is how soon a request refused because what requests in
// flight reserve fills a budget is told to try again: they settle as their
// answers end, and what was spent alone left it room.
const ReservedRetry = time.Second

// MaxModelName bounds a model name, in bytes: names come from requests, and
// every store keeps them. The longest real names (a Bedrock inference
// profile's ARN, a Hugging Face repository with a revision) stay well
// within it.
const MaxModelName = 256

// CheckModel returns a *refusal.Error saying why a model name cannot be
// kept: longer than MaxModelName, not UTF-8, or holding a control
// character. It never quotes the name.
func CheckModel(name string) error {
	if len(name) > MaxModelName {
		return refusal.Errorf("a model name of %d bytes is longer than %d", len(name), MaxModelName)
	}
	// A control character (C0 or DEL) is one byte below utf8.RuneSelf in
	// UTF-8, never part of a longer rune: one pass over the bytes finds
	// it, and only a name with other bytes needs its UTF-8 checked.
	ascii := true
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case c >= utf8.RuneSelf:
			ascii = false
		case c < ' ' || c == 0x7f:
			return refusal.Errorf("a model name has a control character at byte %d", i)
		}
	}
	if !ascii && !utf8.ValidString(name) {
		return refusal.Errorf("a model name is not UTF-8")
	}
	return nil
}

// CalendarDay returns the calendar day that holds now: it starts at hour
// o'clock in loc and ends at the same hour the next day (23 or 25 hours
// later across a change of daylight saving time). Days are counted by
// their dates, not by the date of a start time.Date moved: where the
// clocks skip the hour (America/Havana springs from 00:00 to 01:00), the
// start moves back into the date before, and the day still ends at the
// next date's hour.
func CalendarDay(now time.Time, hour int, loc *time.Location) (start, end time.Time) {
	t := now.In(loc)
	y, m, d := t.Date()
	at := func(d int) time.Time { return time.Date(y, m, d, hour, 0, 0, 0, loc) }
	for at(d).After(t) { // at most twice: a date skipped whole (Pacific/Apia, 2011-12-30)
		d--
	}
	for !at(d + 1).After(t) { // the next date's start moved back before t
		d++
	}
	return at(d), at(d + 1)
}

// CalendarMonth returns the calendar month that holds now: it starts on the
// first day at hour o'clock in loc and ends at the same hour on the first
// day of the next month (counted by dates, as CalendarDay's days are).
func CalendarMonth(now time.Time, hour int, loc *time.Location) (start, end time.Time) {
	t := now.In(loc)
	y, m, _ := t.Date()
	at := func(m time.Month) time.Time { return time.Date(y, m, 1, hour, 0, 0, 0, loc) }
	for at(m).After(t) {
		m--
	}
	for !at(m + 1).After(t) {
		m++
	}
	return at(m), at(m + 1)
}

// Tighter returns the tighter of two limits, where 0 is no limit.
func Tighter(a, b int64) int64 {
	switch {
	case a == 0:
		return b
	case b == 0:
		return a
	}
	return min(a, b)
}

// AccountID returns the ID under which a store keeps the state of an
// account: a NUL, then its name. Key IDs hold no control characters, so no
// key's ID is an account's.
func AccountID(account string) string { return "\x00" + account }
