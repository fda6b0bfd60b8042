package main

import (
	"net"
	"net/http"
	"sync"
)

// freshConns holds the connections that have not yet sent a byte of a
// request (http.StateNew), so that a shutdown can close them at once:
// net/http counts such a connection as busy for its first five seconds,
// and a client that dials ahead — as Go's own does — would otherwise hold
// every shutdown for the whole of its drain.
type freshConns struct {
	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	closing bool
}

// note is the server's ConnState hook.
func (f *freshConns) note(c net.Conn, state http.ConnState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if state != http.StateNew {
		delete(f.conns, c)
		return
	}
	if f.closing {
		_ = c.Close()
		return
	}
	if f.conns == nil {
		f.conns = make(map[net.Conn]struct{})
	}
	f.conns[c] = struct{}{}
}

// close closes the connections that have sent nothing, and every one
// that opens from now on.
func (f *freshConns) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closing = true
	for c := range f.conns {
		_ = c.Close()
	}
	clear(f.conns)
}
