package redisstore

import "time"

// WithProbeEvery sets how often a Redis taken as down is asked whether it
// is back: probeEvery by default; the outage tests shorten it.
func WithProbeEvery(d time.Duration) Option {
	return option(func(c *config) error {
		c.probeEvery = d
		return nil
	})
}

// HoldSends makes each send of adjustments off the request path run hook
// once it has carried them, before it sends them, until undo.
func HoldSends(hook func()) (undo func()) {
	testHookSending.Store(&hook)
	return func() { testHookSending.Store(nil) }
}
