package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool"
	"github.com/keypool-go/keypool/redisstore"
	"github.com/keypool-go/keypool/storetest"
)

// harness returns the suite's harness over a Redis: each store has a prefix
// of its own; Reopen closes a store and opens one over the same prefix.
func harness(c redis.UniversalClient, opts ...redisstore.Option) storetest.Harness {
	prefixes := map[keypool.Store]string{}
	open := func(t *testing.T, prefix string) keypool.Store {
		s := newStore(t, c, append(opts, redisstore.WithPrefix(prefix))...)
		prefixes[s] = prefix
		return s
	}
	return storetest.Harness{
		Open: func(t *testing.T) keypool.Store { return open(t, newPrefix(t, c)) },
		Reopen: func(t *testing.T, s keypool.Store) keypool.Store {
			require.NoError(t, s.(*redisstore.Store).Close())
			return open(t, prefixes[s])
		},
	}
}

func TestConformanceMiniredis(t *testing.T) {
	f := newFakeRedis(t)
	h := harness(f.client(t), redisstore.WithClock(f.Now))
	h.Now, h.Advance = f.Now, f.Advance
	storetest.Run(t, h)
}

func TestConformanceRedis(t *testing.T) {
	c := realRedis(t)
	t.Run("ServerClock", func(t *testing.T) { storetest.Run(t, realHarness(t, c)) })
	t.Run("TestClock", func(t *testing.T) { storetest.Run(t, clockHarness(c)) })
}

// clockHarness is the suite's harness over a real Redis on a clock the
// test moves: the scripts count by it in place of the server's TIME
// (WithServerClock), so the cases that need hours run in a moment.
func clockHarness(c redis.UniversalClient) storetest.Harness {
	clk := storetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	h := harness(c, redisstore.WithServerClock(clk.Now), redisstore.WithClock(clk.Now))
	h.Now, h.Advance = clk.Now, clk.Advance
	return h
}

// realHarness is the suite's harness over a real Redis, on its clock: the
// time passes as it does.
func realHarness(t *testing.T, c redis.UniversalClient) storetest.Harness {
	h := harness(c)
	h.Now = func() time.Time {
		// Any node's, on a Cluster: the tests' runs on one machine.
		now, err := c.Time(context.Background()).Result()
		if err != nil {
			t.Errorf("TIME: %v", err)
		}
		return now
	}
	h.Advance = func(_ *testing.T, d time.Duration) { time.Sleep(d) }
	h.RealTime = true
	return h
}
