package keypool

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A request whose "n" comes after the part of its body the pool scans
// asks the vendor for n completions all the same: the answer's reported
// output for them counts whole, not clamped to one completion's bound as
// if the request had asked for one.
func TestCompletionsPastTheScannedBodyCountWhole(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","usage":{"prompt_tokens":0,"completion_tokens":800,"total_tokens":800}}`)
	}))
	t.Cleanup(srv.Close)
	pool, client, _ := budgetPool(t, Price{Output: 2, MaxOutput: 100})
	body := `{"model":"gpt-4o","messages":[{"role":"user","content":"` + strings.Repeat("x", maxBodyScan+10) + `"}],"n":8}`
	resp, err := client.Post(srv.URL, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	assert.InDelta(t, 800*2e-6, pool.Stats()[0].Spent.PerDay, 1e-9, "8 completions of 100 tokens, billed by the vendor, counted as one")
}
