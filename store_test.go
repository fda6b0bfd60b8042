package keypool_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool"
	"github.com/keypool-go/keypool/storetest"
)

// fakeClock is a clock the suite moves.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(_ *testing.T, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)} }

func TestMemoryStoreConformance(t *testing.T) {
	clock := newFakeClock()
	storetest.Run(t, storetest.Harness{
		Open:    func(*testing.T) keypool.Store { return keypool.NewMemoryStore() },
		Now:     clock.Now,
		Advance: clock.Advance,
	})
}

func TestBadgerStoreConformance(t *testing.T) {
	clock := newFakeClock()
	dirs := map[keypool.Store]string{}
	open := func(t *testing.T, dir string) keypool.Store {
		s, err := keypool.OpenBadgerStore(dir)
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		dirs[s] = dir
		return s
	}
	storetest.Run(t, storetest.Harness{
		Open: func(t *testing.T) keypool.Store { return open(t, t.TempDir()) },
		Reopen: func(t *testing.T, s keypool.Store) keypool.Store {
			require.NoError(t, s.(*keypool.BadgerStore).Close())
			return open(t, dirs[s])
		},
		Now:     clock.Now,
		Advance: clock.Advance,
	})
}
