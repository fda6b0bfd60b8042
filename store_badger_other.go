//go:build !linux

package keypool

import "os"

// dirWritable returns nil: outside Linux the store learns that its
// directory is read-only from a failing write.
func dirWritable(string) error { return nil }

// freeBytes reports that it cannot tell: outside Linux the store does not
// check the free space of its directory.
func freeBytes(string) (uint64, bool) { return 0, false }

// sameDevice reports true: outside Linux the store does not tell
// filesystems apart.
func sameDevice(_, _ os.FileInfo) bool { return true }

// withDirLock does not run fn: outside Linux the store leaves empty
// memtable files to Badger.
func withDirLock(string, func()) {}
