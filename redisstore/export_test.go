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

// testTime is the scripts' servertime under WithServerClock: the time
// each call passes first in its arguments.
const testTime = `local NOW = tonumber(table.remove(ARGV, 1))
local function servertime() return NOW end`

// WithServerClock makes the store count by now in place of the Redis
// server's TIME, so that a test moves the time of a real Redis; what
// expires in Redis still does by the server's clock.
func WithServerClock(now func() time.Time) Option {
	return option(func(c *config) error {
		c.script, c.serverNow = newScript(testTime), now
		return nil
	})
}
