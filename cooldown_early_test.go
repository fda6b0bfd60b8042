package keypool

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEarlyLookReturnsARecoveredKey holds early return: a key benched for
// a spent balance (a 402 that dates nothing, 12 hours) whose vendor serves
// it again after 20 minutes serves within 30, the looks before that cost
// one request each, and each failed look is reported with the bench's end.
func TestEarlyLookReturnsARecoveredKey(t *testing.T) {
	clock := newTestClock()
	start := clock.Now()
	var mu sync.Mutex
	var toA []time.Duration // when key a was sent a request, after start
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Bearer sk-a" {
			mu.Lock()
			toA = append(toA, clock.Now().Sub(start))
			mu.Unlock()
			if clock.Now().Sub(start) < 20*time.Minute {
				w.WriteHeader(http.StatusPaymentRequired)
				_, _ = w.Write([]byte(`{"error":{"code":"insufficient_quota"}}`))
				return
			}
		}
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(srv.Close)
	var ev evictions
	p, err := New("test", []Key{{Secret: "sk-a", ID: "a"}, {Secret: "sk-b", ID: "b"}}, WithClock(clock.Now), OnEvict(ev.add))
	require.NoError(t, err)
	client := &http.Client{Transport: p.Transport(nil)}

	var servedByA time.Duration
	for clock.Now().Sub(start) <= time.Hour {
		for range 3 { // a few requests a minute
			resp, err := client.Post(srv.URL, "application/json", strings.NewReader(`{"model":"m"}`))
			require.NoError(t, err)
			_ = resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode, "another key serves while a is benched")
		}
		mu.Lock()
		if n := len(toA); servedByA == 0 && n > 0 && toA[n-1] >= 20*time.Minute {
			servedByA = toA[n-1]
		}
		mu.Unlock()
		clock.Advance(time.Minute)
	}
	require.NotZero(t, servedByA, "key a never served again")
	assert.LessOrEqual(t, servedByA, 30*time.Minute, "key a serves within 30 minutes of its bench")

	mu.Lock()
	defer mu.Unlock()
	var looks []time.Duration
	for _, d := range toA {
		if d < servedByA {
			looks = append(looks, d)
		}
	}
	assert.Equal(t, []time.Duration{0, 5 * time.Minute, 10 * time.Minute}, looks, "one request at the bench and at each look before the key came back")
	evs := ev.all()
	require.GreaterOrEqual(t, len(evs), 3)
	for i, e := range evs[:3] {
		assert.Equal(t, start.Add(12*time.Hour), e.Latest, "eviction %d keeps the bench's end", i)
		assert.Equal(t, KindQuota, e.Kind)
	}
	assert.Equal(t, start.Add(5*time.Minute), evs[0].Until)
	assert.Equal(t, start.Add(10*time.Minute), evs[1].Until, "a failed look benches to the next look")
	assert.Equal(t, start.Add(20*time.Minute), evs[2].Until)
}
