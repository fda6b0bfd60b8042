package keypool

import (
	"math/rand/v2"
	"sort"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool/internal/windowspec"
)

// event is one admitted take.
type event struct {
	at  int64
	tok int64
}

// maxInSpan returns the most requests and the most tokens admitted within
// any span [t, t+span) of the events, which are sorted by time.
func maxInSpan(events []event, span int64) (requests, tokens int64) {
	var tok int64
	j := 0
	for i, e := range events {
		tok += e.tok
		for events[j].at <= e.at-span {
			tok -= events[j].tok
			j++
		}
		requests = max(requests, int64(i-j+1))
		tokens = max(tokens, tok)
	}
	return requests, tokens
}

// simulate offers takes to one window set at random times over runs spans
// and returns those admitted.
func simulate(rng *rand.Rand, lim Limits, span, gap time.Duration, maxTok int64, runs int, cal calendar) []event {
	var w windows
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano() + rng.Int64N(int64(span))
	end := start + int64(runs)*int64(span)
	var got []event
	for now := start; now < end; now += 1 + rng.Int64N(int64(gap)) {
		tok := int64(0)
		if maxTok > 0 {
			tok = 1 + rng.Int64N(maxTok)
		}
		if ok, _, _ := w.room(now, lim, tok, cal); ok {
			w.add(now, lim.spans(), 1, tok, cal)
			got = append(got, event{now, tok})
		}
	}
	return got
}

func TestWindowNeverExceedsLimitProperty(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 7))
		lim := Limits{RPM: 1 + rng.Int64N(120), TPM: 100 + rng.Int64N(10_000)}
		gap := time.Duration(1 + rng.Int64N(int64(2*time.Second)))
		events := simulate(rng, lim, time.Minute, gap, lim.TPM/5, 8, calendar{})
		req, tok := maxInSpan(events, int64(time.Minute))
		require.LessOrEqual(t, req, lim.RPM, "seed %d: requests in a minute", seed)
		require.LessOrEqual(t, tok, lim.TPM, "seed %d: tokens in a minute", seed)
	}
}

func TestWindowDayNeverExceedsLimitProperty(t *testing.T) {
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 11))
		lim := Limits{RPD: 1 + rng.Int64N(500), TPD: 1000 + rng.Int64N(100_000)}
		gap := time.Duration(1 + rng.Int64N(int64(10*time.Minute)))
		events := simulate(rng, lim, 24*time.Hour, gap, lim.TPD/20, 5, calendar{})
		req, tok := maxInSpan(events, int64(24*time.Hour))
		require.LessOrEqual(t, req, lim.RPD, "seed %d: requests in a day", seed)
		require.LessOrEqual(t, tok, lim.TPD, "seed %d: tokens in a day", seed)
	}
}

func TestWindowUsesCapacityUnderSaturationProperty(t *testing.T) {
	const runs = 20
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 3))
		t.Run("requests", func(t *testing.T) {
			lim := Limits{RPM: 5 + rng.Int64N(300)}
			gap := time.Minute / time.Duration(lim.RPM*4) // four times the capacity
			events := simulate(rng, lim, time.Minute, gap, 0, runs, calendar{})
			share := float64(len(events)) / float64(lim.RPM*runs)
			assert.GreaterOrEqual(t, share, 0.98, "seed %d: RPM %d served %.3f of capacity", seed, lim.RPM, share)
		})
		t.Run("tokens", func(t *testing.T) {
			lim := Limits{TPM: 10_000 + rng.Int64N(100_000)}
			maxTok := lim.TPM / 50
			gap := time.Minute / time.Duration(4*lim.TPM/maxTok*2)
			events := simulate(rng, lim, time.Minute, gap, maxTok, runs, calendar{})
			var used int64
			for _, e := range events {
				used += e.tok
			}
			share := float64(used) / float64(lim.TPM*runs)
			assert.GreaterOrEqual(t, share, 0.98, "seed %d: TPM %d served %.3f of capacity", seed, lim.TPM, share)
		})
	}
}

func TestWindowRetryAtIsExact(t *testing.T) {
	for seed := range uint64(100) {
		rng := rand.New(rand.NewPCG(seed, 5))
		lim := Limits{RPM: 1 + rng.Int64N(50), TPM: 1000, RPD: 1 + rng.Int64N(200)}
		var w windows
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
		for range 500 {
			now += rng.Int64N(int64(5 * time.Second))
			tok := 1 + rng.Int64N(300)
			ok, at, _ := w.room(now, lim, tok, calendar{})
			if ok {
				w.add(now, lim.spans(), 1, tok, calendar{})
				continue
			}
			require.Greater(t, at, now, "seed %d: RetryAt not after now", seed)
			probe := w
			fit, _, _ := probe.room(at-1, lim, tok, calendar{})
			assert.False(t, fit, "seed %d: fits before RetryAt", seed)
			probe = w
			fit, _, _ = probe.room(at, lim, tok, calendar{})
			assert.True(t, fit, "seed %d: does not fit at RetryAt", seed)
		}
	}
}

// TestWindowExactGuard: an exact window counts a request for its span and
// windowspec.ExactGuard more, so that a client on a fixed period of a
// second meets keypool's refusal for those milliseconds, not the vendor's
// minute a moment early.
func TestWindowExactGuard(t *testing.T) {
	var w windows
	lim := Limits{RPM: 1}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	ok, _, _ := w.room(start, lim, 0, calendar{})
	require.True(t, ok)
	w.add(start, lim.spans(), 1, 0, calendar{})
	ok, at, _ := w.room(start+int64(time.Minute), lim, 0, calendar{})
	assert.False(t, ok, "a minute after the take, the guard still holds it")
	assert.Equal(t, start+int64(time.Minute+windowspec.ExactGuard), at, "RetryAt is the span and the guard after the take")
	ok, _, _ = w.room(at, lim, 0, calendar{})
	assert.True(t, ok)
	assert.Equal(t, 5*time.Millisecond, windowspec.ExactGuard, "a few milliseconds: more would leave a key idle")
}

func TestWindowRoomReportsWhichWindowIsFull(t *testing.T) {
	var w windows
	lim := Limits{RPM: 10, RPD: 2}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for range 2 {
		ok, _, _ := w.room(now, lim, 0, calendar{})
		require.True(t, ok)
		w.add(now, lim.spans(), 1, 0, calendar{})
	}
	ok, at, dayFull := w.room(now, lim, 0, calendar{})
	assert.False(t, ok)
	assert.True(t, dayFull)
	assert.InDelta(t, float64(now+int64(24*time.Hour)), float64(at), float64(dayWidth), "a day window frees a day later")
}

func TestWindowAddGivesBack(t *testing.T) {
	var w windows
	lim := Limits{RPM: 1, TPM: 100}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	ok, _, _ := w.room(now, lim, 80, calendar{})
	require.True(t, ok)
	w.add(now, lim.spans(), 1, 80, calendar{})
	later := now + int64(10*time.Second)
	ok, _, _ = w.room(later, lim, 10, calendar{})
	assert.False(t, ok, "the minute is full")
	w.add(now, lim.spans(), -1, -80, calendar{}) // the request never reached the vendor
	ok, _, _ = w.room(later, lim, 100, calendar{})
	assert.True(t, ok, "the minute is free again")
	assert.Equal(t, Usage{}, w.usage(later, calendar{}))
	w.add(now, lim.spans(), -1, -1000, calendar{})
	assert.Equal(t, Usage{}, w.usage(later, calendar{}), "a bucket never goes below zero")
}

func TestWindowSettlesIntoTheBucketOfTheTake(t *testing.T) {
	var w windows
	lim := Limits{TPM: 1000}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	w.room(now, lim, 500, calendar{})
	w.add(now, lim.spans(), 1, 500, calendar{})
	// 30 s later the answer says it used 120 tokens.
	w.add(now, lim.spans(), 0, 120-500, calendar{})
	u := w.usage(now+int64(30*time.Second), calendar{})
	assert.Equal(t, int64(120), u.MinuteTokens)
	// After the minute the settlement of the old take is dropped.
	w.add(now, lim.spans(), 0, 1000, calendar{})
	u = w.usage(now+int64(2*time.Minute), calendar{})
	assert.Zero(t, u.MinuteTokens)
}

func TestWindowCalendarDayResetsAtBoundary(t *testing.T) {
	cal := calendar{hour: 0, loc: time.UTC}
	lim := Limits{RPD: 3}
	var w windows
	day := time.Date(2026, 1, 1, 22, 0, 0, 0, time.UTC)
	for range 3 {
		ok, _, _ := w.room(day.UnixNano(), lim, 0, cal)
		require.True(t, ok)
		w.add(day.UnixNano(), lim.spans(), 1, 0, cal)
	}
	ok, at, dayFull := w.room(day.Add(time.Hour).UnixNano(), lim, 0, cal)
	assert.False(t, ok)
	assert.True(t, dayFull)
	assert.Equal(t, time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC).UnixNano(), at, "full until midnight")
	ok, _, _ = w.room(at, lim, 0, cal)
	assert.True(t, ok, "a new day at midnight")
}

func TestWindowSetFitsInOneKiB(t *testing.T) {
	size := unsafe.Sizeof(windows{}) + unsafe.Sizeof(memModel{})
	assert.LessOrEqual(t, size, uintptr(1024), "bytes per key × model window set")
	t.Logf("a key × model window set takes %d bytes", size)
}

func TestMaxInSpan(t *testing.T) {
	events := []event{{0, 1}, {10, 2}, {59, 3}, {60, 4}, {200, 5}}
	sort.Slice(events, func(i, j int) bool { return events[i].at < events[j].at })
	req, tok := maxInSpan(events, 60)
	assert.Equal(t, int64(3), req)
	assert.Equal(t, int64(9), tok)
}

// Moving a window back by m buckets leaves it counting, at each moment m
// buckets earlier, exactly what it counted before: every take still counts,
// for as long as it did, and leaves the window when it did.
func TestWindowShiftBackProperty(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 13))
		var w windows
		lim := Limits{RPM: 1 << 20, TPM: 1 << 30, RPD: 1 << 20, TPD: 1 << 30}
		now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
		for range rng.IntN(200) {
			now += rng.Int64N(int64(3 * time.Second))
			w.add(now, lim.spans(), 1, rng.Int64N(100), calendar{})
		}
		before := w // the arrays are values: a copy
		d := rng.Int64N(int64(5 * 365 * 24 * time.Hour))
		w.shiftBack(d, now-d, calendar{})
		// Whole buckets of each window, no more than d.
		m := (d / minuteWidth) * minuteWidth
		md := (d / dayWidth) * dayWidth
		for k := range int64(minuteBuckets + 2) {
			at := now + k*minuteWidth
			want, got := before.usage(at, calendar{}), w.usage(at-m, calendar{})
			require.Equal(t, want.MinuteRequests, got.MinuteRequests, "seed %d: minute requests %d buckets on", seed, k)
			require.Equal(t, want.MinuteTokens, got.MinuteTokens, "seed %d: minute tokens %d buckets on", seed, k)
		}
		for k := range int64(dayBuckets + 2) {
			at := now + k*dayWidth
			want, got := before.usage(at, calendar{}), w.usage(at-md, calendar{})
			require.Equal(t, want.DayRequests, got.DayRequests, "seed %d: day requests %d buckets on", seed, k)
			require.Equal(t, want.DayTokens, got.DayTokens, "seed %d: day tokens %d buckets on", seed, k)
		}
	}
}

// With a limit that changes as the windows run — a vendor's stated limit
// learned, lowered, raised, across the line between exact times and
// buckets — no take is admitted while the last span already holds the
// limit in force at that moment.
func TestWindowChangingLimitsProperty(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 17))
		var w windows
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano() + rng.Int64N(int64(time.Minute))
		var got []event
		rpm, tpm := 1+rng.Int64N(150), 100+rng.Int64N(5000)
		for range 3000 {
			now += 1 + rng.Int64N(int64(400*time.Millisecond))
			if rng.IntN(150) == 0 {
				rpm, tpm = 1+rng.Int64N(150), 100+rng.Int64N(5000)
			}
			lim := Limits{RPM: rpm, TPM: tpm}
			tok := 1 + rng.Int64N(200)
			ok, _, _ := w.room(now, lim, tok, calendar{})
			if !ok {
				continue
			}
			w.add(now, lim.spans(), 1, tok, calendar{})
			got = append(got, event{now, tok})
			var req, toks int64
			for _, e := range got {
				if e.at > now-int64(time.Minute) {
					req++
					toks += e.tok
				}
			}
			require.LessOrEqual(t, req, rpm, "seed %d: requests in the last minute at a limit of %d", seed, rpm)
			require.LessOrEqual(t, toks, tpm, "seed %d: tokens in the last minute at a limit of %d", seed, tpm)
		}
	}
}
