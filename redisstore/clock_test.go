package redisstore_test

import (
	"fmt"
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
	for name, open := range clockRedises {
		t.Run(name, func(t *testing.T) {
			right := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
			clk := storetest.NewClock(right.Add(24 * time.Hour)) // a day ahead
			rs := clockedStore(t, open(t), clk, clk)
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
			// A model a minute idle when the clock is put right: its
			// exact window then holds nothing in force.
			idle := func(when string, want bool) {
				for range 3 {
					for _, s := range []keypool.Store{rs, ms} {
						g, err := s.Take(t.Context(), take("a", "idle", keypool.Limits{RPM: 3}, 0, clk.Now()))
						require.NoError(t, err)
						assert.Equal(t, want, g.OK, "%s: the idle model", when)
					}
				}
			}
			idle("ahead", true)
			clk.Advance(t, 2*time.Minute)
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

			clk.Advance(t, right.Sub(clk.Now())) // put right: a day back, less 2 min 3 s
			g := step("put right", map[string]bool{"exact": false, "buckets": false, "account": false})
			idle("put right", true)
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

// clockRedises are the servers the clock's tests run on.
var clockRedises = map[string]func(t *testing.T) redis.UniversalClient{
	"miniredis": func(t *testing.T) redis.UniversalClient { return newFakeRedis(t).client(t) },
	"redis":     func(t *testing.T) redis.UniversalClient { return realRedis(t) },
	"cluster": func(t *testing.T) redis.UniversalClient {
		c, _ := realCluster(t)
		return c
	},
}

// The realistic case of a server's clock put right: the Redis server's
// clock ran a day ahead, the pool's is right all along. Spend taken after
// the clock is put right must count against the day's budget.
func TestSpendCountsAfterServerClockPutRight(t *testing.T) {
	for name, open := range clockRedises {
		t.Run(name, func(t *testing.T) {
			s, pool, srv := aDayAhead(t, open(t))
			claim := func(cost int64) keypool.Claim {
				cl := take("k", "m", keypool.Limits{}, 0, pool.Now())
				cl.Budget, cl.Cost = keypool.Budget{PerDay: 0.05}, cost
				return cl
			}
			spend := func(what string, cost int64) keypool.Grant {
				g, err := s.Take(t.Context(), claim(cost))
				require.NoError(t, err)
				if g.OK {
					require.NoError(t, g.Reservation.Settle(t.Context(), 0, cost))
					_, err = s.State(t.Context(), "test", "k", pool.Now()) // sends the settle
					require.NoError(t, err)
				}
				t.Logf("%s: OK %v RetryAt %v", what, g.OK, g.RetryAt)
				return g
			}
			require.True(t, spend("ahead, $0.01", 10_000).OK)
			srv.Advance(t, -24*time.Hour+5*time.Second) // put right
			pool.Advance(t, 5*time.Second)
			require.True(t, spend("put right, $0.02", 20_000).OK)
			require.True(t, spend("put right, $0.02 more", 20_000).OK) // $0.05 in all
			g := spend("put right, $0.02 over the day's $0.05", 20_000)
			assert.False(t, g.OK, "a day's budget of $0.05 admits no $0.07")
			st, err := s.State(t.Context(), "test", "k", pool.Now())
			require.NoError(t, err)
			assert.InDelta(t, 0.05, st.Spent.PerDay, 1e-9, "State: the day's spend")
		})
	}
}

// The same with a budget spent while the server ran ahead: once it is put
// right, the key is back at the day's end by the right clock — the next
// midnight, half a day on — not a day and a half later.
func TestSpentBudgetBackAtTheRightMidnight(t *testing.T) {
	for name, open := range clockRedises {
		t.Run(name, func(t *testing.T) {
			s, pool, srv := aDayAhead(t, open(t))
			claim := func() keypool.Claim {
				cl := take("k", "m", keypool.Limits{}, 0, pool.Now())
				cl.Budget, cl.Cost = keypool.Budget{PerDay: 0.05}, 40_000
				return cl
			}
			g, err := s.Take(t.Context(), claim())
			require.NoError(t, err)
			require.True(t, g.OK)
			require.NoError(t, g.Reservation.Settle(t.Context(), 0, 40_000))
			_, err = s.State(t.Context(), "test", "k", pool.Now())
			require.NoError(t, err)

			srv.Advance(t, -24*time.Hour+5*time.Second)
			pool.Advance(t, 5*time.Second)
			g, err = s.Take(t.Context(), claim())
			require.NoError(t, err)
			assert.False(t, g.OK)
			assert.Equal(t, time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC), g.RetryAt, "back at the next midnight")
		})
	}
}

// Calendar days, with the Redis server's clock a day ahead and put right,
// the pool's right all along: the day's count carries into the day that
// holds the right time, which ends at the next midnight.
func TestCalendarDayAfterServerClockPutRight(t *testing.T) {
	for name, open := range clockRedises {
		t.Run(name, func(t *testing.T) {
			s, pool, srv := aDayAhead(t, open(t))
			claim := func() keypool.Claim {
				cl := take("k", "m", keypool.Limits{RPD: 3}, 0, pool.Now())
				cl.DayZone = time.UTC
				return cl
			}
			step := func(what string) keypool.Grant {
				g, err := s.Take(t.Context(), claim())
				require.NoError(t, err)
				t.Logf("%s: OK %v RetryAt %v", what, g.OK, g.RetryAt)
				return g
			}
			require.True(t, step("ahead 1").OK)
			require.True(t, step("ahead 2").OK)
			srv.Advance(t, -24*time.Hour+5*time.Second) // put right
			pool.Advance(t, 5*time.Second)
			require.True(t, step("put right, the day's third").OK)
			g := step("put right, the day's fourth")
			assert.False(t, g.OK)
			assert.Equal(t, time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC), g.RetryAt, "back at the next midnight")
			srv.Advance(t, 12*time.Hour)
			pool.Advance(t, 12*time.Hour)
			assert.True(t, step("the next day").OK, "a new day by the right clock")
		})
	}
}

// A Redis key of the wrong type under one model of a key (its minute
// window) must not stop the key's other models, as it did not before the
// shift; and a shift that fails halfway must not move what it had moved
// again at the next take.
func TestShiftPassesOverAWrongTypeWindow(t *testing.T) {
	for name, open := range clockRedises {
		t.Run(name, func(t *testing.T) {
			right := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
			clk := storetest.NewClock(right.Add(24 * time.Hour))
			c := open(t)
			prefix := newPrefix(t, c)
			s := newStore(t, c, redisstore.WithPrefix(prefix),
				redisstore.WithServerClock(clk.Now), redisstore.WithClock(clk.Now))
			claim := func(m string) keypool.Claim {
				cl := take("k", m, keypool.Limits{RPM: 50}, 0, clk.Now())
				cl.Cap = keypool.Limits{RPM: 100}
				return cl
			}
			for _, m := range []string{"m1", "m2", "m1"} {
				g, err := s.Take(t.Context(), claim(m))
				require.NoError(t, err)
				require.True(t, g.OK)
			}
			bad := prefix + ":{test}:wm:k:m2"
			require.NoError(t, c.Del(t.Context(), bad).Err())
			require.NoError(t, c.Set(t.Context(), bad, "not a hash", 0).Err())

			clk.Advance(t, -24*time.Hour+5*time.Second) // put right
			for i := range 3 {
				g, err := s.Take(t.Context(), claim("m1"))
				require.NoError(t, err)
				t.Logf("take %d of m1 after the put right: OK %v reason %v", i, g.OK, g.Reason)
				assert.True(t, g.OK, "m1's windows are sound: take %d", i)
			}
			if h := s.Health(); h != nil {
				t.Logf("Health: %v", h)
			}
			require.NoError(t, c.Del(t.Context(), bad).Err())
			g, err := s.Take(t.Context(), claim("m1"))
			require.NoError(t, err)
			require.True(t, g.OK)
			st, err := s.State(t.Context(), "test", "k", clk.Now())
			require.NoError(t, err)
			assert.GreaterOrEqual(t, st.Cap.MinuteRequests, int64(4),
				"the cap's minute still counts the three takes from before the put right, and this one")
			t.Logf("cap's minute counts %d", st.Cap.MinuteRequests)
		})
	}
}

// A vendor's minute reset, stated by a pool whose clock is 40 s behind the
// server's: the count must hold until the vendor's reset, 50 s on, by
// either clock. Learn passes MinuteReset by the pool's clock, and the
// script counts it by the server's, so the count leaves 40 s early.
func TestLearnResetOnTheServersClock(t *testing.T) {
	for name, open := range clockRedises {
		for _, behind := range []time.Duration{0, 40 * time.Second} {
			t.Run(name+"/behind="+behind.String(), func(t *testing.T) {
				srv := storetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
				pool := storetest.NewClock(srv.Now().Add(-behind))
				s := clockedStore(t, open(t), pool, srv)
				lim := keypool.Limits{RPM: 10}
				g, err := s.Take(t.Context(), take("k", "m", lim, 0, pool.Now())) // the skew from an answer
				require.NoError(t, err)
				require.True(t, g.OK)
				require.NoError(t, g.Reservation.Release(t.Context()))
				require.NoError(t, s.Learn(t.Context(), keypool.Stated{Provider: "test", KeyID: "k", Model: "m",
					Limits: lim, Used: keypool.Limits{RPM: 10, RPD: -1, TPM: -1, TPD: -1},
					MinuteReset: pool.Now().Add(50 * time.Second), Now: pool.Now()}))
				_, err = s.State(t.Context(), "test", "k", pool.Now()) // sends the statement
				require.NoError(t, err)

				srv.Advance(t, 20*time.Second)
				pool.Advance(t, 20*time.Second)
				g, err = s.Take(t.Context(), take("k", "m", lim, 0, pool.Now()))
				require.NoError(t, err)
				assert.False(t, g.OK, "20 s on, the vendor's minute is full for 30 s more")
				if !g.OK {
					assert.WithinDuration(t, pool.Now().Add(30*time.Second), g.RetryAt, 2*time.Second)
				}
			})
		}
	}
}

// The skew is read off each take's answer, whose time is pinned to the
// key's latest take: a key whose windows ride out a step back of the
// server's clock (50 min, less than MaxStepBack) answers a time 50 min
// ahead of the server's, and the next take of another key places its
// calendar day there. Near midnight that is the next day: key b's first
// spend at 23:31 opens a day that lasts until the midnight after next.
func TestSkewNotPinnedToAnotherKeysTake(t *testing.T) {
	for name, open := range clockRedises {
		t.Run(name, func(t *testing.T) {
			pool := storetest.NewClock(time.Date(2026, 3, 1, 23, 30, 0, 0, time.UTC))
			srv := storetest.NewClock(pool.Now().Add(50 * time.Minute)) // ahead, within MaxStepBack
			s := clockedStore(t, open(t), pool, srv)
			g, err := s.Take(t.Context(), take("a", "m", keypool.Limits{}, 0, pool.Now()))
			require.NoError(t, err)
			require.True(t, g.OK)
			srv.Advance(t, -50*time.Minute) // put right: a rides it out
			g, err = s.Take(t.Context(), take("a", "m", keypool.Limits{}, 0, pool.Now()))
			require.NoError(t, err)
			require.True(t, g.OK)

			spend := func(what string) keypool.Grant {
				cl := take("b", "m", keypool.Limits{}, 0, pool.Now())
				cl.Budget, cl.Cost = keypool.Budget{PerDay: 0.05}, 40_000
				g, err := s.Take(t.Context(), cl)
				require.NoError(t, err)
				if g.OK {
					require.NoError(t, g.Reservation.Settle(t.Context(), 0, 40_000))
					_, err = s.State(t.Context(), "test", "b", pool.Now())
					require.NoError(t, err)
				}
				t.Logf("%s: OK %v RetryAt %v", what, g.OK, g.RetryAt)
				return g
			}
			pool.Advance(t, time.Minute)
			srv.Advance(t, time.Minute)
			require.True(t, spend("23:31").OK)
			pool.Advance(t, 40*time.Minute)
			srv.Advance(t, 40*time.Minute)
			assert.True(t, spend("00:11, a new day").OK, "b's $0.04 of yesterday does not count today")
		})
	}
}

// A take recorded while the server ran ahead and released once its clock
// is put right stays counted, as it was moved, in the Redis store as in the
// MemoryStore: the minute of RPM 3 admits nothing more.
func TestReleaseAfterServerClockPutRight(t *testing.T) {
	right := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for name, open := range clockRedises {
		t.Run(name, func(t *testing.T) {
			clk := storetest.NewClock(right.Add(24 * time.Hour))
			s := clockedStore(t, open(t), clk, clk)
			lim := keypool.Limits{RPM: 3}
			var held []keypool.Reservation
			for range 3 {
				g, err := s.Take(t.Context(), take("k", "m", lim, 0, clk.Now()))
				require.NoError(t, err)
				require.True(t, g.OK)
				held = append(held, g.Reservation)
			}
			clk.Advance(t, -24*time.Hour+5*time.Second) // put right
			g, err := s.Take(t.Context(), take("k", "m", lim, 0, clk.Now()))
			require.NoError(t, err)
			require.False(t, g.OK, "the minute holds the three taken ahead")
			require.NoError(t, held[0].Release(t.Context()))
			g, err = s.Take(t.Context(), take("k", "m", lim, 0, clk.Now()))
			require.NoError(t, err)
			assert.False(t, g.OK, "the release left the minute as it was")
		})
	}
}

// The overflow model's entry is never written by a take (take script:
// "if m ~= ARGV[2] and hold - busy > REFRESH"), so its busy stays 0: a
// shift must move the overflow model's windows all the same, which count
// takes in force, and refuse as the MemoryStore does.
func TestShiftKeepsOverflowWindows(t *testing.T) {
	for name, open := range clockRedises {
		t.Run(name, func(t *testing.T) {
			right := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
			clk := storetest.NewClock(right.Add(24 * time.Hour)) // a day ahead
			rs := clockedStore(t, open(t), clk, clk)
			ms := keypool.NewMemoryStore()
			stores := map[string]keypool.Store{"redis": rs, "memory": ms}
			// Fill the key with 1024 models, each with a take in force.
			for i := range 1024 {
				for _, s := range stores {
					g, err := s.Take(t.Context(), take("k", fmt.Sprintf("m%d", i), keypool.Limits{RPM: 1000}, 0, clk.Now()))
					require.NoError(t, err)
					require.True(t, g.OK)
				}
			}
			lim := keypool.Limits{RPM: 2}
			for i := range 2 {
				for sn, s := range stores {
					g, err := s.Take(t.Context(), take("k", fmt.Sprintf("extra%d", i), lim, 0, clk.Now()))
					require.NoError(t, err)
					require.True(t, g.OK, "%s: overflow take %d", sn, i)
				}
			}
			for sn, s := range stores {
				g, err := s.Take(t.Context(), take("k", "extra9", lim, 0, clk.Now()))
				require.NoError(t, err)
				require.False(t, g.OK, "%s: the overflow minute is full while ahead", sn)
			}
			clk.Advance(t, -24*time.Hour+5*time.Second) // put right
			for sn, s := range stores {
				g, err := s.Take(t.Context(), take("k", "extra9", lim, 0, clk.Now()))
				require.NoError(t, err)
				assert.False(t, g.OK, "%s: the overflow minute still holds its two takes after the put right", sn)
			}
		})
	}
}

// The Redis store's form of the same: the server ran two hours ahead, past
// midnight; a take from then settles after it is put right, and after a
// take that carried the day's spend back.
func TestSettleAfterServerClockPutRightCountsItsCost(t *testing.T) {
	for name, open := range clockRedises {
		t.Run(name, func(t *testing.T) {
			right := time.Date(2026, 3, 1, 22, 30, 0, 0, time.UTC)
			pool := storetest.NewClock(right)
			srv := storetest.NewClock(right.Add(2 * time.Hour))
			s := clockedStore(t, open(t), pool, srv)
			claim := func(cost int64) keypool.Claim {
				cl := take("k", "m", keypool.Limits{}, 0, pool.Now())
				cl.Budget, cl.Cost = keypool.Budget{PerDay: 0.05}, cost
				return cl
			}
			a, err := s.Take(t.Context(), claim(10_000))
			require.NoError(t, err)
			require.True(t, a.OK)
			srv.Advance(t, -2*time.Hour+5*time.Second) // put right
			pool.Advance(t, 5*time.Second)
			b, err := s.Take(t.Context(), claim(20_000))
			require.NoError(t, err)
			require.True(t, b.OK)
			require.NoError(t, a.Reservation.Settle(t.Context(), 0, 40_000))
			require.NoError(t, b.Reservation.Settle(t.Context(), 0, 20_000))
			st, err := s.State(t.Context(), "test", "k", pool.Now()) // sends the settles
			require.NoError(t, err)
			assert.InDelta(t, 0.06, st.Spent.PerDay, 1e-9, "the day's spend: both takes' costs")
			g, err := s.Take(t.Context(), claim(20_000))
			require.NoError(t, err)
			assert.False(t, g.OK, "$0.06 spent: no $0.02 more within $0.05 a day")
		})
	}
}

// The Redis store's form of the calendar day whose midnight the clocks
// skip (America/Havana, 2026-03-08): a calendar RPD of 1 admits one.
func TestRedisCalendarDayWhereMidnightIsSkipped(t *testing.T) {
	havana, err := time.LoadLocation("America/Havana")
	require.NoError(t, err)
	for name, open := range clockRedises {
		t.Run(name, func(t *testing.T) {
			clk := storetest.NewClock(time.Date(2026, 3, 8, 12, 0, 0, 0, havana))
			s := clockedStore(t, open(t), clk, clk)
			served := 0
			for range 3 {
				cl := take("k", "m", keypool.Limits{RPD: 1}, 0, clk.Now())
				cl.DayZone = havana
				g, err := s.Take(t.Context(), cl)
				require.NoError(t, err)
				if g.OK {
					served++
				}
			}
			assert.Equal(t, 1, served, "a calendar day of RPD 1")
		})
	}
}

// clockedStore returns a store over c on two clocks the test moves: the
// pool's, and the server's in place of its TIME.
func clockedStore(t *testing.T, c redis.UniversalClient, pool, server *storetest.Clock) *redisstore.Store {
	return newStore(t, c, redisstore.WithPrefix(newPrefix(t, c)),
		redisstore.WithServerClock(server.Now), redisstore.WithClock(pool.Now))
}

// aDayAhead returns a store over c whose server's clock runs a day ahead
// of the pool's, which stands at 2026-03-01 12:00 UTC, the right time.
func aDayAhead(t *testing.T, c redis.UniversalClient) (s *redisstore.Store, pool, srv *storetest.Clock) {
	right := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	pool, srv = storetest.NewClock(right), storetest.NewClock(right.Add(24*time.Hour))
	return clockedStore(t, c, pool, srv), pool, srv
}
