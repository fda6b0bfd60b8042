package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCopyBuffersLendAndTakeBack(t *testing.T) {
	var c copyBuffers
	b := c.Get()
	require.Len(t, b, copyBufferSize)
	c.Put(b)
	c.Put(make([]byte, 10))                                 // not one of its own: dropped
	c.Put(make([]byte, copyBufferSize+1))                   // nor this
	c.Put(make([]byte, copyBufferSize, copyBufferSize+100)) // nor a window into a larger array
	for range 3 {
		assert.Len(t, c.Get(), copyBufferSize)
	}
}

// TestForwardFootprint holds that a proxied answer is copied through a
// lent buffer: a request through the proxy, its client and its upstream,
// all in this process, allocates less than the 32 KiB
// httputil.ReverseProxy allocates for each answer without a pool. CI runs
// it without the race detector.
func TestForwardFootprint(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates for itself and empties pools at random")
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for range 4 {
			_, _ = io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"word \"}}]}\n\n")
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(up.Close)
	addr := serveReal(t, oneUpstream(t, up.URL, "keys: [{secret: sk-1}]"))
	client := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(client.CloseIdleConnections)
	send := func() {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true}`))
		req.Header.Set("Authorization", "Bearer "+proxyToken)
		resp, err := client.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	for range 10 { // connections and pools warm
		send()
	}
	const n = 50
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		send()
	}
	runtime.ReadMemStats(&after)
	perRequest := (after.TotalAlloc - before.TotalAlloc) / n
	assert.Less(t, perRequest, uint64(copyBufferSize), "bytes allocated a request")
}
