package vendorsim_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool/internal/vendorsim"
)

// cacheDialect is how a prompt-cache test speaks one dialect.
type cacheDialect struct {
	dialect vendorsim.Dialect
	// system is the system prompt the dialect's requests carry, or nil:
	// it is the prompt's first message.
	system json.RawMessage
	// message returns one message of a conversation.
	message func(role, text string) json.RawMessage
	// post sends a prompt of the given messages (the system prompt before
	// them) for a model, and returns the answer's usage object.
	post func(t *testing.T, s *vendorsim.Server, key, model string, msgs []json.RawMessage, stream bool) map[string]any
	// cached reads the cached prompt tokens from a usage object, and
	// whether the usage reports any cache figure at all.
	cached func(t *testing.T, usage map[string]any) (int64, bool)
	// input reads the prompt tokens a usage object reports, cached ones
	// included.
	input func(t *testing.T, usage map[string]any) int64
	// windowsCountReads says whether the token windows count cache reads.
	windowsCountReads bool
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

// lastUsage returns the usage object of the last event of an SSE stream that
// has a non-null one under key, looking inside a holder object when holder
// is set.
func lastUsage(t *testing.T, stream []byte, holder, key string) map[string]any {
	t.Helper()
	var out map[string]any
	for _, ev := range parseSSE(t, stream) {
		if ev.data == "[DONE]" {
			continue
		}
		v := jsonOf(t, ev.data)
		if holder != "" {
			h, _ := v[holder].(map[string]any)
			v = h
		}
		if u, ok := v[key].(map[string]any); ok {
			out = u
			if holder != "" {
				return out // Anthropic's message_start states the input
			}
		}
	}
	require.NotNil(t, out, "no %s in the stream %s", key, stream)
	return out
}

func cacheDialects(t *testing.T) []cacheDialect {
	long := strings.Repeat("a rather long instruction ", 20)
	return []cacheDialect{
		{
			dialect: vendorsim.OpenAI,
			message: func(role, text string) json.RawMessage {
				return mustJSON(t, map[string]string{"role": role, "content": text})
			},
			post: func(t *testing.T, s *vendorsim.Server, key, model string, msgs []json.RawMessage, stream bool) map[string]any {
				body := map[string]any{"model": model, "messages": msgs}
				if stream {
					body["stream"] = true
					body["stream_options"] = map[string]any{"include_usage": true}
				}
				a := send(t, http.MethodPost, s.URL()+"/v1/chat/completions", string(mustJSON(t, body)), bearer(key))
				require.Equal(t, http.StatusOK, a.status, "body %s", a.body)
				if stream {
					return lastUsage(t, a.body, "", "usage")
				}
				return dig(t, a.decode(t), "usage").(map[string]any)
			},
			cached: func(t *testing.T, u map[string]any) (int64, bool) {
				if _, ok := u["prompt_tokens_details"]; !ok {
					return 0, false
				}
				return int64(num(t, u, "prompt_tokens_details", "cached_tokens")), true
			},
			input:             func(t *testing.T, u map[string]any) int64 { return int64(num(t, u, "prompt_tokens")) },
			windowsCountReads: true,
		},
		{
			dialect: vendorsim.Anthropic,
			system:  mustJSON(t, long),
			message: func(role, text string) json.RawMessage {
				return mustJSON(t, map[string]string{"role": role, "content": text})
			},
			post: func(t *testing.T, s *vendorsim.Server, key, model string, msgs []json.RawMessage, stream bool) map[string]any {
				body := map[string]any{"model": model, "max_tokens": 50, "system": long, "messages": msgs, "stream": stream}
				a := send(t, http.MethodPost, s.URL()+"/v1/messages", string(mustJSON(t, body)), xAPIKey(key))
				require.Equal(t, http.StatusOK, a.status, "body %s", a.body)
				if stream {
					return lastUsage(t, a.body, "message", "usage")
				}
				return dig(t, a.decode(t), "usage").(map[string]any)
			},
			cached: func(t *testing.T, u map[string]any) (int64, bool) {
				_, read := u["cache_read_input_tokens"]
				_, created := u["cache_creation_input_tokens"]
				if !read && !created {
					return 0, false
				}
				return int64(num(t, u, "cache_read_input_tokens")), true
			},
			input: func(t *testing.T, u map[string]any) int64 {
				n := int64(num(t, u, "input_tokens"))
				if _, ok := u["cache_read_input_tokens"]; ok {
					n += int64(num(t, u, "cache_read_input_tokens")) + int64(num(t, u, "cache_creation_input_tokens"))
				}
				return n
			},
		},
		{
			dialect: vendorsim.Gemini,
			message: func(role, text string) json.RawMessage {
				if role == "assistant" {
					role = "model"
				}
				return mustJSON(t, map[string]any{"role": role, "parts": []any{map[string]string{"text": text}}})
			},
			post: func(t *testing.T, s *vendorsim.Server, key, model string, msgs []json.RawMessage, stream bool) map[string]any {
				url := s.URL() + "/v1beta/models/" + model + ":generateContent"
				if stream {
					url = s.URL() + "/v1beta/models/" + model + ":streamGenerateContent?alt=sse"
				}
				a := send(t, http.MethodPost, url, string(mustJSON(t, map[string]any{"contents": msgs})), googKey(key))
				require.Equal(t, http.StatusOK, a.status, "body %s", a.body)
				if stream {
					return lastUsage(t, a.body, "", "usageMetadata")
				}
				return dig(t, a.decode(t), "usageMetadata").(map[string]any)
			},
			cached: func(t *testing.T, u map[string]any) (int64, bool) {
				if _, ok := u["cachedContentTokenCount"]; !ok {
					return 0, false // Gemini leaves a zero count out
				}
				return int64(num(t, u, "cachedContentTokenCount")), true
			},
			input:             func(t *testing.T, u map[string]any) int64 { return int64(num(t, u, "promptTokenCount")) },
			windowsCountReads: true,
		},
	}
}

// conversation is a two-turn conversation in one dialect.
type conversation struct {
	turn1, turn2 []json.RawMessage
	// estimate is the sim's token estimate of turn 1's prompt: its
	// messages' length, the system prompt's included, / 4.
	estimate int64
}

func converse(d cacheDialect, topic string) conversation {
	u1 := d.message("user", "Tell me about "+topic+", at length, with examples and history.")
	a1 := d.message("assistant", "Here is a long answer about "+topic+".")
	u2 := d.message("user", "And what came next?")
	size := len(u1)
	if d.system != nil {
		size += len(d.system)
	}
	return conversation{turn1: []json.RawMessage{u1}, turn2: []json.RawMessage{u1, a1, u2}, estimate: int64(size / 4)}
}

func modelOf(d vendorsim.Dialect) string {
	switch d {
	case vendorsim.Anthropic:
		return "claude-sonnet-4-5"
	case vendorsim.Gemini:
		return "gemini-2.0-flash"
	}
	return "gpt-4o-mini"
}

func TestPromptCache(t *testing.T) {
	const lifetime = 7 * time.Minute
	for _, d := range cacheDialects(t) {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", d.dialect, stream), func(t *testing.T) {
				model := modelOf(d.dialect)
				newSim := func(t *testing.T, cache *vendorsim.PromptCache) (*vendorsim.Server, *clock) {
					c := newClock()
					return start(t, vendorsim.Config{
						Dialect: d.dialect, Clock: c.Now, OutputTokens: 10, PromptCache: cache,
						Keys: []vendorsim.Key{{Secret: "k1"}, {Secret: "k2"}},
					}), c
				}
				cached := func(t *testing.T, u map[string]any) int64 {
					t.Helper()
					n, ok := d.cached(t, u)
					if d.dialect != vendorsim.Gemini {
						assert.True(t, ok, "with the cache on, every answer states its cached tokens: %v", u)
					}
					return n
				}
				conv := converse(d, "the printing press")

				t.Run("turn 2 on the same key reads turn 1", func(t *testing.T) {
					s, _ := newSim(t, &vendorsim.PromptCache{Lifetime: lifetime})
					u1 := d.post(t, s, "k1", model, conv.turn1, stream)
					assert.Equal(t, int64(0), cached(t, u1), "turn 1 finds nothing cached")
					u2 := d.post(t, s, "k1", model, conv.turn2, stream)
					got := cached(t, u2)
					assert.Positive(t, got)
					assert.Equal(t, conv.estimate, got, "turn 2 reads turn 1's prompt")
					in1, in2 := d.input(t, u1), d.input(t, u2)
					assert.Less(t, got, in2, "cached tokens are part of the prompt")

					st, ok := s.StatsOf("k1")
					require.True(t, ok)
					assert.Equal(t, got, st.CachedTokens)
					assert.Equal(t, in1+in2, st.InputTokens)
					reads := got
					if d.windowsCountReads {
						reads = 0
					}
					assert.Equal(t, in1+in2-reads+20, st.Tokens, "the token windows count cache reads as the vendor does")
					assert.Equal(t, st.Tokens, s.MaxTokensInWindow("k1", time.Hour))
					assert.Equal(t, got, s.Totals().CachedTokens)
					assert.Equal(t, in1+in2, s.Totals().InputTokens)
				})

				t.Run("another key has its own cache", func(t *testing.T) {
					s, _ := newSim(t, &vendorsim.PromptCache{Lifetime: lifetime})
					d.post(t, s, "k1", model, conv.turn1, stream)
					assert.Equal(t, int64(0), cached(t, d.post(t, s, "k2", model, conv.turn2, stream)))
					st, _ := s.StatsOf("k2")
					assert.Equal(t, int64(0), st.CachedTokens)
					assert.Positive(t, st.InputTokens)
				})

				t.Run("an entry lives its lifetime after its last use", func(t *testing.T) {
					s, c := newSim(t, &vendorsim.PromptCache{Lifetime: lifetime})
					d.post(t, s, "k1", model, conv.turn1, stream)
					c.Advance(lifetime - time.Millisecond)
					assert.Equal(t, conv.estimate, cached(t, d.post(t, s, "k1", model, conv.turn1, stream)), "alive just before the lifetime")
					c.Advance(lifetime - time.Millisecond)
					assert.Equal(t, conv.estimate, cached(t, d.post(t, s, "k1", model, conv.turn1, stream)), "a read renews the entry")
					c.Advance(lifetime)
					assert.Equal(t, int64(0), cached(t, d.post(t, s, "k1", model, conv.turn2, stream)), "expired at the lifetime")
				})

				t.Run("the default lifetime is 5 minutes", func(t *testing.T) {
					s, c := newSim(t, &vendorsim.PromptCache{})
					d.post(t, s, "k1", model, conv.turn1, stream)
					c.Advance(5*time.Minute - time.Millisecond)
					assert.Equal(t, conv.estimate, cached(t, d.post(t, s, "k1", model, conv.turn1, stream)))
					c.Advance(5 * time.Minute)
					assert.Equal(t, int64(0), cached(t, d.post(t, s, "k1", model, conv.turn2, stream)))
				})

				t.Run("off by default", func(t *testing.T) {
					s, _ := newSim(t, nil)
					d.post(t, s, "k1", model, conv.turn1, stream)
					u := d.post(t, s, "k1", model, conv.turn2, stream)
					_, ok := d.cached(t, u)
					assert.False(t, ok, "no cache figure in %v", u)
					st, _ := s.StatsOf("k1")
					assert.Equal(t, int64(0), st.CachedTokens)
					assert.Positive(t, st.InputTokens)
				})
			})
		}
	}
}

func TestPromptCacheAnthropicSplit(t *testing.T) {
	d := cacheDialects(t)[1]
	require.Equal(t, vendorsim.Anthropic, d.dialect)
	s := start(t, vendorsim.Config{Dialect: vendorsim.Anthropic, PromptCache: &vendorsim.PromptCache{}, Keys: []vendorsim.Key{{Secret: "k"}}})
	conv := converse(d, "tides")
	u1 := d.post(t, s, "k", "claude-sonnet-4-5", conv.turn1, false)
	assert.Equal(t, float64(conv.estimate), num(t, u1, "cache_creation_input_tokens"), "turn 1 writes its messages")
	u2 := d.post(t, s, "k", "claude-sonnet-4-5", conv.turn2, false)
	assert.Equal(t, float64(conv.estimate), num(t, u2, "cache_read_input_tokens"))
	assert.Positive(t, num(t, u2, "cache_creation_input_tokens"), "turn 2 writes its new messages")
	assert.Less(t, num(t, u2, "input_tokens"), num(t, u2, "cache_creation_input_tokens"), "input_tokens leaves reads and writes out")
	u3 := d.post(t, s, "k", "claude-sonnet-4-5", conv.turn2, false)
	assert.Equal(t, float64(0), num(t, u3, "cache_creation_input_tokens"), "a repeated prompt writes nothing")
	assert.Equal(t, float64(d.input(t, u2)), num(t, u3, "cache_read_input_tokens")+num(t, u3, "input_tokens"))
}

func TestPromptCachePrefixes(t *testing.T) {
	d := cacheDialects(t)[0]
	msg := func(text string) json.RawMessage { return d.message("user", text) }
	newSim := func(t *testing.T, cache *vendorsim.PromptCache) *vendorsim.Server {
		return start(t, vendorsim.Config{
			PromptCache: cache,
			Accounts:    map[string]vendorsim.Limits{"org": {}},
			Keys:        []vendorsim.Key{{Secret: "k1"}, {Secret: "a1", Account: "org"}, {Secret: "a2", Account: "org"}},
		})
	}
	cached := func(t *testing.T, s *vendorsim.Server, key, model string, msgs ...json.RawMessage) int64 {
		t.Helper()
		n, ok := d.cached(t, d.post(t, s, key, model, msgs, false))
		require.True(t, ok)
		return n
	}
	x, y, z := msg("first message of the conversation"), msg("second message"), msg("third message")
	est := func(ms ...json.RawMessage) int64 {
		n := 0
		for _, m := range ms {
			n += len(m)
		}
		return int64(n / 4)
	}

	t.Run("the longest cached prefix of whole messages", func(t *testing.T) {
		s := newSim(t, &vendorsim.PromptCache{})
		cached(t, s, "k1", "m", x, y, z)
		assert.Equal(t, est(x, y), cached(t, s, "k1", "m", x, y, msg("another third")))
		assert.Equal(t, est(x), cached(t, s, "k1", "m", x, z))
		assert.Equal(t, int64(0), cached(t, s, "k1", "m", y, x), "order matters")
		assert.Equal(t, est(x, y, z), cached(t, s, "k1", "m", x, y, z), "a repeated prompt reads all of it")
		assert.Equal(t, int64(0), cached(t, s, "k1", "other-model", x, y, z), "each model has its own prefixes")
	})

	t.Run("the keys of an account share its cache", func(t *testing.T) {
		s := newSim(t, &vendorsim.PromptCache{})
		cached(t, s, "a1", "m", x)
		assert.Equal(t, est(x), cached(t, s, "a2", "m", x, y))
		assert.Equal(t, int64(0), cached(t, s, "k1", "m", x, y))
		acc, _ := s.AccountStatsOf("org")
		assert.Equal(t, est(x), acc.CachedTokens)
	})

	t.Run("entries are bounded, least recently used out first", func(t *testing.T) {
		s := newSim(t, &vendorsim.PromptCache{Entries: 2})
		cached(t, s, "k1", "m", x)
		cached(t, s, "k1", "m", y)
		assert.Equal(t, est(x), cached(t, s, "k1", "m", x), "two entries fit")
		cached(t, s, "k1", "m", z) // y is the least recently used
		assert.Equal(t, int64(0), cached(t, s, "k1", "m", y))
		assert.Equal(t, int64(0), cached(t, s, "k1", "m", x), "storing y dropped x")
	})

	t.Run("entries default to 4096", func(t *testing.T) {
		s := newSim(t, &vendorsim.PromptCache{})
		first := msg("message 0")
		cached(t, s, "k1", "m", first)
		for i := 1; i < 4096; i++ {
			cached(t, s, "k1", "m", msg(fmt.Sprintf("message %d", i)))
		}
		assert.Equal(t, est(first), cached(t, s, "k1", "m", first), "4096 entries fit")
		for i := 1; i <= 4096; i++ {
			cached(t, s, "k1", "m", msg(fmt.Sprintf("other %d", i)))
		}
		assert.Equal(t, int64(0), cached(t, s, "k1", "m", first), "the 4097th dropped the oldest")
	})

	t.Run("a prompt that is not an array of messages is answered uncached", func(t *testing.T) {
		s := newSim(t, &vendorsim.PromptCache{})
		for range 2 {
			a := chat(t, s, "k1", `{"model":"m","messages":"not an array"}`)
			require.Equal(t, http.StatusOK, a.status, "body %s", a.body)
			assert.Equal(t, float64(0), num(t, a.decode(t), "usage", "prompt_tokens_details", "cached_tokens"))
		}
	})

	t.Run("refused requests neither read nor write", func(t *testing.T) {
		s := start(t, vendorsim.Config{PromptCache: &vendorsim.PromptCache{}, Keys: []vendorsim.Key{{Secret: "k", Limits: vendorsim.Limits{RPM: 1}}}})
		cached(t, s, "k", "m", y)
		a := chat(t, s, "k", string(mustJSON(t, map[string]any{"model": "m", "messages": []json.RawMessage{x}})))
		require.Equal(t, http.StatusTooManyRequests, a.status)
		st, _ := s.StatsOf("k")
		assert.Equal(t, int64(0), st.CachedTokens)
		require.NoError(t, s.SetLimits("k", vendorsim.Limits{}))
		assert.Equal(t, int64(0), cached(t, s, "k", "m", x, y), "the refused prompt was not cached")
	})

	t.Run("a negative setting is an error", func(t *testing.T) {
		for _, c := range []vendorsim.PromptCache{{Lifetime: -1}, {Entries: -1}} {
			_, err := vendorsim.New(vendorsim.Config{PromptCache: &c, Keys: []vendorsim.Key{{Secret: "k"}}})
			assert.Error(t, err, "%+v", c)
		}
	})
}
