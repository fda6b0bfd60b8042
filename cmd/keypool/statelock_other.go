//go:build !(darwin || dragonfly || freebsd || linux || netbsd || openbsd)

package main

// stateHeld reports whether another process holds the state directory dir;
// here it cannot tell, and serve says so when it opens the store.
func stateHeld(string) bool { return false }
