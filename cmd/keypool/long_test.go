package main

import (
	"os"
	"testing"
)

// long skips a test that runs for minutes of real time unless
// KEYPOOL_LONG=1: CI sets it (.ci/run).
func long(t *testing.T) {
	t.Helper()
	if os.Getenv("KEYPOOL_LONG") != "1" {
		t.Skip("a long test: set KEYPOOL_LONG=1 (CI does)")
	}
}
