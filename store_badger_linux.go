package keypool

import (
	"os"
	"syscall"
)

// dirWritable returns an error when the process may not create files in
// dir: access(2) with W_OK fails with EROFS on a read-only mount and with
// EACCES without permission; for root it fails only on a read-only mount,
// as root's writes do.
func dirWritable(dir string) error { return syscall.Access(dir, 0x2 /* W_OK */) }

// freeBytes returns the bytes an unprivileged process may still write to
// dir's filesystem; ok is false when it cannot tell.
func freeBytes(dir string) (free uint64, ok bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil || st.Bsize <= 0 {
		return 0, false
	}
	return st.Bavail * uint64(st.Bsize), true
}

// sameDevice reports whether a and b are on one filesystem: a directory
// made again on another (the mount point of a volume that was unmounted)
// is no place for the state.
func sameDevice(a, b os.FileInfo) bool {
	sa, okA := a.Sys().(*syscall.Stat_t)
	sb, okB := b.Sys().(*syscall.Stat_t)
	return !okA || !okB || sa.Dev == sb.Dev
}

// withDirLock runs fn while holding dir's lock as Badger takes it (flock of
// the directory); it does not run fn when another holds the lock.
func withDirLock(dir string, fn func()) {
	f, err := os.Open(dir)
	if err != nil {
		return
	}
	defer f.Close()
	if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		return
	}
	defer syscall.Flock(int(f.Fd()), syscall.LOCK_UN) //nolint:errcheck // closing the file releases it too
	fn()
}
