package keypool_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool"
	"github.com/keypool-go/keypool/storetest"
)

func newFakeClock() *storetest.Clock {
	return storetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
}

func memoryHarness() storetest.Harness {
	clock := newFakeClock()
	return storetest.Harness{
		Open:    func(*testing.T) keypool.Store { return keypool.NewMemoryStore() },
		Now:     clock.Now,
		Advance: clock.Advance,
	}
}

func TestMemoryStoreConformance(t *testing.T) { storetest.Run(t, memoryHarness()) }

// TestMemoryStoreParity runs Parity against the MemoryStore itself: what
// it proves is the suite's own determinism, that two stores given the same
// steps answer alike.
func TestMemoryStoreParity(t *testing.T) { storetest.Parity(t, memoryHarness()) }

func TestBadgerStoreConformance(t *testing.T) { storetest.Run(t, badgerHarness()) }

// TestBadgerStoreParity holds the Badger store to the MemoryStore's
// answers, step for step.
func TestBadgerStoreParity(t *testing.T) { storetest.Parity(t, badgerHarness()) }

func badgerHarness() storetest.Harness {
	clock := newFakeClock()
	dirs := map[keypool.Store]string{}
	open := func(t *testing.T, dir string) keypool.Store {
		s, err := keypool.OpenBadgerStore(dir)
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		dirs[s] = dir
		return s
	}
	return storetest.Harness{
		Open: func(t *testing.T) keypool.Store { return open(t, t.TempDir()) },
		Reopen: func(t *testing.T, s keypool.Store) keypool.Store {
			require.NoError(t, s.(*keypool.BadgerStore).Close())
			return open(t, dirs[s])
		},
		Now:     clock.Now,
		Advance: clock.Advance,
	}
}

// TestStoreConventions holds the exported conventions to what the
// package's stores keep: an account's state under AccountID, and the model
// names CheckModel refuses refused by Take.
func TestStoreConventions(t *testing.T) {
	s := keypool.NewMemoryStore()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	_, err := s.Take(t.Context(), keypool.Claim{Provider: "p", KeyID: "k", Account: "org", Model: "m", Limits: keypool.Limits{RPM: 5}, Now: now})
	require.NoError(t, err)
	st, err := s.State(t.Context(), "p", keypool.AccountID("org"), now)
	require.NoError(t, err)
	require.Len(t, st.Models, 1, "the account's state, under AccountID")
	require.Equal(t, int64(1), st.Models[0].Usage.MinuteRequests)
	require.NotEqual(t, "org", keypool.AccountID("org"), "no key's ID is an account's")

	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"gpt-4o", true},
		{string(make([]byte, 256)), false}, // NULs
		{"a\x7fb", false},
		{"\xff", false},
		{strings.Repeat("m", 257), false},
		{strings.Repeat("m", 256), true},
	} {
		err := keypool.CheckModel(c.name)
		require.Equal(t, c.ok, err == nil, "CheckModel(%q) = %v", c.name, err)
		_, takeErr := s.Take(t.Context(), keypool.Claim{Provider: "p", KeyID: "k", Model: c.name, Now: now})
		require.Equal(t, c.ok, takeErr == nil, "Take of model %q = %v", c.name, takeErr)
	}
}
