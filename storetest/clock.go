package storetest

import (
	"sync"
	"testing"
	"time"
)

// Clock is a clock a test moves: its Now and Advance serve as a Harness's
// for a store that reads the time from Take.Now, or that is given Now as
// its server's clock. It is safe for concurrent use.
type Clock struct {
	mu sync.Mutex // guards t
	t  time.Time
}

// NewClock returns a Clock that stands at t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock by d.
func (c *Clock) Advance(_ *testing.T, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
