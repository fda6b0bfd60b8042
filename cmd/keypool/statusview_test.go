package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool"
)

func TestSpan(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "0 s"},
		{42 * time.Second, "42 s"},
		{200 * time.Second, "3 min 20 s"},
		{42*time.Minute + 10*time.Second, "42 min"},
		{4*time.Hour + 12*time.Minute + 30*time.Second, "4 h 12 min"},
		{51 * time.Hour, "2 d 3 h"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, span(tt.d), "span(%v)", tt.d)
	}
}

func TestBackIn(t *testing.T) {
	now := time.Date(2026, 11, 30, 14, 35, 0, 0, time.Local)
	assert.Equal(t, "back in 4 h 12 min, 18:47", backIn(now.Add(4*time.Hour+12*time.Minute), now))
	assert.Equal(t, "back in 12 h 0 min, Tue 02:35", backIn(now.Add(12*time.Hour), now), "tomorrow names the day")
}

func TestViewKey(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	limits := keypool.Limits{RPM: 20, RPD: 100}
	model := func(minute, day int64, bench keypool.Bench) keypool.ModelStats {
		return keypool.ModelStats{Model: "m", Limits: limits, Bench: bench, Usage: keypool.Usage{MinuteRequests: minute, DayRequests: day}}
	}
	bench := func(kind keypool.Kind, d time.Duration) keypool.Bench {
		return keypool.Bench{Kind: kind, Until: now.Add(d)}
	}
	tests := []struct {
		name  string
		stats keypool.KeyStats
		words string
	}{
		{"serving", keypool.KeyStats{Models: []keypool.ModelStats{model(3, 10, keypool.Bench{})}}, "serving"},
		{"a bench that ended", keypool.KeyStats{Bench: bench(keypool.KindAuth, -time.Second)}, "serving"},
		{"benched whole", keypool.KeyStats{Bench: bench(keypool.KindAuth, 2*time.Hour)}, "benched (auth), back in 2 h 0 min"},
		{"benched for a model", keypool.KeyStats{Models: []keypool.ModelStats{model(3, 10, bench(keypool.KindRate, 42*time.Second))}}, "benched (rate) for m, back in 42 s"},
		{"the whole key's bench first", keypool.KeyStats{Bench: bench(keypool.KindAuth, time.Hour), Models: []keypool.ModelStats{model(3, 10, bench(keypool.KindQuota, 5*time.Hour))}}, "benched (auth), back in 1 h 0 min"},
		{"full this minute", keypool.KeyStats{Models: []keypool.ModelStats{model(20, 30, keypool.Bench{})}}, "full this minute"},
		{"full today", keypool.KeyStats{Models: []keypool.ModelStats{model(20, 100, keypool.Bench{})}}, "full today"},
		{"full at the vendor", keypool.KeyStats{LastAt: now, Last: keypool.Reading{Utilization: 1, ResetAt: now.Add(30 * time.Second)}}, "full at the vendor, back in 30 s"},
		{"at its daily cap", keypool.KeyStats{Models: []keypool.ModelStats{model(1, 5, keypool.Bench{})},
			Cap: keypool.Usage{MinuteRequests: 1, DayRequests: 5}, CapLimits: keypool.Limits{RPD: 5}}, "full today"},
		{"at its minute cap", keypool.KeyStats{Models: []keypool.ModelStats{model(2, 5, keypool.Bench{})},
			Cap: keypool.Usage{MinuteRequests: 2, DayRequests: 5}, CapLimits: keypool.Limits{RPM: 2, RPD: 50}}, "full this minute"},
		{"under its cap", keypool.KeyStats{Models: []keypool.ModelStats{model(2, 5, keypool.Bench{})},
			Cap: keypool.Usage{MinuteRequests: 2, DayRequests: 5}, CapLimits: keypool.Limits{RPM: 3, RPD: 50}}, "serving"},
		{"the vendor's window reset", keypool.KeyStats{LastAt: now, Last: keypool.Reading{Utilization: 1, ResetAt: now.Add(-time.Second)}}, "serving"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := viewKey(tt.stats, now)
			assert.Contains(t, stateWords(k, now), tt.words)
			b, err := json.Marshal(k)
			require.NoError(t, err)
			assert.NotContains(t, string(b), "0001-01-01", "no zero time in %s", b)
		})
	}
}

// A key at its cap across models (key_cap) is full, with its cap's use
// beside its limit; a key without a cap has none in its JSON.
func TestViewKeyCap(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	k := viewKey(keypool.KeyStats{Models: []keypool.ModelStats{{Model: "m", Usage: keypool.Usage{DayRequests: 5}}},
		Cap: keypool.Usage{DayRequests: 5, DayTokens: 900}, CapLimits: keypool.Limits{RPD: 5}}, now)
	assert.Equal(t, "full", k.State)
	assert.Equal(t, "day", k.Full)
	require.NotNil(t, k.Cap)
	assert.Equal(t, windowView{Requests: 5, RequestsLimit: 5, Tokens: 900}, k.Cap.Day)
	b, err := json.Marshal(viewKey(keypool.KeyStats{ID: "plain"}, now))
	require.NoError(t, err)
	assert.NotContains(t, string(b), `"cap"`)
}

func TestDisplayURL(t *testing.T) {
	assert.Equal(t, "https://api.example/v1", displayURL("https://user:secret@api.example/v1?key=sk-secret#x"))
}

func TestEventRing(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clock := now
	r := &eventRing{now: func() time.Time { return clock }}
	r.benched("up", keypool.Eviction{KeyID: "a", Model: "m", Kind: keypool.KindRate, For: time.Minute, Until: now.Add(time.Minute)})
	clock = now.Add(time.Second)
	r.benched("up", keypool.Eviction{KeyID: "b", Kind: keypool.KindAuth, For: 12 * time.Hour, Until: now.Add(12 * time.Hour)})
	for range 3 {
		clock = clock.Add(time.Second)
		r.routed(keypool.RouteEvent{Route: "backup", Skipped: []keypool.RouteSkip{{Route: "up", Kind: keypool.KindRate, Until: now.Add(time.Minute)}}})
	}
	r.routed(keypool.RouteEvent{Route: "up"}) // the first route answered well: nothing to say
	clock = clock.Add(time.Second)
	r.operated("unbench", "up", "b", "proxy_tokens[0]")

	events := r.latest(10, now.Add(2*time.Minute))
	var texts []string
	for _, e := range events {
		texts = append(texts, e.Kind+": "+e.Text)
	}
	assert.Equal(t, []string{
		"back: a for m back in rotation",
		"unbench: b unbenched by proxy_tokens[0]",
		"failover: failover to backup (up benched (rate))",
		"bench: b benched (auth: revoked or not authorized) for 12 h 0 min",
		"bench: a benched for m (rate: throttled by the vendor) for 1 min 0 s",
	}, texts, "newest first; b's bench ended by the unbench has no return of its own")
	assert.Equal(t, 3, events[2].Count, "a failover on every request keeps one line")
	assert.Equal(t, now.Add(time.Minute), events[0].At, "a return is dated by the bench's end")

	for i := range eventRingSize + 10 {
		r.operated("unbench", "up", "k", string(rune('a'+i%26))+"-"+time.Duration(i).String())
	}
	assert.Len(t, r.latest(1000, now), eventRingSize, "the ring is bounded")
}

func TestEventRingRouteBenched(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	r := &eventRing{now: func() time.Time { return now }}
	benched := r.routed(keypool.RouteEvent{Route: "up", Benched: keypool.RouteSkip{Route: "up", Kind: keypool.KindAuth, Until: now.Add(12 * time.Hour)}})
	assert.True(t, benched)
	events := r.latest(10, now)
	require.Len(t, events, 1)
	assert.Equal(t, "route", events[0].Kind)
	assert.Contains(t, events[0].Text, "route up benched by its own answer (auth: revoked or not authorized) for 12 h 0 min")
	r.operated("unbench", "up", "only", "proxy_tokens[0]")
	for _, e := range r.latest(10, now.Add(13*time.Hour)) {
		assert.NotEqual(t, "back", e.Kind, "the unbench ended the route's bench: %s", e.Text)
	}
}

// A disabled key's words: who and since when; a record read without a
// time (another program's) says who alone, and a view without the record
// says only that it is disabled.
func TestStateWordsOfADisabledKey(t *testing.T) {
	now := time.Date(2026, 3, 10, 12, 5, 0, 0, time.UTC)
	at := now.Add(-3 * time.Minute)
	assert.Equal(t, "disabled by ops since "+at.Local().Format("15:04")+", 3 min 0 s ago",
		stateWords(keyView{State: "disabled", Disabled: &disabledView{By: "ops", At: at}}, now))
	assert.Equal(t, "disabled by (unreadable)", stateWords(keyView{State: "disabled", Disabled: &disabledView{By: "(unreadable)"}}, now))
	assert.Equal(t, "disabled", stateWords(keyView{State: "disabled"}, now))
}
