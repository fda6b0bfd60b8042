package mapstore_test

import (
	"sync"
	"testing"
	"time"

	"github.com/keypool-go/keypool"
	"github.com/keypool-go/keypool/examples/mapstore"
	"github.com/keypool-go/keypool/storetest"
)

// clock is the time the suite moves.
type clock struct {
	mu sync.Mutex // guards t
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(_ *testing.T, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func harness() storetest.Harness {
	c := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	return storetest.Harness{
		Open:       func(*testing.T) keypool.Store { return mapstore.New() },
		Now:        c.Now,
		Advance:    c.Advance,
		ExactTimes: true, // its windows are logs of exact times
	}
}

func TestConformance(t *testing.T) { storetest.Run(t, harness()) }

func TestParity(t *testing.T) { storetest.Parity(t, harness()) }
