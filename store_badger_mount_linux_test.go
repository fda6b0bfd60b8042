package keypool

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool/internal/mounttest"
)

// Issue 21 on a real read-only directory: a bind mount, since chmod does
// not stop root.
func TestBadgerStoreReadOnlyDirectory(t *testing.T) {
	mounttest.Require(t, "TestBadgerStoreWritesFail")
	t.Run("comes back", func(t *testing.T) {
		r := startFailRun(t, filepath.Join(t.TempDir(), "state"), nil)
		require.Positive(t, r.serveFor(200*time.Millisecond))
		undo := mounttest.ReadOnly(t, r.dir)
		took := r.waitHealth(true)
		require.ErrorIs(t, r.store.Health(), syscall.EROFS)
		assert.ErrorContains(t, r.store.Health(), "keypool: badger store: state directory "+r.dir+" is not writable: read-only file system")
		r.benchDuring()
		require.Positive(t, r.serveFor(300*time.Millisecond), "the pool serves from memory")
		undo()
		back := r.waitHealth(false)
		t.Logf("failure seen after %v, writing again %v after the directory was writable", took, back)
		r.closeFindsAll()
	})
	t.Run("closed while read-only", func(t *testing.T) {
		r := startFailRun(t, filepath.Join(t.TempDir(), "state"), nil)
		require.Positive(t, r.serveFor(200*time.Millisecond))
		now, before := r.quiesce()
		undo := mounttest.ReadOnly(t, r.dir)
		r.waitHealth(true)
		r.benchDuring()
		r.closeGivesUp("the windows of 0 keys and the benches of 1 keys are not saved (state directory " + r.dir + " is not writable: read-only file system)")

		undo()
		_, err := OpenBadgerStore(r.dir)
		require.ErrorIs(t, err, ErrStoreLocked, "the database was left open, holding its directory, until the process exits")
		require.NoError(t, r.store.db.Load().Close(), "what the process's exit does")
		assert.Equal(t, before, keyStates(t, reopen(t, r.dir), now), "a reopen finds what was written before the failure")
	})
}

// Issue 21 on a real full filesystem: a tmpfs of 64 MiB. The store counts
// it full below its reserve, 24 MiB, and stops writing before Badger's
// memory-mapped writes would meet a full filesystem (a SIGBUS); filled to
// the last byte after that, it serves on from memory.
func TestBadgerStoreFullFilesystem(t *testing.T) {
	mounttest.Require(t, "TestBadgerStoreWritesFail")
	for _, closeWhileFull := range []bool{false, true} {
		name := map[bool]string{false: "comes back", true: "closed while full"}[closeWhileFull]
		t.Run(name, func(t *testing.T) {
			fs := mounttest.Tmpfs(t, "64m")
			r := startFailRun(t, filepath.Join(fs, "state"), nil)
			require.Positive(t, r.serveFor(200*time.Millisecond))
			var now time.Time
			var before map[string]KeyStats
			if closeWhileFull {
				now, before = r.quiesce()
			}
			filler := mounttest.Fill(t, fs, 4<<20)
			took := r.waitHealth(true)
			require.ErrorIs(t, r.store.Health(), syscall.ENOSPC)
			assert.ErrorContains(t, r.store.Health(), "free, less than the 24.0 MiB the store keeps in reserve: no space left on device")
			mounttest.Fill(t, fs, 0)
			free, _ := freeBytes(fs)
			t.Logf("failure seen after %v; %d bytes left free", took, free)
			r.benchDuring()
			if !closeWhileFull {
				require.Positive(t, r.serveFor(300*time.Millisecond), "the pool serves from memory, on a filesystem with no byte left")
				require.NoError(t, os.Remove(filler))
				r.waitHealth(false)
				r.closeFindsAll()
				return
			}
			r.closeGivesUp("the windows of 0 keys and the benches of 1 keys are not saved", "no space left on device")
			require.NoError(t, os.Remove(filler))
			require.NoError(t, r.store.db.Load().Close(), "what the process's exit does")
			assert.Equal(t, before, keyStates(t, reopen(t, r.dir), now), "a reopen finds what was written before the failure")
		})
	}
}

// A filesystem with less than the reserve free is refused at open: opening
// writes Badger's files through memory maps.
func TestBadgerStoreRefusesAFullFilesystem(t *testing.T) {
	mounttest.Require(t, "TestBadgerStoreWritesFail")
	fs := mounttest.Tmpfs(t, "16m")
	_, err := OpenBadgerStore(filepath.Join(fs, "state"))
	require.Error(t, err)
	assert.ErrorIs(t, err, syscall.ENOSPC)
	assert.Contains(t, err.Error(), "keypool: badger store "+filepath.Join(fs, "state")+": ")
	assert.Contains(t, err.Error(), "MiB free, less than the 24.0 MiB the store keeps in reserve")
	assert.False(t, errors.Is(err, ErrStoreLocked))
}
