//go:build race

package main

// raceEnabled reports that the tests run under the race detector, which
// allocates for itself and empties sync.Pools at random.
const raceEnabled = true
