package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A client names the model: one no store may keep is the client's mistake
// (400, never sent upstream), and a hundred names of a MiB grow neither the
// proxy's memory nor its /status.
func TestProxyRefusesModelNamesItCannotKeep(t *testing.T) {
	var reached atomic.Int64
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, `{"choices":[]}`)
	}))
	t.Cleanup(upstream.Close)
	base, _ := startProxy(t, oneUpstream(t, upstream.URL, "keys: [{secret: sk-a}, {secret: sk-b}]"))
	send := func(model string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(`{"model":"`+model+`"}`))
		req.Header.Set("Authorization", "Bearer "+proxyToken)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := send(strings.Repeat("m", 257))
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Contains(t, body, "a model name of 257 bytes is longer than 256")
	code, body = send("a\x07b")
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Contains(t, body, "control character")

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range 100 {
		code, _ := send(fmt.Sprintf("%03d", i) + strings.Repeat("x", 1<<20))
		require.Equal(t, http.StatusBadRequest, code)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	assert.Zero(t, reached.Load(), "nothing reached the upstream")
	grown := int64(after.HeapInuse) - int64(before.HeapInuse)
	assert.Less(t, grown, int64(16<<20), "100 names of a MiB grew the heap by %d bytes", grown)

	code, _ = send(strings.Repeat("m", 256))
	assert.Equal(t, http.StatusOK, code, "256 bytes is a name")
	status, page := get(t, base+"/status", nil, http.Header{"Authorization": {"Bearer " + proxyToken}})
	require.Equal(t, http.StatusOK, status)
	assert.Less(t, len(page), 64<<10, "/status stays small")
}
