package keypool

import (
	"errors"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool/internal/vendorsim"
)

func TestPoolUnbenchBringsBackABenchedRoute(t *testing.T) {
	clock := newTestClock()
	sim := vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, Clock: clock.Now,
		Keys: []vendorsim.Key{{Secret: "sk-only", ID: "only", Revoked: true}}})
	t.Cleanup(sim.Close)
	pool, err := New("up", []Key{{Secret: "sk-only", ID: "only"}}, WithClock(clock.Now))
	require.NoError(t, err)
	u, _ := url.Parse(sim.URL())
	var events []RouteEvent
	fb, err := NewFallback([]Route{{Name: "up", Pool: pool, URL: u}}, WithClock(clock.Now),
		OnRoute(func(e RouteEvent) { events = append(events, e) }))
	require.NoError(t, err)
	send := func() (int, error) {
		resp, err := fb.RoundTrip(chatRequest(t, "gpt-4o-mini"))
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}

	status, err := send()
	require.NoError(t, err)
	assert.Equal(t, http.StatusUnauthorized, status, "one key, one route: the vendor's answer reaches the caller")
	require.Len(t, events, 1)
	assert.Equal(t, "up", events[0].Benched.Route)
	assert.Equal(t, KindAuth, events[0].Benched.Kind, "OnRoute hears why the route is benched")
	assert.Equal(t, clock.Now().Add(12*time.Hour), events[0].Benched.Until)

	_, err = send()
	var na *NoAvailableKeyError
	require.True(t, errors.As(err, &na), "the route rests: %v", err)
	assert.Zero(t, events[1].Benched, "a request passed over a benched route reports no new bench")

	require.NoError(t, pool.Unbench(t.Context(), "only"))
	assert.True(t, fb.Status()[0].BenchedUntil.IsZero(), "the route is no longer benched")
	status, err = send()
	require.NoError(t, err)
	assert.Equal(t, http.StatusUnauthorized, status, "the request reaches the vendor again")
	st, _ := sim.StatsOf("only")
	assert.Equal(t, int64(2), st.Requests)

	assert.ErrorContains(t, pool.Unbench(t.Context(), "nope"), `no key with ID "nope"`)
}
