package keypool

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// served returns the IDs of the keys n calls of Pool.Do were served by.
func served(t *testing.T, p *Pool, n int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for range n {
		require.NoError(t, p.Do(t.Context(), "m", func(_ context.Context, k Key) error {
			got[k.ID]++
			return nil
		}))
	}
	return got
}

func statsOf(t *testing.T, p *Pool, id string) KeyStats {
	t.Helper()
	for _, ks := range p.Stats() {
		if ks.ID == id {
			return ks
		}
	}
	t.Fatalf("no key %s in Stats", id)
	return KeyStats{}
}

// A disabled key serves nothing until it is enabled, Stats says who
// disabled it and when, and a pool whose keys are all disabled says so at
// once, without waiting for a key that will not come back by itself.
func TestDisableTakesAKeyOutOfRotation(t *testing.T) {
	clock := newTestClock()
	pool, err := New("openai", threeKeys(), WithClock(clock.Now), WaitForKey(time.Hour))
	require.NoError(t, err)
	require.NoError(t, pool.Disable(t.Context(), "b", "operator_tokens[0]"))
	got := served(t, pool, 30)
	assert.NotContains(t, got, "b")
	assert.Equal(t, 30, got["a"]+got["c"])
	assert.Equal(t, map[string]int{"a": 15, "c": 15}, got, "the others share its turns")
	d := statsOf(t, pool, "b").Disabled
	require.NotNil(t, d)
	assert.Equal(t, Disabled{By: "operator_tokens[0]", At: clock.Now()}, *d)
	assert.Nil(t, statsOf(t, pool, "a").Disabled)

	require.NoError(t, pool.Disable(t.Context(), "a", "ops"))
	require.NoError(t, pool.Disable(t.Context(), "c", "ops"))
	start := time.Now()
	err = pool.Do(t.Context(), "m", func(context.Context, Key) error { t.Error("no key should serve"); return nil })
	var na *NoAvailableKeyError
	require.ErrorAs(t, err, &na)
	assert.Zero(t, na.RetryAt, "no key comes back by itself")
	assert.Contains(t, err.Error(), "(3 disabled)")
	assert.Less(t, time.Since(start), time.Second, "the pool's hour of waiting is not spent on disabled keys")

	require.NoError(t, pool.Enable(t.Context(), "b"))
	require.NoError(t, pool.Enable(t.Context(), "b"), "a key in rotation stays in")
	assert.Equal(t, map[string]int{"b": 4}, served(t, pool, 4))
	assert.Nil(t, statsOf(t, pool, "b").Disabled)
}

// What Disable and Enable refuse changes nothing.
func TestDisableRefusals(t *testing.T) {
	pool, err := New("openai", threeKeys())
	require.NoError(t, err)
	for _, tc := range []struct {
		id, by, want string
	}{
		{"nope", "ops", `no key with ID "nope"`},
		{"a", strings.Repeat("x", 129), "129 bytes, more than 128"},
		{"a", "ops\x1b[2J", "control character"},
		{"a", "ops\nkeypool: forged line", "control character"},
		{"a", "\xff", "not UTF-8"},
	} {
		err := pool.Disable(t.Context(), tc.id, tc.by)
		require.Error(t, err, "%q by %q", tc.id, tc.by)
		assert.Contains(t, err.Error(), tc.want)
		assert.NotContains(t, err.Error(), "forged", "the error never quotes what it refuses")
	}
	assert.ErrorContains(t, pool.Enable(t.Context(), "nope"), `no key with ID "nope"`)
	assert.Len(t, served(t, pool, 3), 3, "every key still serves")
}

// failingDisabled is a store whose DisabledStore calls fail while fail is
// set.
type failingDisabled struct {
	Store
	fail bool
}

var errDisabledStore = errors.New("the disabled store is down")

func (s *failingDisabled) SetDisabled(ctx context.Context, provider, keyID string, d *Disabled) error {
	if s.fail {
		return errDisabledStore
	}
	return s.Store.(DisabledStore).SetDisabled(ctx, provider, keyID, d)
}

func (s *failingDisabled) Disabled(ctx context.Context, provider string) (map[string]Disabled, error) {
	if s.fail {
		return nil, errDisabledStore
	}
	return s.Store.(DisabledStore).Disabled(ctx, provider)
}

// A store that cannot keep a change refuses it: the key stays as it was.
// A store that cannot be read keeps what the pool knew, and says so to
// OnStoreError.
func TestDisableWithAFailingStore(t *testing.T) {
	clock := newTestClock()
	store := &failingDisabled{Store: NewMemoryStore()}
	var heard []error
	pool, err := New("openai", threeKeys(), WithStore(store), WithClock(clock.Now),
		OnStoreError(func(err error) { heard = append(heard, err) }))
	require.NoError(t, err)
	store.fail = true
	err = pool.Disable(t.Context(), "a", "ops")
	require.ErrorIs(t, err, errDisabledStore)
	assert.Nil(t, statsOf(t, pool, "a").Disabled, "not kept, not done")
	assert.Contains(t, served(t, pool, 3), "a")

	store.fail = false
	require.NoError(t, pool.Disable(t.Context(), "a", "ops"))
	store.fail = true
	clock.Advance(DisabledRefresh)
	assert.NotContains(t, served(t, pool, 6), "a", "the read failed: the key stays out")
	require.Len(t, heard, 1)
	assert.ErrorIs(t, heard[0], errDisabledStore)
	store.fail = false
	clock.Advance(DisabledRefresh)
	assert.NotContains(t, served(t, pool, 3), "a")
	require.Len(t, heard, 2)
	assert.NoError(t, heard[1], "the store answers again")
}

// Replicas over one store hear of a key another disabled or enabled within
// DisabledRefresh; and a read of the store that began before a change of
// the pool's own does not undo it.
func TestDisabledReachesEveryReplica(t *testing.T) {
	clock := newTestClock()
	store := NewMemoryStore()
	one, err := New("openai", threeKeys(), WithStore(store), WithClock(clock.Now))
	require.NoError(t, err)
	two, err := New("openai", threeKeys(), WithStore(store), WithClock(clock.Now))
	require.NoError(t, err)
	require.NoError(t, one.Disable(t.Context(), "a", "ops"))
	assert.Contains(t, served(t, two, 3), "a", "not read yet")
	clock.Advance(DisabledRefresh)
	assert.NotContains(t, served(t, two, 6), "a", "read at the first request DisabledRefresh later")
	d := statsOf(t, two, "a").Disabled
	require.NotNil(t, d)
	assert.Equal(t, "ops", d.By)

	require.NoError(t, one.Enable(t.Context(), "a"))
	clock.Advance(DisabledRefresh)
	assert.Contains(t, served(t, two, 3), "a", "enabled on the other replica")

	require.NoError(t, one.Disable(t.Context(), "c", "ops"))
	three, err := New("openai", threeKeys(), WithStore(store), WithClock(clock.Now))
	require.NoError(t, err)
	assert.NotContains(t, served(t, three, 6), "c", "a new pool reads the store before its first request")
}

// A key disabled stays disabled across a restart over the Badger store,
// from the first request on.
func TestDisabledSurvivesARestart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	open := func() *BadgerStore {
		s, err := OpenBadgerStore(dir)
		require.NoError(t, err)
		return s
	}
	s := open()
	pool, err := New("openai", threeKeys(), WithStore(s))
	require.NoError(t, err)
	require.NoError(t, pool.Disable(t.Context(), "b", "operator_tokens[1]"))
	require.NoError(t, pool.Close())
	require.NoError(t, s.Close())

	s = open()
	t.Cleanup(func() { _ = s.Close() })
	pool, err = New("openai", threeKeys(), WithStore(s))
	require.NoError(t, err)
	assert.NotContains(t, served(t, pool, 6), "b")
	d := statsOf(t, pool, "b").Disabled
	require.NotNil(t, d)
	assert.Equal(t, "operator_tokens[1]", d.By)
	require.NoError(t, pool.Enable(t.Context(), "b"))
	require.NoError(t, s.Close())
	s = open()
	pool, err = New("openai", threeKeys(), WithStore(s))
	require.NoError(t, err)
	assert.Contains(t, served(t, pool, 3), "b", "enabled before the restart")
}

// A disabled key's secret is never sent, through the transport too; and a
// by another program wrote in the store, that Disable would refuse, is
// shown as unreadable.
func TestDisabledKeyIsNeverSent(t *testing.T) {
	v, srv := newVendor(t)
	store := NewMemoryStore()
	require.NoError(t, store.(DisabledStore).SetDisabled(t.Context(), "openai", "b",
		&Disabled{By: "\x1b]8;;http://evil\x07click", At: time.Now()}))
	pool, err := New("openai", threeKeys(), WithStore(store))
	require.NoError(t, err)
	client := &http.Client{Transport: pool.Transport(nil)}
	for range 6 {
		resp, err := client.Post(srv.URL+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"gpt-4o-mini","messages":[]}`))
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
	}
	assert.NotContains(t, v.keys(), "sk-b")
	assert.Len(t, v.keys(), 6)
	assert.Equal(t, unreadableBy, statsOf(t, pool, "b").Disabled.By)
}

// racingDisabled is a store whose read of the disabled keys runs during,
// as it were, a change of the pool's: it reads, then lets during run,
// then returns what it read before.
type racingDisabled struct {
	Store
	during func()
}

func (s *racingDisabled) Disabled(ctx context.Context, provider string) (map[string]Disabled, error) {
	out, err := s.Store.(DisabledStore).Disabled(ctx, provider)
	if f := s.during; f != nil {
		s.during = nil
		f()
	}
	return out, err
}

func (s *racingDisabled) SetDisabled(ctx context.Context, provider, keyID string, d *Disabled) error {
	return s.Store.(DisabledStore).SetDisabled(ctx, provider, keyID, d)
}

// A read of the store that began before a Disable of the pool's own does
// not undo it.
func TestDisableDuringARead(t *testing.T) {
	clock := newTestClock()
	store := &racingDisabled{Store: NewMemoryStore()}
	pool, err := New("openai", threeKeys(), WithStore(store), WithClock(clock.Now))
	require.NoError(t, err)
	store.during = func() { require.NoError(t, pool.Disable(t.Context(), "a", "ops")) }
	clock.Advance(DisabledRefresh)
	served(t, pool, 1)
	assert.NotNil(t, statsOf(t, pool, "a").Disabled, "the read from before the change is dropped")
	assert.NotContains(t, served(t, pool, 6), "a")
}
