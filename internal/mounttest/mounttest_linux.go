// Package mounttest gives tests real failing directories on Linux: a
// directory turned read-only (chmod does not stop root, which CI runs as)
// and a filesystem filled up, by mounting. Mounting needs root; without it
// Require skips the test, saying why.
package mounttest

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// Require skips the test unless this process can mount filesystems;
// covered names the test that covers the same ground without mounts.
func Require(t *testing.T, covered string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("a read-only directory or a full filesystem needs a mount, and mounting needs root; %s covers the store's part", covered)
	}
	dir := t.TempDir()
	if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
		t.Skipf("this root cannot mount (%v), a container without CAP_SYS_ADMIN? %s covers the store's part", err, covered)
	}
	require.NoError(t, syscall.Unmount(dir, 0))
}

// ReadOnly bind-mounts dir read-only over itself and returns the undo; the
// test's end undoes it, if the test has not.
func ReadOnly(t *testing.T, dir string) (undo func()) {
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

// Tmpfs mounts a tmpfs of size ("64m") on a new directory and returns it;
// the test's end unmounts it.
func Tmpfs(t *testing.T, size string) string {
	t.Helper()
	mnt := t.TempDir()
	require.NoError(t, syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size="+size))
	t.Cleanup(func() { _ = syscall.Unmount(mnt, syscall.MNT_DETACH) })
	return mnt
}

// Fill writes a file in dir until its filesystem has at most leave bytes
// free (0: until it refuses a write), and returns the file.
func Fill(t *testing.T, dir string, leave uint64) string {
	t.Helper()
	name := filepath.Join(dir, "filler")
	f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	require.NoError(t, err)
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for {
		var st syscall.Statfs_t
		require.NoError(t, syscall.Statfs(dir, &st))
		free := st.Bavail * uint64(st.Bsize)
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
