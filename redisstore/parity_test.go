package redisstore_test

import (
	"testing"

	"github.com/keypool-go/keypool/redisstore"
	"github.com/keypool-go/keypool/storetest"
)

// TestSameAsMemoryStore holds a Redis store (on miniredis) to the
// MemoryStore's answers, step for step (storetest.Parity): the Lua windows
// count as the Go ones do. PARITY_SEED=100 walks other random paths.
func TestSameAsMemoryStore(t *testing.T) {
	f := newFakeRedis(t)
	h := harness(f.client(t), redisstore.WithClock(f.Now))
	h.Now, h.Advance = f.Now, f.Advance
	storetest.Parity(t, h)
}

// TestSameAsMemoryStoreRedis holds the store on a real redis-server to the
// MemoryStore's answers, on a clock the test moves (WithServerClock).
func TestSameAsMemoryStoreRedis(t *testing.T) {
	storetest.Parity(t, clockHarness(realRedis(t)))
}
