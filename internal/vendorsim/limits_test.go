package vendorsim

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)

func TestSlidingWindowSteps(t *testing.T) {
	type step struct {
		at      time.Duration // after t0
		n       int64
		fits    bool
		wait    time.Duration // when it does not fit
		addIfOK bool
	}
	tests := []struct {
		name  string
		span  time.Duration
		limit int64
		steps []step
	}{
		{
			name: "requests fill, then the oldest leaves", span: time.Minute, limit: 2,
			steps: []step{
				{at: 0, n: 1, fits: true, addIfOK: true},
				{at: 10 * time.Second, n: 1, fits: true, addIfOK: true},
				{at: 20 * time.Second, n: 1, fits: false, wait: 40 * time.Second},
				{at: 59*time.Second + 999*time.Millisecond, n: 1, fits: false, wait: time.Millisecond},
				{at: time.Minute, n: 1, fits: true, addIfOK: true},
				{at: time.Minute + time.Second, n: 1, fits: false, wait: 9 * time.Second},
			},
		},
		{
			name: "tokens wait for enough entries to leave", span: time.Minute, limit: 100,
			steps: []step{
				{at: 0, n: 30, fits: true, addIfOK: true},
				{at: 5 * time.Second, n: 30, fits: true, addIfOK: true},
				{at: 10 * time.Second, n: 30, fits: true, addIfOK: true},
				{at: 20 * time.Second, n: 50, fits: false, wait: 45 * time.Second}, // needs the first two gone
				{at: 20 * time.Second, n: 10, fits: true},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWindow(tt.span, tt.limit)
			for i, s := range tt.steps {
				now := t0.Add(s.at)
				require.Equal(t, s.fits, w.fits(now, s.n), "step %d: fits", i)
				wait, ok := w.wait(now, s.n)
				require.True(t, ok, "step %d", i)
				if s.fits {
					assert.Zero(t, wait, "step %d: wait", i)
				} else {
					assert.Equal(t, s.wait, wait, "step %d: wait", i)
				}
				if s.fits && s.addIfOK {
					w.add(now, s.n)
				}
			}
		})
	}
}

func TestSlidingWindowNeverAndNil(t *testing.T) {
	w := newWindow(time.Minute, 10)
	_, ok := w.wait(t0, 11)
	assert.False(t, ok, "a request over the limit never fits")

	var none *slidingWindow = newWindow(time.Minute, 0)
	require.Nil(t, none)
	assert.True(t, none.fits(t0, 1<<40))
	assert.Zero(t, none.used(t0))
	assert.Zero(t, none.untilEmpty(t0))
	none.add(t0, 5) // no panic
}

func TestSlidingWindowResets(t *testing.T) {
	w := newWindow(time.Minute, 5)
	assert.Zero(t, w.untilEmpty(t0))
	assert.Equal(t, time.Minute, w.untilOldestLeaves(t0))
	w.add(t0, 1)
	w.add(t0.Add(20*time.Second), 1)
	now := t0.Add(30 * time.Second)
	assert.Equal(t, 50*time.Second, w.untilEmpty(now))
	assert.Equal(t, 30*time.Second, w.untilOldestLeaves(now))
	assert.Equal(t, int64(3), w.remaining(now))
	assert.Equal(t, int64(5), w.remaining(t0.Add(2*time.Minute)))
	assert.Empty(t, w.q, "expired entries are dropped")
}

func TestMaxInSpan(t *testing.T) {
	at := func(s ...float64) []entry {
		es := make([]entry, len(s))
		for i, x := range s {
			es[i] = entry{at: t0.Add(time.Duration(x * float64(time.Second))), n: 1}
		}
		return es
	}
	tests := []struct {
		name string
		es   []entry
		span time.Duration
		want int64
	}{
		{"none", nil, time.Minute, 0},
		{"one", at(0), time.Minute, 1},
		{"edge is half-open", at(0, 60), time.Minute, 1},
		{"just inside", at(0, 59.999), time.Minute, 2},
		{"cluster in the middle", at(0, 50, 55, 58, 100, 200), 10 * time.Second, 3},
		{"weights", []entry{{t0, 5}, {t0.Add(time.Second), 7}, {t0.Add(time.Hour), 20}}, time.Minute, 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, maxInSpan(tt.es, tt.span))
		})
	}
}

// TestSlidingWindowStrictRandom checks the promise against a brute-force
// count: whatever times the requests come at, no span of the window's length
// holds more than its limit, and a request is refused only when admitting it
// would break that.
func TestSlidingWindowStrictRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		limit := int64(1 + rng.IntN(20))
		span := time.Duration(1+rng.IntN(60)) * time.Second
		w := newWindow(span, limit)
		var accepted []entry
		lo := 0
		now := t0
		for range 300 {
			now = now.Add(time.Duration(rng.IntN(int(3 * span / time.Duration(limit)))))
			n := int64(1 + rng.IntN(3))
			// brute force: what the window counts at now (entries before lo
			// are older than the span, and times only grow)
			for lo < len(accepted) && now.Sub(accepted[lo].at) >= span {
				lo++
			}
			var inWindow int64
			for _, e := range accepted[lo:] {
				inWindow += e.n
			}
			fits := inWindow+n <= limit
			if got := w.fits(now, n); got != fits {
				t.Fatalf("trial %d: fits(%v, %d) = %v, want %v", trial, now.Sub(t0), n, got, fits)
			}
			if fits {
				w.add(now, n)
				accepted = append(accepted, entry{at: now, n: n})
			}
		}
		require.LessOrEqual(t, maxInSpan(accepted, span), limit, "trial %d", trial)
		require.LessOrEqual(t, int64(len(w.q)), limit, "trial %d: memory bounded by the limit", trial)
	}
}
