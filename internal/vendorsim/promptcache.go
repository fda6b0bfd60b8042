package vendorsim

import (
	"bytes"
	"container/list"
	"encoding/binary"
	"encoding/json"
	"hash/maphash"
	"time"
)

// PromptCache configures the sim's prompt cache, as vendors keep one: a
// request whose prompt begins with messages an earlier request of the same
// key (or of a key of the same account) began with, within the lifetime,
// reads that prefix from the cache, and its answer says how many of its
// prompt tokens were read: OpenAI's usage.prompt_tokens_details.cached_tokens,
// Anthropic's usage.cache_read_input_tokens (with cache_creation_input_tokens
// for the messages it wrote), Gemini's usageMetadata.cachedContentTokenCount.
//
// A prompt is its messages in order: OpenAI's messages, Anthropic's system
// then messages, Gemini's systemInstruction then contents; a prefix is a run
// of whole messages from the first, for one model. A prefix's tokens are its
// messages' length in the body / 4, the sim's estimate for prompts. Unlike a
// vendor, the sim caches any prefix however short, with no breakpoints and
// no 1024-token minimum.
type PromptCache struct {
	// Lifetime is how long a prefix stays cached after its last use (a
	// request that reads or writes it), on the sim's clock; default 5
	// minutes.
	Lifetime time.Duration
	// Entries bounds how many prefixes each key's (or each account's) cache
	// holds; the least recently used leaves first. Default 4096.
	Entries int
}

// The prompt cache's defaults.
const (
	defaultCacheLifetime = 5 * time.Minute
	defaultCacheEntries  = 4096
)

// prefix is one prefix of a request's prompt: a hash of its messages (and
// model), and its tokens.
type prefix struct {
	hash   uint64
	tokens int64
}

// prefixesOf returns the prefixes of a prompt of the given messages for a
// model, shortest first: prefix i holds messages[0..i]. The hash chains each
// message's compacted JSON, so that two prompts share prefix i only when they
// share their first i+1 messages; tokens count the messages' raw length / 4.
func prefixesOf(seed maphash.Seed, model string, messages []json.RawMessage) []prefix {
	if len(messages) == 0 {
		return nil
	}
	var h maphash.Hash
	h.SetSeed(seed)
	var n [8]byte
	write := func(b []byte) {
		binary.LittleEndian.PutUint64(n[:], uint64(len(b)))
		_, _ = h.Write(n[:])
		_, _ = h.Write(b)
	}
	write([]byte(model))
	out := make([]prefix, len(messages))
	var size int64
	var buf bytes.Buffer
	for i, m := range messages {
		buf.Reset()
		if json.Compact(&buf, m) != nil { // the body decoded, so it compacts
			buf.Reset()
			buf.Write(m)
		}
		write(buf.Bytes())
		size += int64(len(m))
		out[i] = prefix{hash: h.Sum64(), tokens: size / 4}
	}
	return out
}

// promptCache is one key's, or one account's, cached prefixes: a bounded
// map, least recently used first out, each entry alive until its last use
// plus the lifetime. Like slidingWindow it is pure bookkeeping on the times
// it is given: its owner locks it and passes non-decreasing times.
type promptCache struct {
	lifetime time.Duration
	limit    int
	byHash   map[uint64]*list.Element // of *cacheEntry
	lru      list.List                // most recently used first
}

// cacheEntry is one cached prefix and its last use.
type cacheEntry struct {
	hash uint64
	used time.Time
}

// newPromptCache returns an empty cache for the configuration c, its
// defaults filled in.
func newPromptCache(c PromptCache) *promptCache {
	pc := &promptCache{lifetime: c.Lifetime, limit: c.Entries, byHash: make(map[uint64]*list.Element)}
	if pc.lifetime == 0 {
		pc.lifetime = defaultCacheLifetime
	}
	if pc.limit == 0 {
		pc.limit = defaultCacheEntries
	}
	return pc
}

// alive reports whether e is still cached at now.
func (pc *promptCache) alive(e *cacheEntry, now time.Time) bool {
	return now.Sub(e.used) < pc.lifetime
}

// lookup returns how many of ps, the prefixes of one prompt, are cached at
// now: the length of the longest cached one, 0 for none. It changes nothing.
func (pc *promptCache) lookup(now time.Time, ps []prefix) int {
	for i := len(ps) - 1; i >= 0; i-- {
		if el := pc.byHash[ps[i].hash]; el != nil && pc.alive(el.Value.(*cacheEntry), now) {
			return i + 1
		}
	}
	return 0
}

// store caches every prefix of ps as used at now, dropping what has expired
// and, beyond the limit, the least recently used. The longest prefix is
// stored first, so that the shorter ones, which later prompts share more
// often, leave last.
func (pc *promptCache) store(now time.Time, ps []prefix) {
	for i := len(ps) - 1; i >= 0; i-- {
		h := ps[i].hash
		if el := pc.byHash[h]; el != nil {
			el.Value.(*cacheEntry).used = now
			pc.lru.MoveToFront(el)
			continue
		}
		pc.byHash[h] = pc.lru.PushFront(&cacheEntry{hash: h, used: now})
	}
	for pc.lru.Len() > 0 {
		el := pc.lru.Back()
		e := el.Value.(*cacheEntry)
		if pc.lru.Len() <= pc.limit && pc.alive(e, now) {
			break
		}
		pc.lru.Remove(el)
		delete(pc.byHash, e.hash)
	}
}
