package keypool

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Model names come from clients: one no store may keep is refused before
// anything is sent, and endless names never grow the pool's memory.
func TestTransportRefusesModelNamesItCannotKeep(t *testing.T) {
	sent := 0
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent++
		return okResponse(r), nil
	})
	pool, err := New("test", threeKeys(), WithLimits(Limits{RPM: 1000, TPM: 1 << 30}))
	require.NoError(t, err)
	rt := pool.Transport(base)
	send := func(body, path string) error {
		req, _ := http.NewRequest(http.MethodPost, "http://vendor.test"+path, strings.NewReader(body))
		resp, err := rt.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	assert.ErrorContains(t, send(`{"model":"`+strings.Repeat("m", 300)+`"}`, "/v1/chat"), "longer than 256")
	assert.ErrorContains(t, send(`{}`, "/v1beta/models/"+strings.Repeat("g", 300)+":generateContent"), "longer than 256")
	assert.ErrorContains(t, send("{\"model\":\"a\x07b\"}", "/v1/chat"), "control character")
	assert.ErrorContains(t, pool.Do(t.Context(), strings.Repeat("d", 300), func(context.Context, Key) error { return nil }), "longer than 256")
	assert.Zero(t, sent, "nothing is sent")
	require.NoError(t, send(`{"model":"`+strings.Repeat("m", 256)+`"}`, "/v1/chat"), "256 bytes is a name")
	for range 3 { // a name the last request named is checked once: the next bad one is not spared
		require.NoError(t, send(`{"model":"gpt-4o"}`, "/v1/chat"))
		assert.ErrorContains(t, send("{\"model\":\"gpt-4o\u0000\"}", "/v1/chat"), "control character")
		assert.ErrorContains(t, send("{\"model\":\"gpt-4o\r\nX: y\"}", "/v1/chat"), "control character")
	}

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range 100 {
		name := fmt.Sprintf("%04d", i) + strings.Repeat("x", 1<<20)
		require.ErrorContains(t, send(`{"model":"`+name+`"}`, "/v1/chat"), "longer than 256", "a name longer than the body the pool reads")
	}
	for i := range 3000 {
		_ = send(fmt.Sprintf(`{"model":"client-chosen-%d"}`, i), "/v1/chat")
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	grown := int64(after.HeapInuse) - int64(before.HeapInuse)
	assert.Less(t, grown, int64(16<<20), "100 names of a MiB and 3000 short ones grew the heap by %d bytes", grown)
	for _, ks := range pool.Stats() {
		assert.LessOrEqual(t, len(ks.Models), maxModelsPerKey+1, "key %s", ks.ID)
		for _, m := range ks.Models {
			assert.LessOrEqual(t, len(m.Model), 256)
		}
	}
	var buf bytes.Buffer
	fmt.Fprint(&buf, pool.Stats())
	assert.Less(t, buf.Len(), 4<<20, "stats stay small")
}
