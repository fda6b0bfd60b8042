package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool"
	"github.com/keypool-go/keypool/internal/vendorsim"
)

// sum adds up a series.
func sum(s []int64) int64 {
	var n int64
	for _, v := range s {
		n += v
	}
	return n
}

// The ring keeps the hour up to now, a slot a minute, and forgets a
// minute once it is over an hour old; a key it does not have is not
// counted; its bench times are bounded.
func TestHistoryRing(t *testing.T) {
	clock := newTestClock(time.Date(2026, 3, 10, 12, 0, 30, 0, time.UTC))
	h := newHistory(clock.now, []string{"up"}, map[string][]string{"up": {"a"}})
	for m := range 200 { // 200 minutes, m+1 requests in minute m
		clock.set(time.Date(2026, 3, 10, 12, m, 30, 0, time.UTC))
		for range m + 1 {
			h.attempted(t.Context(), keypool.Attempt{Provider: "up", KeyID: "a", Status: http.StatusOK})
		}
		h.attempted(t.Context(), keypool.Attempt{Provider: "up", KeyID: "stranger"})
		h.attempted(t.Context(), keypool.Attempt{Provider: "elsewhere", KeyID: "a"})
	}
	r := h.report(clock.now())
	require.Len(t, r.Routes, 1)
	require.Len(t, r.Routes[0].Keys, 1)
	got := r.Routes[0].Keys[0].Requests
	require.Len(t, got, historyMinutes)
	for j, n := range got {
		assert.Equal(t, int64(200-historyMinutes+j+1), n, "minute %d of the hour", j)
	}
	assert.Equal(t, time.Date(2026, 3, 10, 12, 199-historyMinutes+1, 0, 0, time.UTC), r.Start, "the hour's first minute")

	// A minute with nothing reads zero, not what its slot held an hour ago.
	clock.set(clock.now().Add(2 * time.Minute))
	got = h.report(clock.now()).Routes[0].Keys[0].Requests
	assert.Zero(t, got[historyMinutes-1])
	assert.Zero(t, got[historyMinutes-2])
	assert.Equal(t, int64(200), got[historyMinutes-3])

	for range 3 * historyBenchMarks {
		h.benched("up", keypool.Eviction{KeyID: "a"})
	}
	k := h.report(clock.now()).Routes[0].Keys[0]
	assert.Len(t, k.BenchTimes, historyBenchMarks, "bench times are bounded")
	assert.Equal(t, int64(3*historyBenchMarks), k.Benches[historyMinutes-1], "though every bench counts")
	h.routeBench("up")
	h.routeBench("elsewhere") // a route it does not have
	assert.Equal(t, []time.Time{clock.now()}, h.report(clock.now()).Routes[0].BenchTimes, "the route's own bench")
	clock.set(clock.now().Add(historyMinutes * time.Minute))
	r = h.report(clock.now())
	assert.Empty(t, r.Routes[0].Keys[0].BenchTimes, "an hour on, no bench is marked")
	assert.Empty(t, r.Routes[0].BenchTimes)
}

// /history counts, minute by minute on the proxy's clock, the requests
// each key sent, the vendor's 429s, the benches with their times and the
// tokens the pool counted; it takes an operator's token as /status does.
func TestHistoryEndpoint(t *testing.T) {
	clock := newTestClock(time.Date(2026, 3, 10, 12, 0, 10, 0, time.UTC))
	base := twoKeyProxy(t, clock, []vendorsim.Answer{throttled})
	send := func(n int) { sendOK(t, base, n) }
	read := func() historyReport {
		t.Helper()
		status, body := get(t, base+"/history", nil, http.Header{"Authorization": {"Bearer " + proxyToken}})
		require.Equal(t, http.StatusOK, status, body)
		var r historyReport
		require.NoError(t, json.Unmarshal([]byte(body), &r))
		require.Len(t, r.Routes, 1)
		require.Len(t, r.Routes[0].Keys, 2)
		return r
	}
	total := func(r historyReport, series func(keyHistoryView) []int64, minute int) int64 {
		var n int64
		for _, k := range r.Routes[0].Keys {
			n += series(k)[minute]
		}
		return n
	}
	requests := func(k keyHistoryView) []int64 { return k.Requests }
	limited := func(k keyHistoryView) []int64 { return k.RateLimited }
	benches := func(k keyHistoryView) []int64 { return k.Benches }
	tokens := func(k keyHistoryView) []int64 { return k.Tokens }

	status, _ := get(t, base+"/history", nil, nil)
	assert.Equal(t, http.StatusUnauthorized, status, "no token, no history")

	send(3) // a answers 429 and is benched, b takes it over, then b takes two more
	r := read()
	last := historyMinutes - 1
	assert.Equal(t, time.Date(2026, 3, 10, 11, 1, 0, 0, time.UTC), r.Start)
	assert.Equal(t, int64(4), total(r, requests, last), "four attempts: three requests, one failed over")
	assert.Equal(t, int64(1), total(r, limited, last), "one 429")
	assert.Equal(t, int64(1), total(r, benches, last), "one bench")
	assert.Positive(t, total(r, tokens, last), "the tokens of three answers")
	a := r.Routes[0].Keys[0]
	assert.Equal(t, "a", a.ID)
	assert.Equal(t, []int64{1}, a.RateLimited[last:], "the 429 was a's")
	assert.Equal(t, []time.Time{clock.now()}, a.BenchTimes, "a's bench, marked at its time")
	assert.Zero(t, sum(r.Routes[0].Keys[1].RateLimited), "b had no 429")

	clock.set(time.Date(2026, 3, 10, 12, 3, 40, 0, time.UTC)) // a's bench is over
	send(1)
	r = read()
	assert.Equal(t, int64(1), total(r, requests, last), "this minute")
	assert.Zero(t, total(r, requests, last-1))
	assert.Equal(t, int64(4), total(r, requests, last-3), "three minutes ago")

	clock.set(time.Date(2026, 3, 10, 13, 0, 30, 0, time.UTC)) // 12:00 is over an hour ago
	r = read()
	assert.Equal(t, int64(1), sum(r.Routes[0].Keys[0].Requests)+sum(r.Routes[0].Keys[1].Requests), "only 12:03 is left")
	assert.Empty(t, r.Routes[0].Keys[0].BenchTimes)
	assert.True(t, strings.HasPrefix(r.Start.Format(time.RFC3339), "2026-03-10T12:01"), "from %v", r.Start)
}
