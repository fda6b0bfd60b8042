package redisstore

// HoldSends makes each send of adjustments off the request path run hook
// once it has carried them, before it sends them, until undo.
func HoldSends(hook func()) (undo func()) {
	testHookSending.Store(&hook)
	return func() { testHookSending.Store(nil) }
}
