package keypool

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// benchPool returns a pool of n keys with all four limits set high enough
// never to refuse, and a clock that moves a microsecond per call.
func benchPool(b *testing.B, n int, opts ...Option) *Pool {
	b.Helper()
	keys := make([]Key, n)
	for i := range keys {
		keys[i] = Key{Secret: fmt.Sprintf("sk-%06d", i), ID: fmt.Sprintf("k%06d", i)}
	}
	return benchPoolOf(b, keys, opts...)
}

// benchPoolOf is benchPool's pool of the keys given.
func benchPoolOf(b *testing.B, keys []Key, opts ...Option) *Pool {
	b.Helper()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var tick atomic.Int64
	clock := func() time.Time { return now.Add(time.Duration(tick.Add(int64(time.Microsecond)))) }
	opts = append([]Option{WithClock(clock), WithLimits(Limits{RPM: 1 << 40, RPD: 1 << 40, TPM: 1 << 50, TPD: 1 << 50})}, opts...)
	p, err := New("bench", keys, opts...)
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// BenchmarkAcquire measures taking a key and settling its tokens: the check
// and record of the windows, the work per request that grows with keys and
// models if anything does.
func BenchmarkAcquire(b *testing.B) {
	for _, keys := range []int{1, 100, 10_000} {
		for _, models := range []int{1, 100} {
			b.Run(fmt.Sprintf("keys=%d/models=%d", keys, models), func(b *testing.B) {
				p := benchPool(b, keys)
				names := make([]string, models)
				for i := range names {
					names[i] = fmt.Sprintf("model-%d", i)
				}
				ctx := context.Background()
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					var c call
					var l lease
					if err := p.acquire(ctx, &c, names[i%models], usageReport{input: 400, output: 100}, &l); err != nil {
						b.Fatal(err)
					}
					_ = l.grant.Reservation.Settle(ctx, 400, 0)
					i++
				}
			})
		}
	}
}

// BenchmarkStores compares the hot path — take a key, settle its tokens — on
// each store of this package: the Badger store writes behind, so it should
// cost what the memory store does.
func BenchmarkStores(b *testing.B) {
	stores := []struct {
		name string
		open func(b *testing.B) Store
	}{
		{"memory", func(*testing.B) Store { return NewMemoryStore() }},
		{"badger", func(b *testing.B) Store {
			s, err := OpenBadgerStore(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			return s
		}},
	}
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			p := benchPool(b, 100, WithStore(st.open(b)))
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				var c call
				var l lease
				if err := p.acquire(ctx, &c, "m", usageReport{input: 400, output: 100}, &l); err != nil {
					b.Fatal(err)
				}
				_ = l.grant.Reservation.Settle(ctx, 400, 0)
			}
		})
	}
}
