package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keypool-go/keypool"
	"github.com/keypool-go/keypool/redisstore"
)

// BenchmarkTake measures the work of one request on a store — a take, then
// the settle of its tokens — on the MemoryStore and on a Redis store over
// miniredis and over a real redis-server on loopback, one goroutine at a
// time and in parallel. roundtrips/op counts what the store sent Redis, a
// command or a pipeline each (a hook on the client), the Flush at the end
// included.
func BenchmarkTake(b *testing.B) {
	type opened struct {
		store keypool.Store
		trips *roundTrips
	}
	overRedis := func(b *testing.B, c *redis.Client) opened {
		var trips roundTrips
		c.AddHook(&trips)
		return opened{newStore(b, c, redisstore.WithPrefix(newPrefix(b, c))), &trips}
	}
	stores := []struct {
		name string
		open func(b *testing.B) opened
	}{
		{"memory", func(*testing.B) opened { return opened{store: keypool.NewMemoryStore()} }},
		{"miniredis", func(b *testing.B) opened { return overRedis(b, newFakeRedis(b).client(b)) }},
		{"redis", func(b *testing.B) opened { return overRedis(b, realRedis(b)) }},
	}
	lim := keypool.Limits{RPM: 1 << 40, TPM: 1 << 50, RPD: 1 << 40, TPD: 1 << 50}
	request := func(b *testing.B, s keypool.Store) {
		t := keypool.Claim{Provider: "bench", KeyID: "k", Model: "m", Limits: lim, Tokens: 500, Now: time.Now()}
		g, err := s.Take(context.Background(), t)
		if err == nil && g.OK {
			err = g.Reservation.Settle(context.Background(), 400, 0)
		}
		if err != nil || !g.OK {
			b.Errorf("Take = %+v, %v", g, err) // not Fatal: RunParallel's goroutines call it too
		}
	}
	for _, st := range stores {
		for _, mode := range []string{"serial", "parallel"} {
			b.Run(st.name+"/"+mode, func(b *testing.B) {
				o := st.open(b)
				request(b, o.store) // load the script
				if o.trips != nil {
					o.trips.n.Store(0)
				}
				b.ReportAllocs()
				var n int64
				if mode == "serial" {
					for b.Loop() {
						request(b, o.store)
						n++
					}
				} else {
					b.ResetTimer()
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							request(b, o.store)
						}
					})
					n = int64(b.N)
				}
				if err := o.store.Flush(context.Background()); err != nil {
					b.Fatal(err)
				}
				if o.trips != nil {
					b.ReportMetric(float64(o.trips.n.Load())/float64(n), "roundtrips/op")
				}
			})
		}
	}
}
