package keypool

import (
	"sync"
	"sync/atomic"

	"github.com/keypool-go/keypool/internal/windowspec"
)

// maxNames bounds the names a names holds: model names come from requests,
// and a client sending endless names must not grow memory without end.
const maxNames = 1024

// names interns model names: a pool's requests name a few models, and
// looking the name up spares an allocation per request. It interns only
// names windowspec.CheckModel passes, so that a name it holds needs no
// check again (holds), and a client's unusable names take none of its
// room. It is safe for concurrent use; a nil names interns nothing.
type names struct {
	last atomic.Pointer[string] // the name got last: most requests repeat it
	mu   sync.RWMutex           // guards m
	m    map[string]*string
}

// get returns b as a string, the same string each time for the same bytes.
func (n *names) get(b []byte) string {
	if n == nil {
		return string(b)
	}
	if last := n.last.Load(); last != nil && *last == string(b) {
		return *last
	}
	n.mu.RLock()
	p, ok := n.m[string(b)]
	n.mu.RUnlock()
	if ok {
		n.last.Store(p)
		return *p
	}
	s := string(b)
	if windowspec.CheckModel(s) != nil {
		return s
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.m == nil {
		n.m = make(map[string]*string)
	}
	if p, ok := n.m[s]; ok {
		return *p // interned since the look above
	}
	if len(n.m) < maxNames {
		n.m[s] = &s
		n.last.Store(&s)
	}
	return s
}

// holds reports whether s is the name get returned last from what it
// holds — a name windowspec.CheckModel has passed. Most requests name the
// model the one before named, and the check of such a name is one
// comparison of two strings that are one string.
func (n *names) holds(s string) bool {
	if n == nil {
		return false
	}
	last := n.last.Load()
	return last != nil && *last == s
}
