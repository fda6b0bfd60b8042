package keypool

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool/internal/vendorsim"
	"github.com/keypool-go/keypool/internal/windowspec"
)

// converse sends one chat request through client whose body holds extra
// fields (a JSON object's members, or ""), with header h set, and returns
// the secret of the key that served it.
func converse(t *testing.T, f *fixture, extra string, h ...string) string {
	t.Helper()
	if extra != "" {
		extra = "," + extra
	}
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]` + extra + `}`
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, f.url+"/v1/chat/completions", strings.NewReader(body))
	require.NoError(t, err)
	for i := 0; i+1 < len(h); i += 2 {
		req.Header.Set(h[i], h[i+1])
	}
	before := len(f.vendor.received())
	resp, err := f.client.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	got := f.vendor.received()
	require.Greater(t, len(got), before, "the request reached the vendor")
	return got[len(got)-1].key
}

// TestAffinityKeepsAConversationOnItsKey: every way a request names its
// conversation keeps its requests on one key, and requests of different
// conversations still go round the keys.
func TestAffinityKeepsAConversationOnItsKey(t *testing.T) {
	for _, tt := range []struct {
		name   string
		extra  func(i int) string
		header func(i int) []string
	}{
		{"prompt_cache_key", func(i int) string { return fmt.Sprintf(`"prompt_cache_key":"conv-%d"`, i) }, nil},
		{"user", func(i int) string { return fmt.Sprintf(`"user":"user-%d"`, i) }, nil},
		{"metadata.user_id", func(i int) string { return fmt.Sprintf(`"metadata":{"user_id":"u-%d"}`, i) }, nil},
		{"X-Session-Id", nil, func(i int) []string { return []string{"X-Session-Id", fmt.Sprint("s-", i)} }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			send := func(i int) string {
				var extra string
				var h []string
				if tt.extra != nil {
					extra = tt.extra(i)
				}
				if tt.header != nil {
					h = tt.header(i)
				}
				return converse(t, f, extra, h...)
			}
			first := send(1)
			for range 8 {
				assert.Equal(t, first, send(1), "one conversation, one key")
			}
			seen := map[string]bool{}
			for i := range 6 {
				seen[send(100+i)] = true
			}
			assert.Len(t, seen, 3, "different conversations go round the keys")
			var held int
			for _, ks := range f.pool.Stats() {
				held += ks.Conversations
			}
			assert.Equal(t, 7, held, "Stats counts the conversations held")
		})
	}
}

// TestAffinityReadsTheStrongestName: prompt_cache_key outranks
// metadata.user_id, which outranks user, wherever each stands in the body;
// a user_id outside the top-level metadata, a nested user and a string the
// body cuts name nothing.
func TestAffinityReadsTheStrongestName(t *testing.T) {
	name := func(b string) conversation {
		_, c, _ := readRequest([]byte(b), nil)
		return c
	}
	assert.Equal(t, conversationOf("k"), name(`{"prompt_cache_key":"k","user":"u","metadata":{"user_id":"m"}}`))
	assert.Equal(t, conversationOf("k"), name(`{"user":"u","metadata":{"user_id":"m"},"prompt_cache_key":"k"}`))
	assert.Equal(t, conversationOf("m"), name(`{"user":"u","metadata":{"user_id":"m"}}`))
	assert.Equal(t, conversationOf("m"), name(`{"metadata":{"user_id":"m"},"user":"u"}`))
	assert.Equal(t, conversationOf("u"), name(`{"model":"x","user":"u"}`))
	assert.Zero(t, name(`{"model":"x","messages":[{"user":"u","user_id":"v"}],"other":{"user_id":"w"}}`))
	assert.Zero(t, name(`{"model":"x","user":"cut`))
	assert.Zero(t, name(`{"user":""}`), "an empty name is none")
	assert.Equal(t, conversationOf("u"), name(`{"prompt_cache_key":"","user":"u"}`), "and hides no weaker one")
	assert.Equal(t, conversationOf("second"), name(`{"user":"first","user":"second"}`), "the last of equal strength, as JSON reads a repeated key")
	assert.Zero(t, name(`{"user":7}`), "a name is a string")
	info := scanRequest([]byte(`{"model":"x","user":"u"}`), nil)
	assert.Equal(t, "x", info.Model)
}

// TestAffinityMovesWithItsKey: a conversation whose key is benched, or
// full, goes to the next key, and stays on that one from then on.
func TestAffinityMovesWithItsKey(t *testing.T) {
	t.Run("benched", func(t *testing.T) {
		f := newFixture(t)
		conv := `"prompt_cache_key":"c"`
		first := converse(t, f, conv)
		f.vendor.on(first, rateLimited("30"))
		moved := converse(t, f, conv)
		assert.NotEqual(t, first, moved)
		for range 4 {
			assert.Equal(t, moved, converse(t, f, conv), "stays on the key it moved to")
		}
		f.clock.Advance(time.Minute) // the bench has ended
		assert.Equal(t, moved, converse(t, f, conv), "and does not go back")
	})
	t.Run("full", func(t *testing.T) {
		f := newFixture(t, WithLimits(Limits{RPM: 2}))
		conv := `"prompt_cache_key":"c"`
		first := converse(t, f, conv)
		assert.Equal(t, first, converse(t, f, conv))
		moved := converse(t, f, conv)
		assert.NotEqual(t, first, moved, "its key's minute is full")
		assert.Equal(t, moved, converse(t, f, conv))
	})
}

// TestAffinityForgetsIdleConversations: a conversation idle for longer than
// its idle time, or pushed out by newer ones past the memory's size, goes
// where the round-robin sends it.
func TestAffinityForgetsIdleConversations(t *testing.T) {
	t.Run("idle", func(t *testing.T) {
		f := newFixture(t, WithAffinityMemory(100, 10*time.Minute))
		conv := `"prompt_cache_key":"c"`
		first := converse(t, f, conv) // the cursor now points past first
		f.clock.Advance(9 * time.Minute)
		assert.Equal(t, first, converse(t, f, conv), "within its idle time")
		f.clock.Advance(10 * time.Minute)
		assert.NotEqual(t, first, converse(t, f, conv), "idle too long: the next key in turn")
	})
	t.Run("size", func(t *testing.T) {
		f := newFixture(t, WithAffinityMemory(2, time.Hour))
		first := converse(t, f, `"prompt_cache_key":"c0"`)
		converse(t, f, `"prompt_cache_key":"c1"`)
		converse(t, f, `"prompt_cache_key":"c2"`) // c0 is the least recently served
		// The cursor is back at first's key: one more unnamed request
		// moves it on, so that a forgotten c0 goes elsewhere.
		converse(t, f, "")
		assert.NotEqual(t, first, converse(t, f, `"prompt_cache_key":"c0"`))
	})
}

// TestAffinityStaysInItsTier: a conversation that moved to a paid key while
// the free key was full comes back to the free key when it has room.
func TestAffinityStaysInItsTier(t *testing.T) {
	clock := newTestClock()
	v, srv := newVendor(t)
	pool, err := New("x", []Key{{Secret: "free", Limits: Limits{RPM: 1}}, {Secret: "paid", Paid: true}}, WithClock(clock.Now))
	require.NoError(t, err)
	f := &fixture{clock: clock, vendor: v, url: srv.URL, pool: pool, client: &http.Client{Transport: pool.Transport(nil)}}
	conv := `"prompt_cache_key":"c"`
	assert.Equal(t, "free", converse(t, f, conv))
	assert.Equal(t, "paid", converse(t, f, conv), "the free key's minute is full")
	assert.Equal(t, "paid", converse(t, f, conv))
	clock.Advance(time.Minute + windowspec.ExactGuard)
	assert.Equal(t, "free", converse(t, f, conv), "free before paid, whatever the conversation")
}

// TestAffinityOptions: WithAffinity's function names the conversation
// where it says something; WithAffinityMemory(0, …) turns affinity off;
// bad values are refused by name.
func TestAffinityOptions(t *testing.T) {
	t.Run("function", func(t *testing.T) {
		f := newFixture(t, WithAffinity(func(r *http.Request) string { return r.Header.Get("X-Team") }))
		first := converse(t, f, `"prompt_cache_key":"a"`, "X-Team", "t1")
		assert.Equal(t, first, converse(t, f, `"prompt_cache_key":"b"`, "X-Team", "t1"), "the function's name outranks the body's")
		other := converse(t, f, `"prompt_cache_key":"z"`)
		assert.NotEqual(t, first, other, "where it says nothing, the body names it")
		assert.Equal(t, other, converse(t, f, `"prompt_cache_key":"z"`))
	})
	t.Run("off", func(t *testing.T) {
		f := newFixture(t, WithAffinityMemory(0, 0))
		seen := map[string]bool{}
		for range 3 {
			seen[converse(t, f, `"prompt_cache_key":"c"`)] = true
		}
		assert.Len(t, seen, 3, "round-robin, the conversation ignored")
		for _, ks := range f.pool.Stats() {
			assert.Zero(t, ks.Conversations)
		}
	})
	for _, o := range []struct {
		opt  Option
		want string
	}{
		{WithAffinityMemory(-1, time.Hour), "WithAffinityMemory: -1 conversations is negative"},
		{WithAffinityMemory(10, 0), "WithAffinityMemory: an idle time of 0s is not positive"},
	} {
		_, err := New("x", threeKeys(), o.opt)
		assert.ErrorContains(t, err, o.want)
	}
}

// sharedAffinity is a store that shares conversations as redisstore's
// does, over the memory store, counting its calls.
type sharedAffinity struct {
	Store
	mu    sync.Mutex
	keys  map[string]string
	calls int
	err   error
}

func (s *sharedAffinity) Affinity(_ context.Context, provider, conv string, _ time.Duration) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	return s.keys[provider+"/"+conv], s.err
}

func (s *sharedAffinity) held() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.keys)
}

func (s *sharedAffinity) SetAffinity(_ context.Context, provider, conv, keyID string, _ time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.err == nil {
		s.keys[provider+"/"+conv] = keyID
	}
	return s.err
}

// TestAffinitySharedAmongReplicas: two pools over one store that shares
// conversations keep a conversation on one key, whichever serves it, once
// it has come back; each asks the store at most once per conversation in
// affinityRecheck; a store that fails leaves each pool to what it
// remembers.
func TestAffinitySharedAmongReplicas(t *testing.T) {
	clock := newTestClock()
	v, srv := newVendor(t)
	store := &sharedAffinity{Store: NewMemoryStore(), keys: map[string]string{}}
	var failures []error
	replica := func() *fixture {
		pool, err := New("x", threeKeys(), WithClock(clock.Now), WithStore(store), OnStoreError(func(err error) { failures = append(failures, err) }))
		require.NoError(t, err)
		return &fixture{clock: clock, vendor: v, url: srv.URL, pool: pool, client: &http.Client{Transport: pool.Transport(nil)}}
	}
	a, b := replica(), replica()
	converse(t, b, "") // b's cursor moves on: alone, b would choose another key
	conv := `"prompt_cache_key":"c"`
	first := converse(t, a, conv)
	assert.Zero(t, store.held(), "a conversation of one request costs the store no write")
	assert.Equal(t, first, converse(t, a, conv))
	assert.Equal(t, 1, store.held(), "its second request here: a says where it stays")
	assert.Equal(t, first, converse(t, b, conv), "b follows what a said")
	calls := store.calls
	for range 5 {
		assert.Equal(t, first, converse(t, a, conv))
		assert.Equal(t, first, converse(t, b, conv))
	}
	assert.Equal(t, calls, store.calls, "within affinityRecheck, each pool trusts what it remembers")
	clock.Advance(affinityRecheck)
	converse(t, a, conv)
	assert.Equal(t, calls+1, store.calls, "then asks the store again, once")

	store.mu.Lock()
	store.err = fmt.Errorf("store down")
	store.mu.Unlock()
	clock.Advance(affinityRecheck)
	assert.Equal(t, first, converse(t, a, conv), "a failing store leaves the pool to what it remembers")
	require.NotEmpty(t, failures, "and OnStoreError hears of it")
}

// cacheRun holds conversations turn by turn on a fake vendor that caches
// prompt prefixes per key, through a pool of four keys, the conversations'
// turns in a shuffled order each round, and returns the share of prompt
// tokens the vendor read from its cache.
func cacheRun(t testing.TB, opts ...Option) float64 {
	t.Helper()
	const keys, conversations, turns = 4, 15, 10
	clock := newTestClock()
	cfg := vendorsim.Config{Dialect: vendorsim.OpenAI, Clock: clock.Now, OutputTokens: 50, PromptCache: &vendorsim.PromptCache{}}
	var poolKeys []Key
	for i := range keys {
		secret := fmt.Sprintf("sk-cache-%d", i)
		cfg.Keys = append(cfg.Keys, vendorsim.Key{Secret: secret, ID: secret})
		poolKeys = append(poolKeys, Key{Secret: secret, ID: secret})
	}
	sim := vendorsim.Start(cfg)
	defer sim.Close()
	pool, err := New("openai", poolKeys, append([]Option{WithClock(clock.Now)}, opts...)...)
	require.NoError(t, err)
	defer pool.Close()
	client := &http.Client{Transport: pool.Transport(nil)}
	history := make([][]string, conversations)
	rng := rand.New(rand.NewPCG(1, 2))
	for turn := range turns {
		for _, c := range rng.Perm(conversations) {
			history[c] = append(history[c], fmt.Sprintf(`{"role":"user","content":"turn %d of conversation %d: %s"}`, turn, c, strings.Repeat("words ", 60)))
			body := fmt.Sprintf(`{"model":"gpt-4o","prompt_cache_key":"conversation-%d","messages":[%s]}`, c, strings.Join(history[c], ","))
			resp, err := client.Post(sim.URL()+"/v1/chat/completions", "application/json", strings.NewReader(body))
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, resp.Body)
			require.NoError(t, resp.Body.Close())
			require.Equal(t, http.StatusOK, resp.StatusCode)
			history[c] = append(history[c], `{"role":"assistant","content":"`+strings.Repeat("reply ", 30)+`"}`)
			clock.Advance(time.Second)
		}
	}
	tot := sim.Totals()
	return float64(tot.CachedTokens) / float64(tot.InputTokens)
}

// TestAffinityKeepsThePromptCache: conversations kept on their keys find
// their prefixes in the vendor's cache; sent round the keys, they mostly
// do not.
func TestAffinityKeepsThePromptCache(t *testing.T) {
	with, without := cacheRun(t), cacheRun(t, WithAffinityMemory(0, 0))
	t.Logf("prompt tokens read from the vendor's cache: %.0f%% with affinity, %.0f%% round-robin", 100*with, 100*without)
	assert.Greater(t, with, 0.75)
	assert.Less(t, without, with*0.75)
}

// BenchmarkAffinity reports the share of prompt tokens the vendor read from
// its cache (cached-%) for conversations kept on their keys, and for the
// same conversations sent round the keys.
func BenchmarkAffinity(b *testing.B) {
	for _, bb := range []struct {
		name string
		opts []Option
	}{{"affinity", nil}, {"round-robin", []Option{WithAffinityMemory(0, 0)}}} {
		b.Run(bb.name, func(b *testing.B) {
			var rate float64
			for b.Loop() {
				rate = cacheRun(b, bb.opts...)
			}
			b.ReportMetric(100*rate, "cached-%")
		})
	}
}
