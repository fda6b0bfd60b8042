package redisstore_test

import (
	"errors"
	"log/slog"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool"
	"github.com/keypool-go/keypool/redisstore"
)

// Issue 36: a Redis that pauses (SIGSTOP: a stalled host, a long
// DEBUG SLEEP) is noticed within the store's timeout, not go-redis's
// seconds: without local windows a take fails with ErrUnavailable, with
// them it is served from them; when Redis runs again the store finds it
// back within a probe.
func TestPauseNoticedWithinTheTimeout(t *testing.T) {
	t.Parallel() // it waits on servers and timeouts, in real time
	for _, c := range []struct {
		name string
		opts []redisstore.Option
	}{
		{"refuses", nil},
		{"local windows", []redisstore.Option{redisstore.WithLocalFallback(2)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := ownRedis(t)
			s, err := redisstore.Open("redis://"+r.addr+"/0", append(c.opts, redisstore.WithProbeEvery(probeEvery))...)
			require.NoError(t, err)
			defer s.Close()
			lim := keypool.Limits{RPM: 10}
			g, err := s.Take(t.Context(), take("k", "m", lim, 0, time.Now()))
			require.NoError(t, err)
			require.True(t, g.OK)

			require.NoError(t, r.cmd.Process.Signal(syscall.SIGSTOP))
			resumed := false
			resume := func() {
				if !resumed {
					resumed = true
					require.NoError(t, r.cmd.Process.Signal(syscall.SIGCONT))
				}
			}
			defer resume()
			start := time.Now()
			g, err = s.Take(t.Context(), take("k", "m", lim, 0, time.Now()))
			took := time.Since(start)
			if c.opts == nil {
				require.Error(t, err)
				assert.True(t, errors.Is(err, redisstore.ErrUnavailable), "Take while paused = %v, want ErrUnavailable", err)
			} else {
				require.NoError(t, err)
				assert.True(t, g.OK, "a take from the local windows")
			}
			assert.Less(t, took, redisstore.DefaultTimeout+500*time.Millisecond, "a take while Redis is paused took %v", took)
			assert.Error(t, s.Health(), "Health while Redis is paused")

			resume()
			require.Eventually(t, func() bool { return s.Health() == nil }, 5*time.Second, 20*time.Millisecond,
				"the store did not find Redis back: %v", s.Health())
			g, err = s.Take(t.Context(), take("k", "m", lim, 0, time.Now()))
			require.NoError(t, err)
			assert.True(t, g.OK)
		})
	}
}

// WithTimeout refuses what bounds nothing.
func TestWithTimeoutMustBePositive(t *testing.T) {
	f := newFakeRedis(t)
	for _, d := range []time.Duration{0, -time.Second} {
		_, err := redisstore.New(f.client(t), redisstore.WithTimeout(d))
		assert.ErrorContains(t, err, "WithTimeout", "WithTimeout(%v)", d)
	}
	s, err := redisstore.New(f.client(t), redisstore.WithTimeout(50*time.Millisecond))
	require.NoError(t, err)
	require.NoError(t, s.Close())
}

// TestIdlePauseNoticed: a store that no call uses notices a pause of Redis
// by its heartbeat — on its pool's slot — within a probe and a timeout,
// tells NotifyHealth, and hears Redis back once it resumes.
func TestIdlePauseNoticed(t *testing.T) {
	t.Parallel() // it waits on a server and timeouts, in real time
	r := ownRedis(t)
	s, err := redisstore.Open("redis://"+r.addr+"/0", redisstore.WithProbeEvery(probeEvery), redisstore.WithTimeout(200*time.Millisecond),
		redisstore.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	changes := servedAndWatched(t, s)

	require.NoError(t, r.cmd.Process.Signal(syscall.SIGSTOP))
	paused := time.Now()
	select {
	case up := <-changes:
		assert.False(t, up)
		assert.Less(t, time.Since(paused), time.Second, "noticed within a probe and a timeout, with no call")
	case <-time.After(3 * time.Second):
		require.NoError(t, r.cmd.Process.Signal(syscall.SIGCONT))
		t.Fatal("an idle store did not notice Redis paused")
	}
	assert.Error(t, s.Health())
	require.NoError(t, r.cmd.Process.Signal(syscall.SIGCONT))
	select {
	case up := <-changes:
		assert.True(t, up, "Redis back")
	case <-time.After(5 * time.Second):
		t.Fatal("the store did not hear Redis back")
	}
}
