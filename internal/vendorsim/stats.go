package vendorsim

import (
	"slices"
	"strings"
	"time"
)

// Counts tallies the answers the sim sent. Each answer counts in Requests
// and in exactly one of the classes below, chosen by why it was sent (a
// scripted answer, by its status).
type Counts struct {
	// Requests counts every answer.
	Requests int64
	// Served counts accepted requests (and scripted answers below 400).
	Served int64
	// RateLimited counts refusals by a window: RPM, RPD, TPM, TPD, a spent
	// subscription window (and scripted 429s). Billing errors sent as 429
	// count in Billing.
	RateLimited int64
	// Unauthorized counts authentication errors, whatever their status:
	// missing, unknown and revoked keys (and scripted 401s and 403s).
	Unauthorized int64
	// Billing counts billing errors, whatever their status (and scripted
	// 402s).
	Billing int64
	// ServerErrors counts faults: 5xx and 529 (and scripted 5xx).
	ServerErrors int64
	// BadRequests counts answers to malformed requests, unknown paths and
	// wrong methods (and other scripted 4xx).
	BadRequests int64
	// Scripted counts the answers taken from a script; each also counts in
	// its class.
	Scripted int64
	// Tokens counts the total tokens (prompt plus completion) of accepted
	// requests, as the token windows count them: for Anthropic with the
	// prompt cache on, the prompt tokens read from the cache left out.
	Tokens int64
	// InputTokens counts the prompt tokens of accepted requests, those read
	// from the prompt cache included.
	InputTokens int64
	// CachedTokens counts the prompt tokens of accepted requests read from
	// the prompt cache (Config.PromptCache); CachedTokens / InputTokens is
	// the cache's hit rate, by tokens.
	CachedTokens int64
}

// tally is the tokens of one answer as the counters count them.
type tally struct {
	tokens int64 // Counts.Tokens
	input  int64 // Counts.InputTokens
	cached int64 // Counts.CachedTokens
}

// KeyStats is one key's counters.
type KeyStats struct {
	ID string
	Counts
}

// AccountStats is one account's counters: the sums of its keys' counters
// (every answer they were sent, whichever window or script decided it).
type AccountStats struct {
	Name string
	Keys []string // the IDs of its keys, in the order of Config.Keys
	Counts
}

// class is the counter an answer counts in.
type class int

const (
	classServed class = iota
	classRateLimited
	classUnauthorized
	classBilling
	classServerError
	classBadRequest
)

// classOfStatus is the class of a scripted answer.
func classOfStatus(status int) class {
	switch {
	case status < 400:
		return classServed
	case status == 429:
		return classRateLimited
	case status == 401 || status == 403:
		return classUnauthorized
	case status == 402:
		return classBilling
	case status >= 500:
		return classServerError
	}
	return classBadRequest
}

// add counts one answer.
func (c *Counts) add(cl class, scripted bool, t tally) {
	c.Requests++
	switch cl {
	case classServed:
		c.Served++
	case classRateLimited:
		c.RateLimited++
	case classUnauthorized:
		c.Unauthorized++
	case classBilling:
		c.Billing++
	case classServerError:
		c.ServerErrors++
	case classBadRequest:
		c.BadRequests++
	}
	if scripted {
		c.Scripted++
	}
	c.Tokens += t.tokens
	c.InputTokens += t.input
	c.CachedTokens += t.cached
}

// addTotal counts one answer in the server's totals.
func (s *Server) addTotal(cl class, scripted bool, t tally) {
	s.totalsMu.Lock()
	s.totals.add(cl, scripted, t)
	s.totalsMu.Unlock()
}

// Totals returns the counters of every answer the sim sent, including those
// to unknown keys and unknown paths.
func (s *Server) Totals() Counts {
	s.totalsMu.Lock()
	defer s.totalsMu.Unlock()
	return s.totals
}

// Stats returns every key's counters, in the order of Config.Keys.
func (s *Server) Stats() []KeyStats {
	out := make([]KeyStats, len(s.keys))
	for i, ks := range s.keys {
		ks.mu.Lock()
		out[i] = KeyStats{ID: ks.id, Counts: ks.counts}
		ks.mu.Unlock()
	}
	return out
}

// StatsOf returns the counters of the key with the given ID, and false when
// there is no such key.
func (s *Server) StatsOf(id string) (KeyStats, bool) {
	ks := s.byID[id]
	if ks == nil {
		return KeyStats{}, false
	}
	ks.mu.Lock()
	defer ks.mu.Unlock()
	return KeyStats{ID: ks.id, Counts: ks.counts}, true
}

// Accounts returns every account's counters, sorted by name.
func (s *Server) Accounts() []AccountStats {
	out := make([]AccountStats, 0, len(s.accounts))
	for _, a := range s.accounts {
		out = append(out, a.stats())
	}
	slices.SortFunc(out, func(x, y AccountStats) int { return strings.Compare(x.Name, y.Name) })
	return out
}

// AccountStatsOf returns the counters of the account with the given name,
// and false when there is no such account.
func (s *Server) AccountStatsOf(name string) (AccountStats, bool) {
	a := s.accounts[name]
	if a == nil {
		return AccountStats{}, false
	}
	return a.stats(), true
}

// stats sums the account's keys' counters, taking one key's lock at a time.
func (a *accountState) stats() AccountStats {
	st := AccountStats{Name: a.name, Keys: make([]string, len(a.keys))}
	for i, ks := range a.keys {
		st.Keys[i] = ks.id
		ks.mu.Lock()
		st.Counts.merge(ks.counts)
		ks.mu.Unlock()
	}
	return st
}

// merge adds the counters of o to c.
func (c *Counts) merge(o Counts) {
	c.Requests += o.Requests
	c.Served += o.Served
	c.RateLimited += o.RateLimited
	c.Unauthorized += o.Unauthorized
	c.Billing += o.Billing
	c.ServerErrors += o.ServerErrors
	c.BadRequests += o.BadRequests
	c.Scripted += o.Scripted
	c.Tokens += o.Tokens
	c.InputTokens += o.InputTokens
	c.CachedTokens += o.CachedTokens
}

// Accepted returns when the key with the given ID, or the account with the
// given name, accepted each request it remembers (at most Config.History,
// the latest), oldest first, on the sim's clock; nil for an unknown ID or
// name.
func (s *Server) Accepted(id string) []time.Time {
	h := s.historyOf(id)
	if h == nil {
		return nil
	}
	out := make([]time.Time, len(h))
	for i, e := range h {
		out[i] = e.at
	}
	return out
}

// MaxInWindow returns the most requests the key with the given ID, or the
// account with the given name (all its keys together), accepted in any
// half-open span of the given length, over the requests it remembers; 0 for
// an unknown ID or name. A strict vendor never lets it exceed the key's or
// the account's limit for that span.
func (s *Server) MaxInWindow(id string, window time.Duration) int {
	ones := s.historyOf(id)
	for i := range ones {
		ones[i].n = 1
	}
	return int(maxInSpan(ones, window))
}

// MaxTokensInWindow returns the most tokens (prompt plus completion) the key
// with the given ID, or the account with the given name, accepted in any
// half-open span of the given length, over the requests it remembers; 0 for
// an unknown ID or name.
func (s *Server) MaxTokensInWindow(id string, window time.Duration) int64 {
	return maxInSpan(s.historyOf(id), window)
}

// historyOf returns a copy of a key's or an account's accepted requests;
// nil for an unknown ID or name, and never nil for a known one.
func (s *Server) historyOf(id string) []entry {
	if a := s.accounts[id]; a != nil {
		a.mu.Lock()
		defer a.mu.Unlock()
		return append([]entry{}, a.history...)
	}
	ks := s.byID[id]
	if ks == nil {
		return nil
	}
	ks.mu.Lock()
	defer ks.mu.Unlock()
	return append([]entry{}, ks.history...)
}

// ResetStats zeroes every counter and forgets the accepted-request history
// of keys and accounts. The windows, scripts, fault bursts and prompt caches
// carry on: they are the vendor's state, not the counters'.
func (s *Server) ResetStats() {
	for _, ks := range s.keys {
		ks.mu.Lock()
		ks.counts = Counts{}
		ks.history = nil
		ks.mu.Unlock()
	}
	for _, a := range s.accounts {
		a.mu.Lock()
		a.history = nil
		a.mu.Unlock()
	}
	s.totalsMu.Lock()
	s.totals = Counts{}
	s.totalsMu.Unlock()
}
