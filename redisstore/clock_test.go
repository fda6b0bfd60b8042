package redisstore_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool"
	"github.com/keypool-go/keypool/redisstore"
)

// Issue 36: two replicas whose clocks are off — one 90 s slow, one 3 min
// fast — bench a key for as long as each meant, by the server's clock,
// and each reads the bench's end by its own: a bench set by either holds
// both until the same moment, and releases both at it.
func TestClocksApartBenchTheSame(t *testing.T) {
	f := newFakeRedis(t)
	slow := func() time.Time { return f.Now().Add(-90 * time.Second) }
	fast := func() time.Time { return f.Now().Add(3 * time.Minute) }
	stores := []struct {
		name  string
		clock func() time.Time
	}{{"slow", slow}, {"fast", fast}}
	open := func(clock func() time.Time) *redisstore.Store {
		return newStore(t, f.client(t), redisstore.WithClock(clock))
	}
	for _, setter := range stores {
		t.Run("set by "+setter.name, func(t *testing.T) {
			model := "m-" + setter.name
			a, b := open(slow), open(fast)
			set := open(setter.clock)
			ends := f.Now().Add(time.Minute) // by the server's clock
			require.NoError(t, set.Bench(t.Context(), keypool.Bench{Provider: "test", KeyID: "k", Model: model,
				Kind: keypool.KindRate, Until: setter.clock().Add(time.Minute)}))
			check := func(when string, held bool) {
				for _, s := range []struct {
					store *redisstore.Store
					clock func() time.Time
					name  string
				}{{a, slow, "slow"}, {b, fast, "fast"}} {
					now := s.clock()
					g, err := s.store.Take(t.Context(), take("k", model, keypool.Limits{}, 0, now))
					require.NoError(t, err)
					assert.Equal(t, !held, g.OK, "%s: the %s replica's take", when, s.name)
					if held {
						assert.WithinDuration(t, now.Add(ends.Sub(f.Now())), g.RetryAt, 2*time.Millisecond,
							"%s: the %s replica's RetryAt, by its clock", when, s.name)
						st, err := s.store.State(t.Context(), "test", "k", now)
						require.NoError(t, err)
						i := slices.IndexFunc(st.Models, func(m keypool.ModelStats) bool { return m.Model == model })
						require.GreaterOrEqual(t, i, 0, "the model in State")
						assert.WithinDuration(t, g.RetryAt, st.Models[i].Bench.Until, 2*time.Millisecond,
							"%s: the %s replica's State", when, s.name)
					}
				}
			}
			check("at once", true)
			f.Advance(t, 59*time.Second)
			check("59 s later", true)
			f.Advance(t, 1001*time.Millisecond)
			check("60 s later", false)
		})
	}
}
