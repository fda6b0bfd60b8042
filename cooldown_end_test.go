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
		a.set(Eviction{KeyID: "k1", Until: now.Add(3 * time.Second)})
		a.set(Eviction{KeyID: "k2", Until: now.Add(time.Second)})
		a.set(Eviction{KeyID: "k1", Until: now.Add(5 * time.Second)}) // replaces k1's
		a.set(Eviction{KeyID: "k1", Until: now.Add(2 * time.Second)}) // shortens nothing
		a.set(Eviction{KeyID: "k1", Model: "m", Until: now.Add(4 * time.Second)})
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
		b.set(Eviction{KeyID: "k", Until: time.Now().Add(-time.Hour + time.Minute)})
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

// TestOnBenchEndOfARoute: a Fallback's route benched by its own failure is
// heard when its bench ends, by the route's name.
func TestOnBenchEndOfARoute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got ends
		base := &scripted{script: map[string][][2]string{"sk-one": {{"503", ""}}}}
		first, err := New("first", []Key{{Secret: "sk-one", ID: "one"}})
		require.NoError(t, err)
		defer first.Close()
		second, err := New("second", []Key{{Secret: "sk-two", ID: "two"}})
		require.NoError(t, err)
		defer second.Close()
		u, _ := url.Parse("http://vendor.test")
		fb, err := NewFallback([]Route{{Name: "first", Pool: first, URL: u, Base: base}, {Name: "second", Pool: second, URL: u, Base: base}}, OnBenchEnd(got.add))
		require.NoError(t, err)
		start := time.Now()
		sendTo(t, fb)
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		require.Equal(t, 1, got.count())
		assert.Equal(t, Eviction{Provider: "first", Kind: KindTransient, For: time.Minute, Until: start.Add(time.Minute)}, got.list[0])
	})
}
