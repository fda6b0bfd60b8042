package redisstore_test

import (
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool"
	"github.com/keypool-go/keypool/redisstore"
	"github.com/keypool-go/keypool/storetest"
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

// Issue 36: a Redis server's clock that ran a day ahead and is put right
// leaves what the keys hold dated a day late. The store moves it back, as
// the MemoryStore does with a pool's clock: the requests taken still count
// for the rest of their minute and their day, a bench for the rest of its
// length, and a key is back after a minute, not after a day. Both stores
// answer every step the same.
func TestServerClockPutRightAfterRunningAhead(t *testing.T) {
	redises := map[string]func(t *testing.T) redis.UniversalClient{
		"miniredis": func(t *testing.T) redis.UniversalClient { return newFakeRedis(t).client(t) },
		"redis":     func(t *testing.T) redis.UniversalClient { return realRedis(t) },
		"cluster": func(t *testing.T) redis.UniversalClient {
			c, _ := realCluster(t)
			return c
		},
	}
	for name, open := range redises {
		t.Run(name, func(t *testing.T) {
			right := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
			clk := storetest.NewClock(right.Add(24 * time.Hour)) // a day ahead
			c := open(t)
			rs := newStore(t, c, redisstore.WithPrefix(newPrefix(t, c)),
				redisstore.WithServerClock(clk.Now), redisstore.WithClock(clk.Now))
			ms := keypool.NewMemoryStore()
			exact := keypool.Limits{RPM: 3, RPD: 5}       // counted by each request's time
			buckets := keypool.Limits{RPM: 200, TPD: 900} // counted in buckets
			claims := func(now time.Time) map[string]keypool.Claim {
				acct := take("b", "m", exact, 0, now)
				acct.Account = "team"
				return map[string]keypool.Claim{
					"exact":   take("a", "m", exact, 0, now),
					"buckets": take("a", "n:ü {x}%", buckets, 300, now), // a name the keys escape
					"account": acct,
				}
			}
			step := func(when string, want map[string]bool) map[string]keypool.Grant {
				got := map[string]keypool.Grant{}
				for what, c := range claims(clk.Now()) {
					rg, err := rs.Take(t.Context(), c)
					require.NoError(t, err)
					mg, err := ms.Take(t.Context(), c)
					require.NoError(t, err)
					assert.Equal(t, mg.OK, rg.OK, "%s, %s: the stores' answers", when, what)
					assert.WithinDuration(t, mg.RetryAt, rg.RetryAt, time.Millisecond, "%s, %s: RetryAt", when, what)
					if w, ok := want[what]; ok {
						assert.Equal(t, w, rg.OK, "%s, %s: served", when, what)
					}
					got[what] = rg
				}
				return got
			}
			for range 3 {
				step("ahead", map[string]bool{"exact": true, "buckets": true, "account": true})
				clk.Advance(t, time.Second)
			}
			// While ahead, the key with an account is benched for 30 s by
			// itself (a revoked key).
			for _, s := range []keypool.Store{rs, ms} {
				require.NoError(t, s.Bench(t.Context(), keypool.Bench{Provider: "test", KeyID: "b", AllModels: true,
					Kind: keypool.KindAuth, Until: clk.Now().Add(30 * time.Second)}))
			}

			clk.Advance(t, right.Sub(clk.Now())) // put right: a day back, less 3 s
			g := step("put right", map[string]bool{"exact": false, "buckets": false, "account": false})
			assert.WithinDuration(t, right.Add(60*time.Second), g["exact"].RetryAt, 2*time.Second,
				"the minute's three requests leave a minute after they were taken, not a day")
			assert.Equal(t, keypool.KindAuth, g["account"].Reason, "the key's own bench holds")
			assert.WithinDuration(t, right.Add(30*time.Second), g["account"].RetryAt, 4*time.Second,
				"the key's own bench lasts what was left of it")

			clk.Advance(t, 61*time.Second)
			step("a minute later", map[string]bool{"exact": true, "buckets": false, "account": true})
			step("a minute later, again", map[string]bool{"exact": true, "account": true})
			g = step("the day's sixth", map[string]bool{"exact": false, "account": false})
			assert.Equal(t, keypool.KindQuota, g["exact"].Reason, "the day still counts the requests taken ahead")
		})
	}
}

// Issue 36: spend counts by the server's clock. Two replicas, one 3 min
// fast, share a key's budget of $0.05 a day a minute before the server's
// midnight: what the fast one spends there counts in the server's day that
// is ending, so the other's take in the same minute is refused, and both
// are served once the server's day has turned.
func TestSpendCountsByTheServersClock(t *testing.T) {
	f := newFakeRedis(t)
	f.Advance(t, 11*time.Hour+59*time.Minute) // 23:59 by the server
	fast := func() time.Time { return f.Now().Add(3 * time.Minute) }
	a := newStore(t, f.client(t), redisstore.WithClock(fast))
	b := newStore(t, f.client(t), redisstore.WithClock(f.Now))
	claim := func(now time.Time) keypool.Claim {
		c := take("k", "m", keypool.Limits{}, 0, now)
		c.Budget, c.Cost = keypool.Budget{PerDay: 0.05}, 40_000 // $0.04
		return c
	}
	g, err := a.Take(t.Context(), claim(fast()))
	require.NoError(t, err)
	require.True(t, g.OK, "the fast replica's take")
	require.NoError(t, g.Reservation.Settle(t.Context(), 0, 40_000))
	_, err = a.State(t.Context(), "test", "k", fast()) // sends the settle
	require.NoError(t, err)

	f.Advance(t, 30*time.Second) // 23:59:30, 00:02:30 by the fast clock
	g, err = b.Take(t.Context(), claim(f.Now()))
	require.NoError(t, err)
	assert.False(t, g.OK, "the server's day holds the fast replica's spend")
	assert.Equal(t, keypool.KindQuota, g.Reason)
	assert.Equal(t, time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC), g.RetryAt, "back at the server's midnight")
	st, err := b.State(t.Context(), "test", "k", f.Now())
	require.NoError(t, err)
	assert.InDelta(t, 0.04, st.Spent.PerDay, 1e-9, "State reads the server's day")

	f.Advance(t, 31*time.Second) // 00:00:01
	for name, s := range map[string]*redisstore.Store{"fast": a, "on time": b} {
		now := f.Now()
		if name == "fast" {
			now = fast()
		}
		g, err = s.Take(t.Context(), claim(now))
		require.NoError(t, err)
		assert.True(t, g.OK, "the %s replica, in the server's new day", name)
		if g.OK {
			require.NoError(t, g.Reservation.Release(t.Context()))
			_, err = s.State(t.Context(), "test", "k", now) // sends the release
			require.NoError(t, err)
		}
	}
}
