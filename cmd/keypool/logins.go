package main

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// attempts limits the tries at an operator token from one client address
// — a status page login, or a token presented to one of the proxy's own
// endpoints — with a wait that grows with each failure: the first
// freeAttempts fail freely (a typo), then each failure makes the address
// wait firstWait, doubled at each failure after, up to longestWait, before
// its next try; a try during the wait is refused unread, whatever the
// token. A success, or forgetAfter without a failure, starts the address
// afresh. An address is its IPv4 address, or its IPv6 /64, which one
// client holds whole. At most maxAddrs addresses are kept: beyond them, the
// addresses not kept share one count, so that a flood from many addresses
// is slowed as one.
//
// Behind a front (a TLS-terminating proxy) every client has the front's
// address: they share its count.
//
// Time is an input; it is safe for concurrent use.
type attempts struct {
	mu     sync.Mutex // guards the fields below
	byAddr map[string]*failures
	others failures // the addresses beyond maxAddrs
}

// failures counts an address's failed tries, and when the last was.
type failures struct {
	n    int
	last time.Time
}

const (
	freeAttempts = 3
	firstWait    = time.Second
	longestWait  = 15 * time.Minute
	forgetAfter  = time.Hour
	maxAddrs     = 4096
)

// waitAfter returns how long an address waits before its next try after
// n failures in a row: none for the first freeAttempts, then firstWait,
// doubling, up to longestWait.
func waitAfter(n int) time.Duration {
	if n < freeAttempts {
		return 0
	}
	if n-freeAttempts >= 20 { // 2^20 s is past longestWait
		return longestWait
	}
	return min(firstWait<<(n-freeAttempts), longestWait)
}

// wait returns how long the address of a request, remote (as
// http.Request.RemoteAddr gives it), must still wait at now before it may
// try; 0 when it may.
func (a *attempts) wait(remote string, now time.Time) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	f := a.of(clientAddr(remote), now, false)
	if f == nil {
		return 0
	}
	return max(f.last.Add(waitAfter(f.n)).Sub(now), 0)
}

// failed counts a failed try from remote at now.
func (a *attempts) failed(remote string, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f := a.of(clientAddr(remote), now, true)
	f.n++
	f.last = now
}

// succeeded starts remote afresh.
func (a *attempts) succeeded(remote string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.byAddr, clientAddr(remote))
}

// of returns the count of addr at now, or nil when it has none and
// create is not set; a count forgotten at now is none. Its
// caller holds a.mu.
func (a *attempts) of(addr string, now time.Time, create bool) *failures {
	if f, ok := a.byAddr[addr]; ok {
		if forgotten(f, now) {
			*f = failures{}
		}
		return f
	}
	if !create {
		if len(a.byAddr) < maxAddrs || forgotten(&a.others, now) {
			return nil
		}
		return &a.others
	}
	if a.byAddr == nil {
		a.byAddr = map[string]*failures{}
	}
	if len(a.byAddr) >= maxAddrs {
		for k, f := range a.byAddr {
			if forgotten(f, now) {
				delete(a.byAddr, k)
			}
		}
	}
	if len(a.byAddr) >= maxAddrs {
		if forgotten(&a.others, now) {
			a.others = failures{}
		}
		return &a.others
	}
	f := &failures{}
	a.byAddr[addr] = f
	return f
}

// forgotten reports whether a count is over at now: its wait has passed,
// and forgetAfter since its last failure.
func forgotten(f *failures, now time.Time) bool {
	end := f.last.Add(max(waitAfter(f.n), forgetAfter))
	return !now.Before(end)
}

// clientAddr returns the address a limit counts remote (host:port) as:
// its IPv4 address, or its IPv6 /64; remote itself when it is neither.
func clientAddr(remote string) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return remote
	}
	ip = ip.Unmap()
	if ip.Is4() {
		return ip.String()
	}
	prefix, _ := ip.WithZone("").Prefix(64)
	return prefix.String()
}
