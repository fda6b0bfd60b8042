package main

import (
	"container/list"
	"context"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// pendingConns holds the connections whose first request has not reached
// a handler: they have sent nothing yet, or headers that are not all in.
// Until then no token has been checked, yet the server holds what it has
// read of the headers — up to max_header_bytes each, for header_timeout —
// so it keeps at most max of them: when one more opens, the one that has
// waited longest is closed. A client that sends its request at once is
// never the one that has waited longest for long.
//
// A shutdown closes them all at once: there is no request on them to wait
// for, and net/http counts a connection that has sent nothing as busy for
// its first five seconds — a client that dials ahead, as Go's own does,
// would otherwise hold every shutdown for the whole of its drain.
//
// It is the server's ConnContext and ConnState hooks, and is safe for
// concurrent use.
type pendingConns struct {
	max int
	log *slog.Logger // says, at most once a minute, that connections were closed to keep max

	closed   atomic.Int64 // connections closed to keep max
	loggedAt atomic.Int64 // when that was last logged, in Unix nanoseconds

	mu      sync.Mutex // guards the fields below
	order   list.List  // of *pendingConn, the one that has waited longest first
	byConn  map[net.Conn]*list.Element
	closing bool
}

// pendingConn is one connection of pendingConns; its request's context
// carries it.
type pendingConn struct {
	conn    net.Conn
	arrived atomic.Bool // its first request has reached a handler
}

type pendingKey struct{}

// opened is the ConnContext hook: it holds a connection just accepted,
// closing the one that has waited longest when there are more than max.
func (p *pendingConns) opened(ctx context.Context, c net.Conn) context.Context {
	pc := &pendingConn{conn: c}
	evicted := 0
	p.mu.Lock()
	if p.closing {
		p.mu.Unlock()
		_ = c.Close()
		return ctx
	}
	if p.byConn == nil {
		p.byConn = make(map[net.Conn]*list.Element)
	}
	p.byConn[c] = p.order.PushBack(pc)
	for p.max > 0 && p.order.Len() > p.max {
		oldest := p.order.Remove(p.order.Front()).(*pendingConn)
		delete(p.byConn, oldest.conn)
		_ = oldest.conn.Close()
		evicted++
	}
	p.mu.Unlock()
	if evicted > 0 {
		p.evicted(evicted)
	}
	return context.WithValue(ctx, pendingKey{}, pc)
}

// evicted counts n connections closed to keep max, and logs the count at
// most once a minute: a flood is one line a minute, not one a connection.
func (p *pendingConns) evicted(n int) {
	total := p.closed.Add(int64(n))
	now := time.Now().UnixNano()
	last := p.loggedAt.Load()
	if p.log == nil || now-last < int64(time.Minute) || !p.loggedAt.CompareAndSwap(last, now) {
		return
	}
	p.log.Warn("more connections than max_pending_conns have sent no whole request: the ones that waited longest were closed",
		"max_pending_conns", p.max, "closed_since_start", total)
}

// note is the ConnState hook: a connection closed or hijacked is no longer
// held.
func (p *pendingConns) note(c net.Conn, state http.ConnState) {
	if state == http.StateClosed || state == http.StateHijacked {
		p.forget(c)
	}
}

// arrive lets go of the connection of each request next is given, at its
// first: what it sent is a whole request, which the handlers judge.
func (p *pendingConns) arrive(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if pc, _ := r.Context().Value(pendingKey{}).(*pendingConn); pc != nil && !pc.arrived.Load() && !pc.arrived.Swap(true) {
			p.forget(pc.conn)
		}
		next.ServeHTTP(w, r)
	})
}

func (p *pendingConns) forget(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.byConn[c]; ok {
		p.order.Remove(e)
		delete(p.byConn, c)
	}
}

// count returns how many connections are held.
func (p *pendingConns) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.order.Len()
}

// close closes the connections held, and every one that opens from now
// on.
func (p *pendingConns) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closing = true
	for e := p.order.Front(); e != nil; e = e.Next() {
		_ = e.Value.(*pendingConn).conn.Close()
	}
	p.order.Init()
	clear(p.byConn)
}
