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
)

// requireMount skips the test unless this process can mount filesystems:
// it runs as root (in CI too), where chmod does not keep root from writing,
// so a read-only or full directory needs a mount.
func requireMount(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a read-only or full directory needs root; TestBadgerStoreWritesFail covers the store's part through its write seams")
	}
	dir := t.TempDir()
	if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
		t.Skipf("this root cannot mount (%v) — a container without CAP_SYS_ADMIN? TestBadgerStoreWritesFail covers the store's part through its write seams", err)
	}
	require.NoError(t, syscall.Unmount(dir, 0))
}

// mountReadOnly bind-mounts dir read-only over itself and returns the undo.
func mountReadOnly(t *testing.T, dir string) (undo func()) {
	t.Helper()
	require.NoError(t, syscall.Mount(dir, dir, "", syscall.MS_BIND, ""))
	undone := false
	undo = func() {
		if !undone {
			undone = true
			require.NoError(t, syscall.Unmount(dir, 0))
		}
	}
	t.Cleanup(func() {
		if !undone {
			_ = syscall.Unmount(dir, syscall.MNT_DETACH)
		}
	})
	require.NoError(t, syscall.Mount("", dir, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY, ""))
	return undo
}

// mountTmpfs mounts a tmpfs of size bytes on a new directory and returns
// it; the test's end unmounts it.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	mnt := t.TempDir()
	require.NoError(t, syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size="+size))
	t.Cleanup(func() { _ = syscall.Unmount(mnt, syscall.MNT_DETACH) })
	return mnt
}

// fill writes a file in dir until its filesystem has at most leave bytes
// free (0: until it refuses a write), and returns the file.
func fill(t *testing.T, dir string, leave uint64) string {
	t.Helper()
	name := filepath.Join(dir, "filler")
	f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	require.NoError(t, err)
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for {
		free, ok := freeBytes(dir)
		require.True(t, ok)
		n := uint64(len(chunk))
		if leave > 0 {
			if free <= leave {
				return name
			}
			n = min(n, free-leave)
		}
		if _, err := f.Write(chunk[:n]); err != nil {
			require.ErrorIs(t, err, syscall.ENOSPC)
			return name
		}
	}
}

// Issue 21 on a real read-only directory: a bind mount, since chmod does
// not stop root.
func TestBadgerStoreReadOnlyDirectory(t *testing.T) {
	requireMount(t)
	t.Run("comes back", func(t *testing.T) {
		r := startFailRun(t, filepath.Join(t.TempDir(), "state"), nil)
		require.Positive(t, r.serveFor(200*time.Millisecond))
		undo := mountReadOnly(t, r.dir)
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
		undo := mountReadOnly(t, r.dir)
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
	requireMount(t)
	for _, closeWhileFull := range []bool{false, true} {
		name := map[bool]string{false: "comes back", true: "closed while full"}[closeWhileFull]
		t.Run(name, func(t *testing.T) {
			fs := mountTmpfs(t, "64m")
			r := startFailRun(t, filepath.Join(fs, "state"), nil)
			require.Positive(t, r.serveFor(200*time.Millisecond))
			var now time.Time
			var before map[string]KeyStats
			if closeWhileFull {
				now, before = r.quiesce()
			}
			filler := fill(t, fs, 4<<20)
			took := r.waitHealth(true)
			require.ErrorIs(t, r.store.Health(), syscall.ENOSPC)
			assert.ErrorContains(t, r.store.Health(), "free, less than the 24.0 MiB the store keeps in reserve: no space left on device")
			fill(t, fs, 0)
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
	requireMount(t)
	fs := mountTmpfs(t, "16m")
	_, err := OpenBadgerStore(filepath.Join(fs, "state"))
	require.Error(t, err)
	assert.ErrorIs(t, err, syscall.ENOSPC)
	assert.Contains(t, err.Error(), "keypool: badger store "+filepath.Join(fs, "state")+": ")
	assert.Contains(t, err.Error(), "MiB free, less than the 24.0 MiB the store keeps in reserve")
	assert.False(t, errors.Is(err, ErrStoreLocked))
}
