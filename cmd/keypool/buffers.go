package main

import "sync"

// copyBufferSize is the size of the buffer httputil.ReverseProxy copies an
// answer's body through: the size it allocates itself without a pool.
const copyBufferSize = 32 << 10

// copyBuffers lends the buffers the proxy copies answers through, so that
// a request does not allocate and clear 32 KiB of its own. Each buffer is
// kept as a pointer to its array: putting it back allocates nothing.
type copyBuffers struct{ pool sync.Pool }

// Get returns a buffer of copyBufferSize bytes.
func (c *copyBuffers) Get() []byte {
	if b, ok := c.pool.Get().(*[copyBufferSize]byte); ok {
		return b[:]
	}
	return new([copyBufferSize]byte)[:]
}

// Put takes back a buffer of copyBufferSize bytes, as Get returns; one of
// another length or capacity — a window into a larger array, which it
// would keep whole — is left to the collector.
func (c *copyBuffers) Put(b []byte) {
	if len(b) != copyBufferSize || cap(b) != copyBufferSize {
		return
	}
	c.pool.Put((*[copyBufferSize]byte)(b))
}
