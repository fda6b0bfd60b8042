package keypool

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNewRejectsBadConfiguration(t *testing.T) {
	tests := []struct {
		name string
		keys []Key
		opts []Option
		want string
	}{
		{"no keys", nil, nil, "keypool: openai: no keys"},
		{"empty secret", []Key{{Secret: "sk-secret-1"}, {ID: "x"}}, nil, "key 1 has an empty secret"},
		{"duplicate secret", []Key{{Secret: "sk-secret-same", ID: "one"}, {Secret: "sk-secret-same", ID: "two"}}, nil, "keys 0 and 1 have the same secret"},
		{"duplicate ID", []Key{{Secret: "sk-secret-1", ID: "k"}, {Secret: "sk-secret-2", ID: "k"}}, nil, `keys 0 and 1 have the same ID "k"`},
		{"negative key limit", []Key{{Secret: "sk-secret-1", ID: "k", Limits: Limits{RPM: -1}}}, nil, "key k: negative limit"},
		{"negative pool limit", []Key{{Secret: "sk-secret-1"}}, []Option{WithLimits(Limits{TPD: -5})}, "WithLimits: negative limit"},
		{"negative model limit", []Key{{Secret: "sk-secret-1"}}, []Option{WithModelLimits(map[string]Limits{"m": {RPD: -1}})}, `WithModelLimits: model "m": negative limit`},
		{"negative cap", []Key{{Secret: "sk-secret-1"}}, []Option{WithKeyCap(Limits{RPD: -1})}, "WithKeyCap: negative limit"},
		{"bad calendar hour", []Key{{Secret: "sk-secret-1"}}, []Option{WithCalendarDay(24, nil)}, "WithCalendarDay: hour 24"},
		{"empty header name", []Key{{Secret: "sk-secret-1"}}, []Option{HeaderAuth("")}, "HeaderAuth: needs a header name"},
		{"negative bench", []Key{{Secret: "sk-secret-1"}}, []Option{WithBenches(Benches{Rate: -time.Second})}, "WithBenches: negative bench"},
		{"bad quota level", []Key{{Secret: "sk-secret-1"}}, []Option{WithBenches(Benches{QuotaLevels: []time.Duration{time.Minute, 0}})}, "quota level 0s is not positive"},
		{"short max bench", []Key{{Secret: "sk-secret-1"}}, []Option{WithBenches(Benches{Max: time.Millisecond})}, "shorter than one second"},
		{"fallback option", []Key{{Secret: "sk-secret-1"}}, []Option{OnRoute(func(RouteEvent) {})}, "OnRoute does not configure a Pool"},
		{"secret with a line break", []Key{{Secret: "sk-secret-1\n", ID: "from-file"}}, nil, "key from-file: secret has white space around it"},
		{"secret with a space before", []Key{{Secret: " sk-secret-1"}}, nil, "secret has white space around it"},
		{"secret with a control character", []Key{{Secret: "sk-sec\x00ret-1", ID: "k"}}, nil, "key k: secret has a control character at byte 6"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New("openai", tt.keys, tt.opts...)
			require.Error(t, err)
			assert.Nil(t, p)
			assert.Contains(t, err.Error(), tt.want)
			assert.True(t, strings.HasPrefix(err.Error(), "keypool: "), "error %q lacks the package prefix", err)
			for _, k := range tt.keys {
				if k.Secret != "" {
					assert.NotContains(t, err.Error(), k.Secret, "the error shows a secret")
				}
			}
		})
	}
}

func TestNewIgnoresNilOptions(t *testing.T) {
	p, err := New("x", []Key{{Secret: "a"}}, nil, WithClock(nil), WithStore(nil), OnEvict(nil), OnRateLimit(nil))
	require.NoError(t, err)
	assert.NotNil(t, p.cfg.clock)
	assert.NotNil(t, p.store)
}

func TestKeyNeverPrintsSecret(t *testing.T) {
	const secret = "sk-live-0123456789abcdef"
	keys := []Key{{Secret: secret}, {Secret: secret, ID: "mine", Paid: true}}
	for _, k := range keys {
		for _, format := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x"} {
			got := fmt.Sprintf(format, k)
			assert.NotContains(t, got, secret, "Sprintf(%q, key)", format)
			assert.NotContains(t, fmt.Sprintf(format, &k), secret, "Sprintf(%q, &key)", format)
			assert.NotContains(t, fmt.Sprintf(format, []Key{k}), secret, "Sprintf(%q, []Key)", format)
		}
	}
	assert.Equal(t, "key mine (paid)", fmt.Sprint(keys[1]))
	assert.Contains(t, fmt.Sprintf("%v", keys[0]), defaultID(secret))
}

func TestDefaultIDIsShortStableHash(t *testing.T) {
	p, err := New("x", []Key{{Secret: "sk-a"}, {Secret: "sk-b"}})
	require.NoError(t, err)
	a, b := p.Stats()[0].ID, p.Stats()[1].ID
	assert.Len(t, a, 12)
	assert.NotEqual(t, a, b)
	assert.Equal(t, a, defaultID("sk-a"))
	assert.NotContains(t, a, "sk-a")
}

func TestDoFailsOverByProviderError(t *testing.T) {
	clock := newTestClock()
	var ev evictions
	p, err := New("x", threeKeys(), WithClock(clock.Now), OnEvict(ev.add))
	require.NoError(t, err)
	var used []string
	err = p.Do(t.Context(), "m", func(_ context.Context, k Key) error {
		used = append(used, k.ID)
		if k.ID == "a" {
			return fmt.Errorf("call: %w", &ProviderError{Kind: KindRate, Status: 429, RetryAfter: 7 * time.Second})
		}
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b"}, used)
	require.Len(t, ev.all(), 1)
	assert.Equal(t, 7*time.Second, ev.all()[0].For)
	assert.Equal(t, "m", ev.all()[0].Model)
}

func TestDoOtherErrorsBenchNothing(t *testing.T) {
	var ev evictions
	p, err := New("x", threeKeys(), OnEvict(ev.add))
	require.NoError(t, err)
	boom := errors.New("bad request")
	calls := 0
	err = p.Do(t.Context(), "m", func(context.Context, Key) error { calls++; return boom })
	assert.Same(t, boom, err)
	assert.Equal(t, 1, calls)
	assert.Empty(t, ev.all())
}

func TestDoAllKeysFail(t *testing.T) {
	clock := newTestClock()
	p, err := New("x", threeKeys(), WithClock(clock.Now))
	require.NoError(t, err)
	last := &ProviderError{Kind: KindRate, Status: 429, RetryAfter: time.Minute}
	calls := 0
	err = p.Do(t.Context(), "m", func(context.Context, Key) error { calls++; return last })
	assert.Equal(t, 3, calls, "each key at most once")
	var na *NoAvailableKeyError
	require.ErrorAs(t, err, &na)
	assert.Equal(t, clock.Now().Add(time.Minute), na.RetryAt)
	var pe *ProviderError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, KindRate, pe.Kind, "the wait reads as a throttle")
	assert.Equal(t, time.Minute, pe.RetryAfter)
	assert.ErrorIs(t, err, last, "the last failure is kept")
}

func TestDoQuotaLevels(t *testing.T) {
	clock := newTestClock()
	var ev evictions
	p, err := New("x", []Key{{Secret: "free", ID: "f"}, {Secret: "paid", ID: "p", Paid: true}},
		WithClock(clock.Now), OnEvict(ev.add))
	require.NoError(t, err)
	quota := &ProviderError{Kind: KindQuota, Status: 429}
	do := func(failFree bool) {
		_ = p.Do(t.Context(), "m", func(_ context.Context, k Key) error {
			if k.ID == "f" && failFree {
				return quota
			}
			return nil
		})
	}
	want := []time.Duration{2 * time.Minute, 10 * time.Minute, time.Hour, 12 * time.Hour, 12 * time.Hour}
	for i, d := range want {
		do(true)
		require.Len(t, ev.all(), i+1)
		e := ev.all()[i]
		if e.Latest.IsZero() {
			assert.Equal(t, d, e.For, "hit %d", i+1)
		} else {
			// A bench of the level, looked at early (EarlyLooks).
			assert.Equal(t, d, e.Latest.Sub(clock.Now()), "hit %d", i+1)
			assert.Equal(t, 5*time.Minute, e.For, "hit %d: the first early look", i+1)
		}
		clock.Advance(d)
	}
	// A success sets the level back to the first.
	do(false)
	do(true)
	assert.Equal(t, 2*time.Minute, ev.all()[len(want)].For)
	assert.Zero(t, ev.all()[len(want)].Latest, "a bench shorter than the first look is not looked at")
}

func TestDoWithholdsBenchedKeyByModel(t *testing.T) {
	p, err := New("x", threeKeys())
	require.NoError(t, err)
	require.NoError(t, p.Do(t.Context(), "m1", func(_ context.Context, k Key) error {
		if k.ID == "a" {
			return &ProviderError{Kind: KindQuota, Window: WindowDaily, ResetAt: time.Now().Add(time.Hour)}
		}
		return nil
	}))
	for range 3 {
		require.NoError(t, p.Do(t.Context(), "m1", func(_ context.Context, k Key) error {
			assert.NotEqual(t, "a", k.ID, "a is benched for m1")
			return nil
		}))
	}
	var gotA bool
	for range 3 {
		require.NoError(t, p.Do(t.Context(), "m2", func(_ context.Context, k Key) error {
			gotA = gotA || k.ID == "a"
			return nil
		}))
	}
	assert.True(t, gotA, "a serves another model")
}

func TestDoContextCancelled(t *testing.T) {
	p, err := New("x", threeKeys())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err = p.Do(ctx, "m", func(context.Context, Key) error { t.Fatal("called with a cancelled context"); return nil })
	assert.ErrorIs(t, err, context.Canceled)
}

func TestClosedPoolRefuses(t *testing.T) {
	p, err := New("x", threeKeys())
	require.NoError(t, err)
	require.NoError(t, p.Close())
	require.NoError(t, p.Close(), "a second Close is harmless")
	err = p.Do(t.Context(), "m", func(context.Context, Key) error { return nil })
	assert.ErrorContains(t, err, "pool is closed")
}

func TestStatsCountsAnswers(t *testing.T) {
	p, err := New("x", threeKeys())
	require.NoError(t, err)
	for range 3 {
		_ = p.Do(t.Context(), "m", func(_ context.Context, k Key) error {
			if k.ID == "a" {
				return &ProviderError{Kind: KindAuth, Status: 401}
			}
			return nil
		})
	}
	st := p.Stats()
	require.Len(t, st, 3)
	assert.Equal(t, "a", st[0].ID)
	assert.Equal(t, int64(1), st[0].Sent)
	assert.Equal(t, map[Kind]int64{KindAuth: 1}, st[0].Answers)
	assert.Equal(t, KindAuth, st[0].Bench.Kind)
	assert.Equal(t, int64(3), st[1].Sent+st[2].Sent)
}

func TestZeroPoolSaysUseNew(t *testing.T) {
	var p Pool
	req, err := http.NewRequest(http.MethodPost, "http://vendor.test/v1", strings.NewReader("{}"))
	require.NoError(t, err)
	body := &closeCounter{Reader: strings.NewReader("{}")}
	req.Body = body
	_, err = p.Transport(nil).RoundTrip(req)
	assert.ErrorIs(t, err, errNotNew)
	assert.Equal(t, 1, body.count(), "the body is closed")
	assert.ErrorIs(t, p.Do(t.Context(), "m", func(context.Context, Key) error { return nil }), errNotNew)
	assert.ErrorIs(t, p.Unbench(t.Context(), "k"), errNotNew)
	assert.Nil(t, p.Stats())
	assert.NoError(t, p.Close())
}

// A bad moment (KindTransient) benches the key it came from; a second of
// the same call benches nothing and ends it: a call every key fails says
// more of itself than of the keys, which stay for the other calls.
func TestDoSecondBadMomentBenchesNothing(t *testing.T) {
	clock := newTestClock()
	var ev evictions
	p, err := New("x", threeKeys(), WithClock(clock.Now), OnEvict(ev.add))
	require.NoError(t, err)
	bad := &ProviderError{Kind: KindTransient, Status: 500}
	calls := 0
	err = p.Do(t.Context(), "m", func(context.Context, Key) error { calls++; return bad })
	assert.Same(t, bad, err, "the vendor's answer goes back")
	assert.Equal(t, 2, calls, "one failover")
	require.Len(t, ev.all(), 1, "one key benched")
	assert.Len(t, served(t, p, 4), 2, "the other two serve the next calls")
}
