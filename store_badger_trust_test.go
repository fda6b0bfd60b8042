package keypool

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// takeN records n requests for a key and model in s, at now.
func takeN(t *testing.T, s Store, ref keyRef, model string, n int, now time.Time) {
	t.Helper()
	for range n {
		g, err := s.Take(t.Context(), Claim{Provider: ref.provider, KeyID: ref.keyID, Model: model,
			Limits: Limits{RPM: 1000, RPD: 10_000}, Now: now})
		require.NoError(t, err)
		require.True(t, g.OK, "take for %q/%q", ref.provider, ref.keyID)
	}
}

// dayRequests returns the requests s holds for a key and model at now.
func dayRequests(t *testing.T, s Store, ref keyRef, model string, now time.Time) int64 {
	t.Helper()
	st, err := s.State(t.Context(), ref.provider, ref.keyID, now)
	require.NoError(t, err)
	for _, m := range st.Models {
		if m.Model == model {
			return m.Usage.DayRequests
		}
	}
	return 0
}

// Issue 14, item 6: one key's record over Badger's limits must not keep
// the windows of every other key from being written.
func TestBadgerStoreRecordOverLimit(t *testing.T) {
	small := keyRef{"acme", "small"}
	tests := []struct {
		name string
		big  keyRef
		opts []Option
		fill func(t *testing.T, s *BadgerStore, now time.Time) // makes big's record too large
		want string                                            // in the error naming big
	}{
		{
			name: "a key ID over Badger's key limit",
			big:  keyRef{"acme", strings.Repeat("k", 70_000)},
			fill: func(t *testing.T, s *BadgerStore, now time.Time) {
				takeN(t, s, keyRef{"acme", strings.Repeat("k", 70_000)}, "m", 1, now)
			},
			want: "bytes is over Badger's limit of 65000",
		},
		{
			name: "windows over Badger's value limit",
			big:  keyRef{"acme", "big"},
			opts: []Option{withBadgerOptions(func(o badger.Options) badger.Options { return o.WithValueLogFileSize(1 << 20) })},
			fill: func(t *testing.T, s *BadgerStore, now time.Time) {
				// Names longer than a store now takes, as a store written
				// before they were bounded may hold: set in place.
				takeN(t, s, keyRef{"acme", "big"}, "m", 1, now)
				k := s.memoryStore.key("acme", "big")
				k.mu.Lock()
				defer k.mu.Unlock()
				for i := range maxModelsPerKey {
					w := &windows{}
					w.add(now.UnixNano(), Limits{RPM: 1}.spans(), 1, 0, calendar{})
					k.models[fmt.Sprintf("%04d-%s", i, strings.Repeat("m", 1100))] = &memModel{win: w}
				}
				k.dirty = true
			},
			want: "over Badger's limit of 1048576 (the value-log file size)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			var logs logLines
			opts := append([]Option{WithFlushInterval(time.Hour), WithBadgerLogger(logs.logger())}, tt.opts...)
			s, err := OpenBadgerStore(dir, opts...)
			require.NoError(t, err)
			now := time.Now()
			takeN(t, s, small, "m", 3, now)
			tt.fill(t, s, now)

			err = s.Flush(t.Context())
			require.Error(t, err, "a record Badger refuses is reported")
			assert.Contains(t, err.Error(), quoteCut(tt.big.keyID), "the error names the key")
			assert.Contains(t, err.Error(), `of provider "acme"`)
			assert.Contains(t, err.Error(), tt.want)
			assert.NotContains(t, err.Error(), "small")
			assert.Less(t, len(err.Error()), 400, "the error quotes a long key ID cut")
			require.NoError(t, s.Health(), "one key's record is no failure of the store")

			tt.fill(t, s, now)
			takeN(t, s, small, "m", 1, now)
			require.Error(t, s.Flush(t.Context()))
			assert.Equal(t, 1, logs.count("a key's state is not saved"), "the record is logged once, however many flushes refuse it: %q", logs.all())

			require.NoError(t, s.Close())
			s, err = OpenBadgerStore(dir, opts...)
			require.NoError(t, err)
			defer s.Close()
			assert.Equal(t, int64(4), dayRequests(t, s, small, "m", now), "the other key's windows are written")
		})
	}
}

func TestBadgerStoreBenchOverLimit(t *testing.T) {
	var logs logLines
	s, err := OpenBadgerStore(t.TempDir(), WithFlushInterval(time.Hour), WithBadgerLogger(logs.logger()))
	require.NoError(t, err)
	defer s.Close()
	big := strings.Repeat("k", 70_000)
	until := time.Now().Add(time.Hour)
	for range 2 {
		err = s.Bench(t.Context(), Bench{Provider: "acme", KeyID: big, AllModels: true, Kind: KindAuth, Until: until})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "benches of key "+quoteCut(big))
	}
	require.NoError(t, s.Bench(t.Context(), Bench{Provider: "acme", KeyID: "small", AllModels: true, Kind: KindAuth, Until: until}))
	require.NoError(t, s.Health())
	assert.Equal(t, 1, logs.count("a key's state is not saved"), "logged once: %q", logs.all())
}

// Issue 14, item 7: a NUL in a provider or a key ID must not make two keys'
// records one.
func TestBadgerStoreNamesWithNUL(t *testing.T) {
	refs := []keyRef{{"acme\x00eu", "k1"}, {"acme", "eu\x00k1"}, {"acme", "eu"}, {"", "\x00"}, {"\x00", ""}, {"a/b", "c"}}
	dir := t.TempDir()
	s, err := OpenBadgerStore(dir)
	require.NoError(t, err)
	now := time.Now()
	for i, ref := range refs {
		takeN(t, s, ref, "m", i+1, now)
		require.NoError(t, s.Bench(t.Context(), Bench{Provider: ref.provider, KeyID: ref.keyID, Model: "m",
			Kind: KindRate, Until: now.Add(time.Duration(i+1) * time.Minute)}))
	}
	require.NoError(t, s.Close())

	s, err = OpenBadgerStore(dir)
	require.NoError(t, err)
	defer s.Close()
	var got []keyRef
	for provider, keyID := range s.Keys() {
		got = append(got, keyRef{provider, keyID})
	}
	assert.ElementsMatch(t, refs, got, "the keys read back")
	for i, ref := range refs {
		assert.Equal(t, int64(i+1), dayRequests(t, s, ref, "m", now), "requests of %q/%q", ref.provider, ref.keyID)
		st, err := s.State(t.Context(), ref.provider, ref.keyID, now)
		require.NoError(t, err)
		require.Len(t, st.Models, 1)
		assert.Equal(t, now.Add(time.Duration(i+1)*time.Minute).UTC(), st.Models[0].Bench.Until, "bench of %q/%q", ref.provider, ref.keyID)
	}
}

// recordsOf returns the windows and benches records of a key that took n
// requests and was benched until until.
func recordsOf(t *testing.T, n int, until time.Time) (windows, benches []byte) {
	t.Helper()
	m := newMemoryStore()
	ref := keyRef{"p", "k"}
	takeN(t, m, ref, "m", n, time.Now())
	require.NoError(t, m.Bench(t.Context(), Bench{Provider: "p", KeyID: "k", Model: "m", Kind: KindRate, Until: until}))
	k := m.key("p", "k")
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.encodeWindows(nil), k.encodeBenches(nil)
}

// The kp1 layout is read where its key is unambiguous, replaced by kp2,
// and dropped, with one warning, where it is not.
func TestBadgerStoreReadsTheOldLayout(t *testing.T) {
	dir := t.TempDir()
	until := time.Now().Add(time.Hour).Truncate(time.Second)
	w3, b3 := recordsOf(t, 3, until)
	w5, b5 := recordsOf(t, 5, until)
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	require.NoError(t, err)
	require.NoError(t, db.Update(func(txn *badger.Txn) error {
		for k, v := range map[string][]byte{
			"kp1/w/openai\x00a":       w3,
			"kp1/b/openai\x00a":       b3,
			"kp1/w/acme\x00eu\x00k1":  w5, // acme\x00eu/k1 or acme/eu\x00k1
			"kp1/b/acme\x00eu\x00k1":  b5,
			"kp1/w/no-separator":      w5,
			"kp2/w/\x05acmeunreadabl": []byte{0xff}, // a kp2 record that cannot be read
		} {
			if err := txn.Set([]byte(k), v); err != nil {
				return err
			}
		}
		return nil
	}))
	require.NoError(t, db.Close())

	var logs logLines
	s, err := OpenBadgerStore(dir, WithBadgerLogger(logs.logger()))
	require.NoError(t, err)
	now := time.Now()
	var stored [][2]string
	for provider, keyID := range s.Keys() {
		stored = append(stored, [2]string{provider, keyID})
	}
	assert.Equal(t, [][2]string{{"openai", "a"}}, stored)
	assert.Equal(t, int64(3), dayRequests(t, s, keyRef{"openai", "a"}, "m", now))
	st, err := s.State(t.Context(), "openai", "a", now)
	require.NoError(t, err)
	assert.Equal(t, until.UTC(), st.Models[0].Bench.Until)
	assert.Equal(t, 1, logs.count("dropped records of the kp1 layout"), "one warning: %q", logs.all())
	assert.Equal(t, 1, logs.count("records=3"), "it counts the ambiguous records: %q", logs.all())
	assert.Equal(t, 1, logs.count("dropped records that cannot be read"), "one warning: %q", logs.all())
	require.NoError(t, s.Close())

	db, err = badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	require.NoError(t, err)
	var keys []string
	require.NoError(t, db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			keys = append(keys, string(it.Item().Key()))
		}
		return nil
	}))
	require.NoError(t, db.Close())
	slices.Sort(keys)
	assert.Equal(t, []string{"kp2/b/\x06openaia", "kp2/w/\x05acmeunreadabl", "kp2/w/\x06openaia"}, keys,
		"the kp1 records replaced; the unreadable one left for its key's next write")

	s, err = OpenBadgerStore(dir, WithBadgerLogger(logs.logger()))
	require.NoError(t, err)
	defer s.Close()
	assert.Equal(t, int64(3), dayRequests(t, s, keyRef{"openai", "a"}, "m", now), "read back from kp2")
}

func FuzzRecordKey(f *testing.F) {
	f.Add("acme\x00eu", "k1")
	f.Add("acme", "eu\x00k1")
	f.Add("", "")
	f.Add(strings.Repeat("p", 200), "\xff")
	f.Fuzz(func(t *testing.T, provider, keyID string) {
		ref := keyRef{provider, keyID}
		for _, prefix := range [][]byte{windowsPrefix, benchesPrefix} {
			k := recordKey(prefix, ref)
			require.True(t, bytes.HasPrefix(k, prefix))
			got, ok := parseRecordKey(prefix, k)
			require.True(t, ok, "parsing %q", k)
			require.Equal(t, ref, got, "a key reads back as the pair that wrote it, so no two pairs share one")
		}
	})
}

// Issue 14, item 8: a kill between creating a memtable or value-log file
// and sizing it leaves it empty, and Badger then refuses to open the
// directory (Badger issue #2207).
func TestBadgerStoreOpensAfterAKillLeftAnEmptyFile(t *testing.T) {
	for _, name := range []string{"00099.mem", "000099.vlog"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			s, err := OpenBadgerStore(dir)
			require.NoError(t, err)
			now := time.Now()
			takeN(t, s, keyRef{"p", "k"}, "m", 2, now)
			require.NoError(t, s.Close())
			// What a kill leaves: the file made, never sized.
			require.NoError(t, os.WriteFile(filepath.Join(dir, name), nil, 0o644))

			var logs logLines
			s, err = OpenBadgerStore(dir, WithBadgerLogger(logs.logger()))
			require.NoError(t, err, "the store opens at the first try")
			defer s.Close()
			assert.Equal(t, int64(2), dayRequests(t, s, keyRef{"p", "k"}, "m", now), "the state is read")
			assert.Equal(t, 1, logs.count("removed an empty file"), "one warning: %q", logs.all())
			assert.Equal(t, 1, logs.count(name), "naming the file: %q", logs.all())
		})
	}
}

// An empty file in a directory another process holds is left alone: it
// may be one that process is making.
func TestBadgerStoreLeavesEmptyFilesOfAHeldDirectory(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenBadgerStore(dir)
	require.NoError(t, err)
	defer s.Close()
	empty := filepath.Join(dir, "00099.mem")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	_, err = OpenBadgerStore(dir)
	require.ErrorIs(t, err, ErrStoreLocked)
	_, err = os.Stat(empty)
	require.NoError(t, err, "the empty file is still there")
	require.NoError(t, os.Remove(empty))
}

// Issue 14, item 15: a bench survives an operating system crash only when
// writes are synced.
func TestBadgerStoreSyncWrites(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts []Option
		want bool
	}{
		{"by default", nil, false},
		{"WithSyncWrites", []Option{WithSyncWrites()}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := OpenBadgerStore(t.TempDir(), tt.opts...)
			require.NoError(t, err)
			defer s.Close()
			assert.Equal(t, tt.want, s.db.Load().Opts().SyncWrites)
		})
	}
}

func TestBadgerStoreBadOptions(t *testing.T) {
	tests := []struct {
		name string
		opt  Option
		want string
	}{
		{"negative flush interval", WithFlushInterval(-time.Second), "WithFlushInterval: -1s is not positive"},
		{"zero flush interval", WithFlushInterval(0), "WithFlushInterval: 0s is not positive"},
		{"a pool's option", WithLimits(Limits{RPM: 1}), "WithLimits does not configure a BadgerStore"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s, err := OpenBadgerStore(dir, tt.opt)
			require.Error(t, err)
			assert.Nil(t, s)
			assert.Equal(t, "keypool: badger store "+dir+": "+tt.want, err.Error())

			db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
			require.NoError(t, err, "the directory was left closed")
			defer db.Close()
			s, err = newBadgerStoreOver(db, tt.opt)
			require.Error(t, err)
			assert.Nil(t, s)
			assert.Equal(t, "keypool: badger store: "+tt.want, err.Error())
		})
	}
	s, err := OpenBadgerStore(t.TempDir(), nil, WithBadgerLogger(nil))
	require.NoError(t, err, "nil options keep the defaults")
	require.NoError(t, s.Close())
}

// Badger repeats some lines once a second while its directory is gone:
// the adapter logs the first, then a count at most once a minute, and the
// count left when the spell ends.
func TestBadgerLoggerThrottlesRepeats(t *testing.T) {
	var logs logLines
	b := newBadgerLogger(logs.logger())
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	b.now = func() time.Time { return now }
	for i := range 150 { // 150 s of one line a second, with another line twice
		b.Errorf("error flushing memtable to disk: %v, retrying", fmt.Sprintf("attempt %d", i))
		if i == 10 || i == 11 {
			b.Warningf("While running doCompact: %v\n", "boom")
		}
		b.Infof("dropped %d", i)
		now = now.Add(time.Second)
	}
	b.flush()
	want := []string{
		"ERROR badger: error flushing memtable to disk: attempt 0, retrying",
		"WARN badger: While running doCompact: boom",
		"ERROR badger: error flushing memtable to disk: attempt 60, retrying repeated=60",
		"ERROR badger: error flushing memtable to disk: attempt 120, retrying repeated=60",
	}
	got := logs.all()
	require.Len(t, got, 6, "%q", got)
	assert.Equal(t, want, got[:4])
	assert.ElementsMatch(t, []string{
		"ERROR badger: error flushing memtable to disk: attempt 149, retrying repeated=29",
		"WARN badger: While running doCompact: boom repeated=1",
	}, got[4:], "the counts left, at the end of the spell")

	// Quiet for a minute, a line is new again.
	now = now.Add(2 * time.Minute)
	b.Errorf("error flushing memtable to disk: %v, retrying", "again")
	assert.Equal(t, "ERROR badger: error flushing memtable to disk: again, retrying", logs.all()[6])
}

// The store's check of a record refuses exactly what Badger refuses, on
// either side of each limit: the key's, the value's, and a transaction's.
func TestBadgerLimitsMatchBadger(t *testing.T) {
	o := badger.DefaultOptions(t.TempDir()).WithLogger(nil).
		WithMemTableSize(1 << 20).WithValueThreshold(100_000).WithValueLogFileSize(1 << 20)
	db, err := badger.Open(o)
	require.NoError(t, err)
	defer db.Close()
	limits := limitsOf(db.Opts())
	require.Equal(t, int64(157286), limits.batch)
	tests := []struct{ key, val int }{
		{65000, 10}, {65001, 10},
		{10, 1 << 20}, {10, 1<<20 + 1},
		{57253, 99_999}, {57254, 99_999}, // a value kept in the tree, near a transaction's size
		{65000, 100_000}, // a value in the value log: its pointer counts
	}
	for _, tt := range tests {
		key, val := bytes.Repeat([]byte{'k'}, tt.key), make([]byte, tt.val)
		txn := db.NewTransaction(true)
		badgerErr := txn.SetEntry(badger.NewEntry(key, val))
		txn.Discard()
		ours := limits.check(key, val)
		assert.Equal(t, badgerErr == nil, ours == nil, "key of %d bytes, value of %d: Badger says %v, the store %v", tt.key, tt.val, badgerErr != nil, ours)
		if ours != nil {
			assert.ErrorIs(t, ours, errRecordTooLarge)
		}
	}
}

// A record Badger refuses that the store's check does not foresee — a
// value over the threshold of a database kept in memory — is left out of
// the batch as well.
func TestBadgerStoreRecordRefusedByBadger(t *testing.T) {
	db, err := badger.Open(badger.DefaultOptions("").WithInMemory(true).WithLogger(nil).WithValueThreshold(1 << 10))
	require.NoError(t, err)
	defer db.Close()
	var logs logLines
	s, err := newBadgerStoreOver(db, WithFlushInterval(time.Hour), WithBadgerLogger(logs.logger()))
	require.NoError(t, err)
	defer s.Close()
	now := time.Now()
	takeN(t, s, keyRef{"p", "small"}, "m", 2, now)
	for i := range 20 {
		takeN(t, s, keyRef{"p", "big"}, fmt.Sprintf("%02d-%s", i, strings.Repeat("m", 100)), 1, now)
	}
	err = s.Flush(t.Context())
	require.ErrorIs(t, err, errRecordTooLarge)
	assert.Contains(t, err.Error(), `windows of key "big" of provider "p" not saved`)
	assert.NotContains(t, err.Error(), "\n", "Badger's dump of the key is cut")
	require.NoError(t, s.Health())
	require.NoError(t, db.View(func(txn *badger.Txn) error {
		_, err := txn.Get(recordKey(windowsPrefix, keyRef{"p", "small"}))
		return err
	}), "the other key's windows are written")
}
