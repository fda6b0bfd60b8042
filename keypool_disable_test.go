package keypool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dgraph-io/badger/v4"
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

// readOnRequest sends one request through p — a request that finds a
// read of the disabled keys due starts it, and does not wait for it — and
// waits for the read.
func readOnRequest(t *testing.T, p *Pool) {
	t.Helper()
	served(t, p, 1)
	p.readsAside.Wait()
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
		{"a", "ops\x1b[2J", "control or format character"},
		{"a", "ops\nkeypool: forged line", "control or format character"},
		{"a", "ops\u202eforged", "control or format character"},
		{"a", "ops\u2028forged", "control or format character"},
		{"a", "\xff", "not UTF-8"},
	} {
		err := pool.Disable(t.Context(), tc.id, tc.by)
		require.Error(t, err, "%q by %q", tc.id, tc.by)
		assert.Contains(t, err.Error(), tc.want)
		assert.NotContains(t, err.Error(), "forged", "the error never quotes what it refuses")
	}
	assert.ErrorContains(t, pool.Enable(t.Context(), "nope"), `no key with ID "nope"`)
	assert.Len(t, served(t, pool, 3), 3, "every key still serves")
	require.NoError(t, pool.Disable(t.Context(), "a", strings.Repeat("é", 64)), "128 bytes")
	require.NoError(t, pool.Enable(t.Context(), "a"))
	assert.Len(t, served(t, pool, 3), 3, "every key still serves")
}

// failingDisabled is a store whose DisabledStore calls fail while fail is
// set.
type failingDisabled struct {
	Store
	fail  bool
	reads int // the calls of Disabled
}

var errDisabledStore = errors.New("the disabled store is down")

func (s *failingDisabled) SetDisabled(ctx context.Context, provider, keyID string, d *Disabled) error {
	if s.fail {
		return errDisabledStore
	}
	return s.Store.(DisabledStore).SetDisabled(ctx, provider, keyID, d)
}

func (s *failingDisabled) Disabled(ctx context.Context, provider string) (map[string]Disabled, error) {
	s.reads++
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
	pool.readsAside.Wait()
	require.Len(t, heard, 1)
	assert.ErrorIs(t, heard[0], errDisabledStore)
	store.fail = false
	clock.Advance(DisabledRefresh)
	assert.NotContains(t, served(t, pool, 3), "a")
	pool.readsAside.Wait()
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
	readOnRequest(t, two)
	assert.NotContains(t, served(t, two, 6), "a", "read at the first request DisabledRefresh later")
	d := statsOf(t, two, "a").Disabled
	require.NotNil(t, d)
	assert.Equal(t, "ops", d.By)

	require.NoError(t, one.Enable(t.Context(), "a"))
	clock.Advance(DisabledRefresh)
	readOnRequest(t, two)
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
	store.during = func() { assert.NoError(t, pool.Disable(t.Context(), "a", "ops")) }
	clock.Advance(DisabledRefresh)
	readOnRequest(t, pool)
	assert.NotNil(t, statsOf(t, pool, "a").Disabled, "the read from before the change is dropped")
	assert.NotContains(t, served(t, pool, 6), "a")
}

// A Fallback whose route a replica's disabled key benched — its other key
// out of quota for the day — takes the route back once another replica
// enables the key, though no request reached the route's pool meanwhile;
// a route with every key disabled names no return, and leaves the
// request's RetryAt to the routes that do; an idle replica's Stats hears
// of a key another disabled.
func TestDisabledAcrossReplicasFallback(t *testing.T) {
	clock := newTestClock()
	store := NewMemoryStore()
	keys := []Key{{Secret: "a1", ID: "a1"}, {Secret: "a2", ID: "a2"}}
	one, err := New("free-a", keys, WithStore(store), WithClock(clock.Now))
	require.NoError(t, err)
	first, _ := simRoute(t, "free-a", clock, 100, "a1", "a2")
	first.Pool, err = New("free-a", keys, WithStore(store), WithClock(clock.Now))
	require.NoError(t, err)
	second, _ := simRoute(t, "free-b", clock, 100, "b1")
	var routes []string
	fb, err := NewFallback([]Route{first, second}, WithClock(clock.Now), OnRoute(func(e RouteEvent) { routes = append(routes, e.Route) }))
	require.NoError(t, err)
	send := func() {
		t.Helper()
		resp, err := fb.RoundTrip(chatRequest(t, "gpt-4o-mini"))
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}

	require.NoError(t, one.Disable(t.Context(), "a2", "ops"))
	require.NoError(t, store.Bench(t.Context(), Bench{Provider: "free-a", KeyID: "a1", AllModels: true,
		Kind: KindQuota, Until: clock.Now().Add(24 * time.Hour)}))
	clock.Advance(DisabledRefresh)
	assert.NotNil(t, statsOf(t, first.Pool, "a2").Disabled, "an idle replica's Stats reads the store")
	send()
	assert.Equal(t, []string{"free-b"}, routes, "a1 spent, a2 disabled: the route is benched for the day")

	require.NoError(t, one.Enable(t.Context(), "a2"))
	clock.Advance(DisabledRefresh)
	send()
	assert.Equal(t, []string{"free-b", "free-b"}, routes, "the look at the benched route starts a read of the store, and does not wait for it")
	first.Pool.readsAside.Wait()
	send()
	assert.Equal(t, []string{"free-b", "free-b", "free-a"}, routes, "another replica enabled a2: the route is back")

	// Every key of the first route disabled, the second benched until T:
	// the request's RetryAt is T.
	require.NoError(t, first.Pool.Disable(t.Context(), "a1", "ops"))
	require.NoError(t, first.Pool.Disable(t.Context(), "a2", "ops"))
	require.NoError(t, second.Pool.store.Bench(t.Context(), Bench{Provider: "free-b", KeyID: "b1", AllModels: true,
		Kind: KindRate, Until: clock.Now().Add(time.Minute)}))
	_, err = fb.RoundTrip(chatRequest(t, "gpt-4o-mini"))
	var na *NoAvailableKeyError
	require.ErrorAs(t, err, &na)
	assert.Equal(t, clock.Now().Add(time.Minute), na.RetryAt)
	assert.Contains(t, err.Error(), "(in 1m0s; 2 disabled)")
	reversed, err := NewFallback([]Route{second, first}, WithClock(clock.Now))
	require.NoError(t, err)
	_, err = reversed.RoundTrip(chatRequest(t, "gpt-4o-mini"))
	require.ErrorAs(t, err, &na)
	assert.Equal(t, clock.Now().Add(time.Minute), na.RetryAt, "in either order")
}

// A request waiting for a key — one benched for 30 s, the other disabled
// — wakes when the disabled one is enabled, and takes it then.
func TestEnableWakesAWaitingRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pool, err := New("openai", threeKeys()[:2], WaitForKey(time.Minute))
		require.NoError(t, err)
		require.NoError(t, pool.Disable(t.Context(), "b", "ops"))
		require.NoError(t, pool.store.Bench(t.Context(), Bench{Provider: "openai", KeyID: "a", AllModels: true,
			Kind: KindRate, Until: time.Now().Add(30 * time.Second)}))
		start := time.Now()
		var served string
		done := make(chan error, 1)
		go func() {
			done <- pool.Do(t.Context(), "m", func(_ context.Context, k Key) error { served = k.ID; return nil })
		}()
		synctest.Wait()
		require.NoError(t, pool.Enable(t.Context(), "b"))
		require.NoError(t, <-done)
		assert.Equal(t, "b", served)
		assert.Less(t, time.Since(start), time.Second, "woken by the enable, not by a's return")
	})
}

// reopenedRun disables a key over a Badger store whose directory is then
// removed and made again — the store opens a new database there — with
// the first flush's writes failing when failFirst is set, and returns what
// a store opened on the directory afterwards holds: the disabled keys, and
// each key's state before and after.
func reopenedRun(t *testing.T, failFirst bool) (disabled map[string]Disabled, before, after map[string]KeyStats) {
	dir := filepath.Join(t.TempDir(), "state")
	s, err := OpenBadgerStore(dir, WithFlushInterval(time.Hour))
	require.NoError(t, err)
	var fail atomic.Pointer[error]
	failWrites(s, &fail)
	pool, err := New("openai", threeKeys(), WithStore(s), WithLimits(Limits{RPM: 1 << 30, RPD: 1 << 30}))
	require.NoError(t, err)
	for range 6 {
		require.NoError(t, pool.Do(t.Context(), "m", func(context.Context, Key) error { return nil }))
	}
	require.NoError(t, pool.Disable(t.Context(), "b", "ops"))
	require.NoError(t, s.Flush(t.Context()))
	require.NoError(t, os.RemoveAll(dir))
	require.NoError(t, os.Mkdir(dir, 0o700))
	if failFirst {
		injected := errors.New("injected: one failed write")
		fail.Store(&injected)
		require.Error(t, s.Flush(t.Context()))
		fail.Store(nil)
	}
	require.NoError(t, s.Flush(t.Context()))
	now := time.Now()
	before = keyStates(t, s, now)
	require.NoError(t, s.Close())
	again := reopen(t, dir)
	disabled, err = again.Disabled(t.Context(), "openai")
	require.NoError(t, err)
	return disabled, before, keyStates(t, again, now)
}

// A state directory made again keeps the disabled keys, with the windows
// and benches, even when the first flush to the new database fails.
func TestDisabledSurvivesADirectoryMadeAgain(t *testing.T) {
	for _, failFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("first flush fails=%t", failFirst), func(t *testing.T) {
			d, before, after := reopenedRun(t, failFirst)
			assert.Contains(t, d, "b")
			assert.Equal(t, before, after)
		})
	}
}

// A Badger record of a disabled key that cannot be read keeps the key out.
func TestDisabledUnreadableBadgerRecord(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	s, err := OpenBadgerStore(dir)
	require.NoError(t, err)
	require.NoError(t, s.update(func(txn *badger.Txn) error {
		return txn.Set(recordKey(disabledPrefix, keyRef{"openai", "b"}), []byte{disabledFormat, 0xff})
	}))
	require.NoError(t, s.Close())
	s = reopen(t, dir)
	pool, err := New("openai", threeKeys(), WithStore(s))
	require.NoError(t, err)
	assert.NotContains(t, served(t, pool, 6), "b")
	assert.Equal(t, unreadableBy, statsOf(t, pool, "b").Disabled.By)
}

// A pool whose store cannot say which keys are disabled — down when the
// pool starts — reads them again within disabledRetry of the store's
// return, not DisabledRefresh: a key an operator disabled is out of
// rotation a second after the store answers. A store still down is asked
// no more than once in disabledRetry.
func TestDisabledReadAgainSoonAfterAFailure(t *testing.T) {
	clock := newTestClock()
	store := &failingDisabled{Store: NewMemoryStore()}
	first, err := New("openai", threeKeys(), WithStore(store), WithClock(clock.Now))
	require.NoError(t, err)
	require.NoError(t, first.Disable(t.Context(), "a", "ops"))

	store.fail = true
	store.reads = 0
	pool, err := New("openai", threeKeys(), WithStore(store), WithClock(clock.Now))
	require.NoError(t, err)
	assert.Contains(t, served(t, pool, 3), "a", "the store could not say a is out")
	assert.Equal(t, 1, store.reads, "New's read; the requests within disabledRetry ask nothing")
	clock.Advance(disabledRetry)
	served(t, pool, 6)
	pool.readsAside.Wait()
	assert.Equal(t, 2, store.reads, "asked again once in disabledRetry, not at every request")

	store.fail = false
	clock.Advance(disabledRetry)
	readOnRequest(t, pool)
	assert.NotContains(t, served(t, pool, 6), "a", "out again a disabledRetry after the store's return")
	require.NotNil(t, statsOf(t, pool, "a").Disabled)
}

// hangingDisabled is a store whose reads of the disabled keys wait for
// release while hang is set.
type hangingDisabled struct {
	Store
	hang    bool
	release chan struct{}
}

func (s *hangingDisabled) SetDisabled(ctx context.Context, provider, keyID string, d *Disabled) error {
	return s.Store.(DisabledStore).SetDisabled(ctx, provider, keyID, d)
}

func (s *hangingDisabled) Disabled(ctx context.Context, provider string) (map[string]Disabled, error) {
	if s.hang {
		<-s.release
	}
	return s.Store.(DisabledStore).Disabled(ctx, provider)
}

// A request that finds a read of the disabled keys due does not wait for
// it: with the store's read hanging, requests are served on what the pool
// knows, and the store's answer applies once it comes. Close waits for a
// read under way.
func TestDisabledReadHoldsNoRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &hangingDisabled{Store: NewMemoryStore(), release: make(chan struct{})}
		other, err := New("openai", threeKeys(), WithStore(store))
		require.NoError(t, err)
		pool, err := New("openai", threeKeys(), WithStore(store))
		require.NoError(t, err)
		require.NoError(t, other.Disable(t.Context(), "a", "ops"))

		store.hang = true
		time.Sleep(DisabledRefresh)
		assert.Contains(t, served(t, pool, 3), "a", "served at once, on what the pool knew")
		synctest.Wait()
		assert.Contains(t, served(t, pool, 3), "a", "the read is still under way, and no other starts")

		closed := make(chan error, 1)
		go func() { closed <- pool.Close() }()
		synctest.Wait()
		select {
		case <-closed:
			t.Fatal("Close returned while a read of the store was under way")
		default:
		}
		close(store.release)
		require.NoError(t, <-closed)
		assert.NotNil(t, statsOf(t, pool, "a").Disabled, "the read's answer applied")
		require.NoError(t, other.Close())
	})
}

// slowSetDisabled is a store whose writes of a disabled key wait for
// release (or their context).
type slowSetDisabled struct {
	Store
	entered chan struct{}
	release chan struct{}
}

func (s *slowSetDisabled) SetDisabled(ctx context.Context, provider, keyID string, d *Disabled) error {
	close(s.entered)
	select {
	case <-s.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.Store.(DisabledStore).SetDisabled(ctx, provider, keyID, d)
}

func (s *slowSetDisabled) Disabled(ctx context.Context, provider string) (map[string]Disabled, error) {
	return s.Store.(DisabledStore).Disabled(ctx, provider)
}

// An operator's Disable that waits on a slow store holds neither the
// request that finds a read of the disabled keys due nor Close: the read
// is started aside, and Close is bounded whatever the store does.
func TestSlowDisableHoldsNoRequestNorClose(t *testing.T) {
	clock := newTestClock()
	store := &slowSetDisabled{Store: NewMemoryStore(), entered: make(chan struct{}), release: make(chan struct{})}
	pool, err := New("openai", threeKeys(), WithStore(store), WithClock(clock.Now))
	require.NoError(t, err)
	disabled := make(chan error, 1)
	go func() { disabled <- pool.Disable(context.Background(), "a", "ops") }()
	t.Cleanup(func() { close(store.release); <-disabled })
	<-store.entered

	clock.Advance(DisabledRefresh)
	done := make(chan error, 1)
	go func() {
		done <- pool.Do(context.Background(), "m", func(context.Context, Key) error { return nil })
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(3 * time.Second):
		t.Fatal("a request that found a read of the disabled keys due waited for a Disable's store write")
	}

	closed := make(chan error, 1)
	go func() { closed <- pool.Close() }()
	select {
	case <-closed:
	case <-time.After(3 * time.Second):
		t.Fatal("Close waited for a Disable's store write")
	}
}
