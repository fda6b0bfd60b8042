package keypool

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scripted is a base transport in memory: each key's next answers are
// scripted (status, Retry-After), then 200.
type scripted struct {
	mu     sync.Mutex
	script map[string][][2]string
}

func (s *scripted) RoundTrip(r *http.Request) (*http.Response, error) {
	key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	s.mu.Lock()
	a := [2]string{"200", ""}
	if q := s.script[key]; len(q) > 0 {
		a, s.script[key] = q[0], q[1:]
	}
	s.mu.Unlock()
	resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(`{}`)), Request: r}
	switch a[0] {
	case "429":
		resp.StatusCode = http.StatusTooManyRequests
		resp.Header.Set("Retry-After", a[1])
	case "503":
		resp.StatusCode = http.StatusServiceUnavailable
	case "401":
		resp.StatusCode = http.StatusUnauthorized
	}
	return resp, nil
}

// ends collects what OnBenchEnd hears, and when.
type ends struct {
	mu   sync.Mutex
	list []Eviction
	at   []time.Time
}

func (e *ends) add(ev Eviction) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, ev)
	e.at = append(e.at, time.Now())
}

func (e *ends) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.list)
}

func sendTo(t *testing.T, rt http.RoundTripper) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://vendor.test/v1/models", nil)
	require.NoError(t, err)
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
}

// TestOnBenchEndRingsWhenABenchEnds: a bench's end is heard at its Until,
// not before, with no request needed; Unbench and Close silence it.
func TestOnBenchEndRingsWhenABenchEnds(t *testing.T) {
	benched := func(t *testing.T) (*Pool, *ends, time.Time) {
		var got ends
		base := &scripted{script: map[string][][2]string{"sk-a": {{"429", "30"}}}}
		p, err := New("x", threeKeys(), OnBenchEnd(got.add))
		require.NoError(t, err)
		start := time.Now()
		sendTo(t, p.Transport(base)) // a: 429 for 30 s; b serves
		return p, &got, start
	}
	t.Run("at its end", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p, got, start := benched(t)
			defer p.Close()
			time.Sleep(29 * time.Second)
			synctest.Wait()
			assert.Zero(t, got.count(), "the bench has not ended")
			time.Sleep(2 * time.Second)
			synctest.Wait()
			require.Equal(t, 1, got.count())
			assert.Equal(t, Eviction{Provider: "x", KeyID: "a", Kind: KindRate, For: 30 * time.Second, Until: start.Add(30 * time.Second)}, got.list[0])
			assert.Equal(t, start.Add(30*time.Second), got.at[0], "heard at its Until")
		})
	})
	t.Run("unbenched", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p, got, _ := benched(t)
			defer p.Close()
			require.NoError(t, p.Unbench(t.Context(), "a"))
			time.Sleep(time.Minute)
			synctest.Wait()
			assert.Zero(t, got.count(), "an operator lifted it: its end is not heard")
		})
	})
	t.Run("closed", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p, got, _ := benched(t)
			require.NoError(t, p.Close())
			time.Sleep(time.Minute)
			synctest.Wait()
			assert.Zero(t, got.count(), "a closed pool rings no more")
		})
	})
}

// TestAlarmRingsInOrder: benches ring in the order they end; a later bench
// of one scope replaces an earlier one, and an earlier one does not
// shorten it; a clock behind the timer's waits for its own time.
func TestAlarmRingsInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got ends
		a := newAlarm(time.Now, got.add)
		now := time.Now()
		a.set(Eviction{KeyID: "k1", Until: now.Add(3 * time.Second)}, false)
		a.set(Eviction{KeyID: "k2", Until: now.Add(time.Second)}, false)
		a.set(Eviction{KeyID: "k1", Until: now.Add(5 * time.Second)}, false) // replaces k1's
		a.set(Eviction{KeyID: "k1", Until: now.Add(2 * time.Second)}, false) // shortens nothing
		a.set(Eviction{KeyID: "k1", Model: "m", Until: now.Add(4 * time.Second)}, false)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		var order []string
		for _, e := range got.list {
			order = append(order, e.KeyID+"/"+e.Model)
		}
		assert.Equal(t, []string{"k2/", "k1/m", "k1/"}, order)
		assert.Equal(t, []time.Time{now.Add(time.Second), now.Add(4 * time.Second), now.Add(5 * time.Second)}, got.at)

		// A clock an hour behind: the timer fires when real time says,
		// finds nothing ended, and waits for what its clock says is left.
		behind := ends{}
		b := newAlarm(func() time.Time { return time.Now().Add(-time.Hour) }, behind.add)
		b.set(Eviction{KeyID: "k", Until: time.Now().Add(-time.Hour + time.Minute)}, false)
		time.Sleep(30 * time.Second)
		synctest.Wait()
		assert.Zero(t, behind.count())
		time.Sleep(31 * time.Second)
		synctest.Wait()
		assert.Equal(t, 1, behind.count())
		b.stop()
		a.stop()
	})
}

// twoRoutes returns a Fallback over two routes of one key each, "first"
// (key "one", sk-one) and "second" (sk-two), both over base, whose route
// benches' ends ring, and the first route's pool.
func twoRoutes(t *testing.T, base http.RoundTripper, ring func(Eviction)) (*Pool, *Fallback) {
	t.Helper()
	first, err := New("first", []Key{{Secret: "sk-one", ID: "one"}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = first.Close() })
	second, err := New("second", []Key{{Secret: "sk-two", ID: "two"}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = second.Close() })
	u, _ := url.Parse("http://vendor.test")
	fb, err := NewFallback([]Route{{Name: "first", Pool: first, URL: u, Base: base}, {Name: "second", Pool: second, URL: u, Base: base}}, OnBenchEnd(ring))
	require.NoError(t, err)
	return first, fb
}

// TestOnBenchEndOfARoute: a Fallback's route benched by its own failure is
// heard when its bench ends, by the route's name.
func TestOnBenchEndOfARoute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got ends
		base := &scripted{script: map[string][][2]string{"sk-one": {{"503", ""}}}}
		_, fb := twoRoutes(t, base, got.add)
		start := time.Now()
		sendTo(t, fb)
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		require.Equal(t, 1, got.count())
		assert.Equal(t, Eviction{Provider: "first", Kind: KindTransient, For: time.Minute, Until: start.Add(time.Minute)}, got.list[0])
	})
}

// TestOnBenchEndUnbenchOfAnAccountsKey: unbenching one key of an account
// silences its own benches and the account's, not a mate's own bench (a
// revoked key), whose end is still heard.
func TestOnBenchEndUnbenchOfAnAccountsKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got ends
		base := &scripted{script: map[string][][2]string{"sk-b": {{"401", ""}}, "sk-c": {{"429", "30"}}}}
		p, err := New("x", []Key{{Secret: "sk-a", ID: "a", Account: "org"}, {Secret: "sk-b", ID: "b", Account: "org"}, {Secret: "sk-c", ID: "c"}},
			OnBenchEnd(got.add))
		require.NoError(t, err)
		defer p.Close()
		rt := p.Transport(base)
		sendTo(t, rt) // a serves
		sendTo(t, rt) // b: 401, b's own bench of 12 h; c: 429, c's of 30 s; a serves
		require.NoError(t, p.Unbench(t.Context(), "a"))
		time.Sleep(13 * time.Hour)
		synctest.Wait()
		var keys []string
		for _, e := range got.list {
			keys = append(keys, e.KeyID+"/"+e.Kind.String())
		}
		assert.Equal(t, []string{"c/rate", "b/auth"}, keys, "b's own bench outlives a's unbench, and is heard")
	})
}

// TestOnBenchEndOfARouteBenchedAgain: a route unbenched by hand and benched
// again for less is heard at the new bench's end, not the lifted one's.
func TestOnBenchEndOfARouteBenchedAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got ends
		base := &scripted{script: map[string][][2]string{"sk-one": {{"401", ""}, {"503", ""}}}}
		first, fb := twoRoutes(t, base, got.add)
		sendTo(t, fb) // first: 401, the route benched 12 h
		require.NoError(t, first.Unbench(t.Context(), "one"))
		start := time.Now()
		sendTo(t, fb) // first: 503, benched a minute
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		require.Equal(t, 1, got.count(), "the second bench's end")
		assert.Equal(t, KindTransient, got.list[0].Kind)
		assert.Equal(t, start.Add(time.Minute), got.at[0])
	})
}
