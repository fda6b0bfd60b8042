// Package vendorsim is a fake LLM vendor for keypool's tests, benchmarks,
// the keypool demo command and the local proxy's end-to-end tests.
//
// A Server answers chat requests in one vendor's dialect (OpenAI, an
// OpenAI-compatible vendor, Anthropic or Gemini) with that vendor's paths,
// rate-limit headers, error bodies, usage and SSE streams. Each of its keys
// has its own strict windows (requests and tokens per minute and per day,
// exact sliding windows on the server's clock), and can be revoked, out of
// credit, spent for the week, subscription-style, faulty, slow, or scripted
// answer by answer. Keys naming the same account (Key.Account) share the
// account's windows instead, as vendors scope limits to an organisation or
// project. The server counts what it answered, per key, per account and in
// total, and remembers when each key and each account accepted each
// request, so that a test can check that nothing ever sent a key or an
// account more than its limit. SetLimits changes limits while it runs.
// Config.PromptCache turns on a prompt cache per key (per account for the
// keys of one), so that a test can count how much of its prompts a vendor
// would read from cache (Counts.CachedTokens of Counts.InputTokens).
//
// The sim is strict where a vendor is strict and simple where a test wants
// it simple: a request's prompt is its body's length / 4 tokens, its
// completion Config.OutputTokens (default 100) or max_tokens, whichever is
// less, and windows are per key (or per account), not per key × model: a
// request counts in them whatever model it names.
package vendorsim

import (
	"errors"
	"fmt"
	"hash/maphash"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Config configures a Server.
type Config struct {
	// Dialect is the vendor the sim speaks as; default OpenAI.
	Dialect Dialect
	// Keys are the keys the sim knows; at least one.
	Keys []Key
	// Accounts are the accounts keys may name (Key.Account), by name, with
	// their limits; nil for none. A name is not empty and is no key's ID.
	Accounts map[string]Limits
	// Clock is the sim's clock, on which its windows slide; default
	// time.Now. Tests set it to drive windows deterministically. Latency
	// waits in real time whatever the clock.
	Clock func() time.Time
	// Seed seeds the keys' fault generators.
	Seed uint64
	// OutputTokens is the length of the sim's answers, in tokens, when
	// max_tokens does not cut them shorter; default 100.
	OutputTokens int64
	// History is how many accepted requests each key, and each account,
	// remembers for Accepted, MaxInWindow and MaxTokensInWindow (the
	// latest); default 100000.
	History int
	// PromptCache, when set, turns on a prompt cache per key, shared by
	// the keys of an account as a vendor's organisation shares one (see
	// PromptCache); nil, the default, is none, and answers carry no cache
	// figures.
	PromptCache *PromptCache
}

// defaultHistory is Config.History's default.
const defaultHistory = 100_000

// Server is a fake vendor: an http.Handler, and, from Start, the loopback
// HTTP server that serves it. It is safe for concurrent use.
type Server struct {
	dialect  dialect
	clock    func() time.Time
	output   int64
	history  int
	start    time.Time // the clock when the server was made
	keys     []*keyState
	bySecret map[string]*keyState
	byID     map[string]*keyState
	accounts map[string]*accountState // by name
	seq      atomic.Uint64            // request IDs
	cache    bool                     // the prompt cache is on
	seed     maphash.Seed             // hashes the prompt cache's prefixes

	// totalsMu guards totals.
	totalsMu sync.Mutex
	totals   Counts

	done      chan struct{} // closed by Close; cuts latency waits short
	closeOnce sync.Once
	ts        *httptest.Server // set by Start
}

// New returns a Server for cfg, not yet listening: serve it with any HTTP
// server, or use Start. It returns an error naming what is wrong with cfg.
func New(cfg Config) (*Server, error) {
	d, ok := newDialect(cfg.Dialect)
	if !ok {
		return nil, fmt.Errorf("vendorsim: unknown dialect %q", cfg.Dialect)
	}
	if err := validateKeys(cfg.Keys, cfg.Accounts); err != nil {
		return nil, err
	}
	if err := validateAccounts(cfg.Accounts, cfg.Keys); err != nil {
		return nil, err
	}
	if cfg.OutputTokens < 0 {
		return nil, errors.New("vendorsim: negative OutputTokens")
	}
	if cfg.History < 0 {
		return nil, errors.New("vendorsim: negative History")
	}
	if c := cfg.PromptCache; c != nil && (c.Lifetime < 0 || c.Entries < 0) {
		return nil, errors.New("vendorsim: negative PromptCache.Lifetime or PromptCache.Entries")
	}
	s := &Server{
		dialect:  d,
		clock:    cfg.Clock,
		output:   cfg.OutputTokens,
		history:  cfg.History,
		bySecret: make(map[string]*keyState, len(cfg.Keys)),
		byID:     make(map[string]*keyState, len(cfg.Keys)),
		accounts: make(map[string]*accountState, len(cfg.Accounts)),
		cache:    cfg.PromptCache != nil,
		seed:     maphash.MakeSeed(),
		done:     make(chan struct{}),
	}
	if s.clock == nil {
		s.clock = time.Now
	}
	if s.output == 0 {
		s.output = defaultOutputTokens
	}
	if s.history == 0 {
		s.history = defaultHistory
	}
	s.start = s.clock()
	for name, l := range cfg.Accounts {
		a := &accountState{name: name, win: newWindows(l)}
		if s.cache {
			a.cache = newPromptCache(*cfg.PromptCache)
		}
		s.accounts[name] = a
	}
	for i, k := range cfg.Keys {
		a := s.accounts[k.Account] // nil for a key without an account
		ks := newKeyState(k, i, cfg.Seed, a)
		if a != nil {
			a.keys = append(a.keys, ks)
		} else if s.cache {
			ks.cache = newPromptCache(*cfg.PromptCache)
		}
		s.keys = append(s.keys, ks)
		s.bySecret[k.Secret] = ks
		s.byID[ks.id] = ks
	}
	return s, nil
}

// Start returns a Server for cfg listening on a loopback address (see URL).
// Like httptest.NewServer, it panics when it cannot: here also when cfg is
// invalid (New returns that error instead). Close stops it.
func Start(cfg Config) *Server {
	s, err := New(cfg)
	if err != nil {
		panic(err)
	}
	s.ts = httptest.NewServer(s)
	return s
}

// URL returns the base URL of a started Server, like "http://127.0.0.1:1234",
// or "" for one made by New.
func (s *Server) URL() string {
	if s.ts == nil {
		return ""
	}
	return s.ts.URL
}

// Close cuts short the answers waiting out a latency, stops a started
// Server and waits for its requests to finish, so that no goroutine of the
// sim outlives it. It may be called more than once.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		close(s.done)
		if s.ts != nil {
			s.ts.Close()
		}
	})
}

// ServeHTTP answers one request as the vendor would. It never panics on a
// bad request: it answers 400 (or 404, 405, 413) with the dialect's JSON
// error.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a := &reply{id: "sim" + strconv.FormatUint(s.seq.Add(1), 10)}
	rt, status, msg := s.dialect.route(r)
	if status != 0 {
		a.now = s.clock()
		s.dialect.badRequest(w, a, status, msg)
		s.addTotal(classBadRequest, false, tally{})
		return
	}
	a.rt = rt
	secret := credential(r)
	ks := s.bySecret[secret]
	if ks == nil {
		a.now = s.clock()
		why := authUnknown
		if secret == "" {
			why = authMissing
		}
		s.dialect.unauthorized(w, a, why)
		s.addTotal(classUnauthorized, false, tally{})
		return
	}

	q := ask{start: s.start, output: s.output, faultStatus: s.dialect.faultStatus(), history: s.history,
		cacheReadsFree: !s.dialect.windowsCountCacheReads()}
	body, err := readBody(w, r)
	switch {
	case errors.Is(err, errBodyTooLarge):
		q.badStatus, q.badMsg = http.StatusRequestEntityTooLarge, fmt.Sprintf("request body is over %d bytes", maxBody)
	case err != nil:
		q.badStatus, q.badMsg = http.StatusBadRequest, "cannot read the request body: "+err.Error()
	default:
		if q.req, err = s.dialect.parse(body, rt); err != nil {
			q.badStatus, q.badMsg = http.StatusBadRequest, err.Error()
		} else if s.cache {
			s.readPrompt(&q, body)
		}
	}
	q.now = s.clock()
	d := ks.decide(q)
	s.addTotal(d.class, d.out == outScript, d.tally)

	if !s.sleep(r, ks.cfg.Latency) {
		return // the client is gone
	}
	a.now, a.req, a.completion, a.truncated = d.now, q.req, d.completion, d.truncated
	a.model, a.account = q.req.model, ks.cfg.Account
	a.cache, a.cached, a.written = s.cache, d.cached, d.written
	if a.model == "" {
		a.model = s.dialect.defaultModel()
	}
	s.write(w, a, d)
}

// readPrompt reads the prompt of a parsed body into q for the prompt cache:
// its prefixes, for the model the request names (the path's, for Gemini).
// A body whose messages are not an array has no prefixes: it neither reads
// the cache nor writes to it, and is answered as without the cache.
func (s *Server) readPrompt(q *ask, body []byte) {
	if msgs, err := s.dialect.prompt(body); err == nil {
		q.req.prefixes = prefixesOf(s.seed, q.req.model, msgs)
	}
}

// sleep waits out a latency in real time; it returns false when the request
// was cancelled first, and true at once when the server is closing.
func (s *Server) sleep(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.done:
		return true
	case <-r.Context().Done():
		return false
	}
}

// write sends the answer d decided.
func (s *Server) write(w http.ResponseWriter, a *reply, d decision) {
	if d.out == outScript {
		h := w.Header()
		for name, values := range d.script.Header {
			h[http.CanonicalHeaderKey(name)] = append([]string(nil), values...)
		}
		w.WriteHeader(d.script.Status)
		_, _ = w.Write([]byte(d.script.Body))
		return
	}
	if d.st != nil {
		s.dialect.headers(w.Header(), d.st)
	}
	switch d.out {
	case outRevoked:
		s.dialect.unauthorized(w, a, authRevoked)
	case outBadRequest:
		s.dialect.badRequest(w, a, d.status, d.msg)
	case outNoCredit:
		s.dialect.noCredit(w, a)
	case outUsageLimit:
		s.dialect.usageLimited(w, a, d.usage)
	case outFault:
		s.dialect.fault(w, a, d.status)
	case outRateLimit:
		s.dialect.rateLimited(w, a, d.refusal)
	default:
		s.dialect.serve(w, a)
	}
}
