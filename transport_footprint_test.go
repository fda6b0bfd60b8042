package keypool

import (
	"net/http"
	"runtime"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
)

// TestTransportFootprint holds the allocations of a request through the
// pool — 100 keys, all four limits, the vendor's rate-limit headers and a
// usage body on every answer — to no more than the floor's, the least a
// key-injecting transport does (clone the request, set the header). The
// pool's own are the request's state (its body, its answer's metered
// body, its reservation and the copy of the request its first attempt
// sends, in one) and the body's bytes; its copy of the request costs one
// fewer than a clone's, which copies the URL.
func TestTransportFootprint(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates for itself")
	}
	base := newCannedBase()
	var tb testing.B
	pool := benchPool(&tb, 100).Transport(base)
	floor := floor{base: base, auth: []string{"Bearer sk-1"}}
	count := func(rt http.RoundTripper) float64 {
		for range 300 { // every key's state is made at its first request
			roundTrip(&tb, rt)
		}
		return testing.AllocsPerRun(200, func() { roundTrip(&tb, rt) })
	}
	floorAllocs, poolAllocs := count(floor), count(pool)
	assert.LessOrEqual(t, poolAllocs, floorAllocs, "allocations a request: pool %v, floor %v", poolAllocs, floorAllocs)
}

// TestExchangeSize holds a request's state, allocated at once, in the
// allocator's 640-byte class, as the allocator counts it: an object of
// more than 512 bytes that holds pointers carries an 8-byte header (since
// Go 1.22), so 576 bytes of fields take 584, in the 640 class, and 633
// would take the next, 704.
func TestExchangeSize(t *testing.T) {
	assert.LessOrEqual(t, unsafe.Sizeof(exchange{}), uintptr(632), "bytes of an exchange")
	var before, after runtime.MemStats
	const n = 1000
	keep := make([]*exchange, n)
	runtime.ReadMemStats(&before)
	for i := range keep {
		keep[i] = new(exchange)
	}
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(keep)
	assert.LessOrEqual(t, (after.TotalAlloc-before.TotalAlloc)/n, uint64(640), "bytes the allocator gives an exchange")
}
