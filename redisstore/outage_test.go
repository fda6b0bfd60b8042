package redisstore_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool"
	"github.com/keypool-go/keypool/redisstore"
)

// server is a Redis a test can stop and start again on the same address.
type server interface {
	addr() string
	down(t *testing.T)
	up(t *testing.T)
	// spurious reports an error that comes from the test server itself.
	spurious(err error) bool
}

// miniServer is a miniredis: it keeps its data across a restart.
type miniServer struct{ m *miniredis.Miniredis }

func (s miniServer) addr() string    { return s.m.Addr() }
func (s miniServer) down(*testing.T) { s.m.Close() }
func (s miniServer) up(t *testing.T) { require.NoError(t, s.m.Restart()) }

// spurious reports the error miniredis answers when Close stops it while
// it runs a script: its Lua state is torn down under the script.
func (s miniServer) spurious(err error) bool { return strings.Contains(err.Error(), "runtime error") }

// realServer is a redis-server: it comes back empty.
type realServer struct{ r *redisServer }

func (s realServer) addr() string      { return s.r.addr }
func (s realServer) down(*testing.T)   { s.r.stop() }
func (s realServer) up(t *testing.T)   { require.NoError(t, s.r.restart()) }
func (realServer) spurious(error) bool { return false }

// servers are the Redis servers the outage tests stop and start: miniredis
// always, a redis-server when one is on the PATH.
var servers = []struct {
	name  string
	start func(t *testing.T) server
}{
	{"miniredis", func(t *testing.T) server { return miniServer{miniredis.RunT(t)} }},
	{"redis-server", func(t *testing.T) server { return realServer{ownRedis(t)} }},
}

// statuses records what a store logs of Redis stopping to answer (false)
// and answering again (true): it is the store's slog handler.
type statuses struct {
	mu     sync.Mutex
	events []bool
}

func (s *statuses) logger() *slog.Logger { return slog.New(s) }

func (s *statuses) Enabled(context.Context, slog.Level) bool { return true }
func (s *statuses) WithAttrs([]slog.Attr) slog.Handler       { return s }
func (s *statuses) WithGroup(string) slog.Handler            { return s }

func (s *statuses) Handle(_ context.Context, r slog.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case strings.Contains(r.Message, "redis unavailable"):
		s.events = append(s.events, false)
	case strings.Contains(r.Message, "redis answers again"):
		s.events = append(s.events, true)
	}
	return nil
}

func (s *statuses) get() []bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]bool(nil), s.events...)
}

// load takes and settles from several goroutines until stopped, and
// returns how many takes were granted and the errors other than
// ErrUnavailable and those of the server itself.
func load(s keypool.Store, r server, model string) (stop func() (granted int64, unexpected []error)) {
	var granted atomic.Int64
	var mu sync.Mutex
	var errs []error
	done := make(chan struct{})
	var wg sync.WaitGroup
	lim := keypool.Limits{RPM: 1 << 40, TPM: 1 << 50}
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				case <-time.After(2 * time.Millisecond):
				}
				tk := take("load", model, lim, 100, time.Now())
				g, err := s.Take(context.Background(), tk)
				if err == nil && g.OK {
					granted.Add(1)
					err = g.Reservation.Settle(context.Background(), 60, 0)
				}
				if err != nil && !errors.Is(err, redisstore.ErrUnavailable) && !r.spurious(err) {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	return func() (int64, []error) {
		close(done)
		wg.Wait()
		return granted.Load(), errs
	}
}

// probeEvery is how often the outage tests' stores ask a Redis taken as
// down whether it is back: a second by default.
const probeEvery = 50 * time.Millisecond

// eventually waits up to 15 seconds for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, 15*time.Second, 20*time.Millisecond, what)
}

func TestRedisDownRefuses(t *testing.T) {
	t.Parallel() // it waits on servers and timeouts, in real time
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			r := srv.start(t)
			c := redis.NewClient(&redis.Options{Addr: r.addr()})
			t.Cleanup(func() { _ = c.Close() })
			var st statuses
			s := newStore(t, c, redisstore.WithLogger(st.logger()), redisstore.WithProbeEvery(probeEvery))
			var hmu sync.Mutex
			var heard []bool // Health() == nil at each notice
			defer s.NotifyHealth(func() {
				hmu.Lock()
				defer hmu.Unlock()
				heard = append(heard, s.Health() == nil)
			})()
			ctx := t.Context()
			stop := load(s, r, "m")

			benchEnd := time.Now().Add(500 * time.Millisecond)
			require.NoError(t, s.Bench(ctx, keypool.Bench{Provider: "test", KeyID: "k", Model: "b", Kind: keypool.KindRate,
				Until: benchEnd}))
			g, err := s.Take(ctx, take("k", "b", keypool.Limits{}, 0, time.Now()))
			require.NoError(t, err)
			require.False(t, g.OK, "benched before the outage")

			r.down(t)
			var refused error
			eventually(t, "a take fails once Redis is down", func() bool {
				_, refused = s.Take(ctx, take("k", "m", keypool.Limits{RPM: 100}, 0, time.Now()))
				return refused != nil
			})
			assert.ErrorIs(t, refused, redisstore.ErrUnavailable)
			assert.True(t, strings.HasPrefix(refused.Error(), "redisstore: redis unavailable: "), "error text %q", refused)
			began := time.Now()
			_, err = s.Take(ctx, take("k", "m", keypool.Limits{RPM: 100}, 0, time.Now()))
			assert.ErrorIs(t, err, redisstore.ErrUnavailable)
			assert.Less(t, time.Since(began), 100*time.Millisecond, "a take while Redis is known down fails at once")
			assert.ErrorIs(t, s.Bench(ctx, keypool.Bench{Provider: "test", KeyID: "k", Model: "m", Kind: keypool.KindRate,
				Until: time.Now().Add(time.Hour)}), redisstore.ErrUnavailable, "no bench is taken while Redis is down")
			eventually(t, "the store reports the outage", func() bool { return len(st.get()) >= 1 })
			time.Sleep(time.Until(benchEnd)) // the bench of b ends during the outage

			r.up(t)
			eventually(t, "takes go through once Redis is back", func() bool {
				g, err := s.Take(ctx, take("k", "m", keypool.Limits{RPM: 100}, 0, time.Now()))
				return err == nil && g.OK
			})
			g, err = s.Take(ctx, take("k", "b", keypool.Limits{}, 0, time.Now()))
			require.NoError(t, err)
			assert.True(t, g.OK, "the bench made before the outage has ended")
			granted, unexpected := stop()
			assert.Positive(t, granted)
			assert.Empty(t, unexpected, "errors other than ErrUnavailable")
			eventually(t, "the store reports Redis back", func() bool { return len(st.get()) == 2 })
			assert.Equal(t, []bool{false, true}, st.get())
			hmu.Lock()
			defer hmu.Unlock()
			assert.Equal(t, []bool{false, true}, heard, "NotifyHealth heard it go down and come back, once each")
		})
	}
}

func TestRedisDownFallsBackToLocalWindows(t *testing.T) {
	t.Parallel() // it waits on servers and timeouts, in real time
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			r := srv.start(t)
			c := redis.NewClient(&redis.Options{Addr: r.addr()})
			t.Cleanup(func() { _ = c.Close() })
			var st statuses
			s := newStore(t, c, redisstore.WithLocalFallback(2), redisstore.WithLogger(st.logger()),
				redisstore.WithProbeEvery(probeEvery))
			ctx := t.Context()
			stop := load(s, r, "load")
			lim := keypool.Limits{RPM: 10}

			r.down(t)
			eventually(t, "the store reports the outage", func() bool { return len(st.get()) >= 1 })

			// Each of the two replicas takes half of RPM 10 from its own
			// windows.
			var grants []keypool.Grant
			tk := take("k", "m", lim, 0, time.Now())
			for range 5 {
				g, err := s.Take(ctx, tk)
				require.NoError(t, err)
				require.True(t, g.OK)
				grants = append(grants, g)
			}
			g, err := s.Take(ctx, tk)
			require.NoError(t, err)
			assert.False(t, g.OK, "the sixth take of half of RPM 10")
			assert.Equal(t, keypool.KindRate, g.Reason)
			require.NoError(t, grants[0].Reservation.Release(ctx))
			state, err := s.State(ctx, "test", "k", time.Now())
			require.NoError(t, err)
			require.Len(t, state.Models, 1)
			assert.Equal(t, int64(4), state.Models[0].Usage.MinuteRequests, "a local grant released locally")

			long := time.Now().Add(time.Hour).Truncate(time.Millisecond)
			require.NoError(t, s.Bench(ctx, keypool.Bench{Provider: "test", KeyID: "k", Model: "x", Kind: keypool.KindQuota,
				Until: long, Level: 2}))
			short := time.Now().Add(500 * time.Millisecond)
			require.NoError(t, s.Bench(ctx, keypool.Bench{Provider: "test", KeyID: "k", Model: "y", Kind: keypool.KindRate,
				Until: short}))
			g, err = s.Take(ctx, take("k", "x", lim, 0, time.Now()))
			require.NoError(t, err)
			assert.False(t, g.OK, "benched during the outage")

			r.up(t)
			eventually(t, "the store reports Redis back", func() bool { return len(st.get()) == 2 })
			assert.Equal(t, []bool{false, true}, st.get())
			// The benches made during the outage are in Redis now; the one
			// of y has ended.
			other := newStore(t, c)
			g, err = other.Take(ctx, take("k", "x", lim, 0, time.Now()))
			require.NoError(t, err)
			assert.False(t, g.OK, "another replica sees the bench made during the outage")
			assert.Equal(t, keypool.KindQuota, g.Reason)
			// The bench ends by the server's clock, read back by the
			// replica's: equal within the milliseconds of a round trip.
			assert.WithinDuration(t, long, g.RetryAt, 50*time.Millisecond, "RetryAt")
			assert.Equal(t, 2, g.Level)
			// Redis keeps a bench's end rounded up to the millisecond, and
			// its clock in whole ones.
			time.Sleep(time.Until(short) + 3*time.Millisecond)
			g, err = s.Take(ctx, take("k", "y", lim, 0, time.Now()))
			require.NoError(t, err)
			assert.True(t, g.OK, "a bench made during the outage ends when it should")

			granted, unexpected := stop()
			assert.Positive(t, granted)
			assert.Empty(t, unexpected)
		})
	}
}

func TestNewWithRedisDown(t *testing.T) {
	t.Parallel() // it waits on servers and timeouts, in real time
	m := miniredis.RunT(t)
	addr := m.Addr()
	m.Close()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })

	_, err := redisstore.New(c)
	assert.ErrorIs(t, err, redisstore.ErrUnavailable, "New without a fallback")

	s := newStore(t, c, redisstore.WithLocalFallback(3))
	g, err := s.Take(t.Context(), take("k", "m", keypool.Limits{RPM: 7}, 0, time.Now()))
	require.NoError(t, err)
	assert.True(t, g.OK, "New with a fallback serves locally")
}
