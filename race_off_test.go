//go:build !race

package keypool

// raceEnabled reports that the tests run under the race detector, whose
// shadow memory makes resident-memory figures meaningless and which
// allocates for itself and empties sync.Pools at random.
const raceEnabled = false
