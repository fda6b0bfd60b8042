package main

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool"
	"github.com/keypool-go/keypool/internal/vendorsim"
)

func TestProxyKeysOfAnAccountShareItsWindows(t *testing.T) {
	sim := vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, Keys: []vendorsim.Key{
		{Secret: "sk-acct-a", ID: "a"}, {Secret: "sk-acct-b", ID: "b"}, {Secret: "sk-own", ID: "own"}}})
	t.Cleanup(sim.Close)
	base, _ := startProxy(t, simConfig(sim, t.TempDir(), `
      - {id: a, secret: sk-acct-a, account: org}
      - {id: b, secret: sk-acct-b, account: org}`)+"    account_limits: {org: {rpm: 3}}\n")
	statuses := map[int]int{}
	for range 5 {
		statuses[send(t, http.MethodPost, base+"/v1/chat/completions", proxyToken)]++
	}
	assert.Equal(t, map[int]int{http.StatusOK: 3, http.StatusTooManyRequests: 2}, statuses, "two keys of one account: 3 a minute between them")

	routes, err := fetchStatus(t.Context(), base, proxyToken)
	require.NoError(t, err)
	for _, k := range routes[0].Keys {
		assert.Equal(t, "org", k.Account, "key %s", k.ID)
		require.Len(t, k.Models, 1)
		assert.Equal(t, int64(3), k.Models[0].Configured.RPM)
		assert.Equal(t, int64(3), k.Models[0].Minute.RequestsLimit)
	}
	status, body := get(t, base+"/status", nil, http.Header{"Authorization": {"Bearer " + proxyToken}})
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, body, `"account": "org"`)
}

func TestStatusShowsConfiguredLearnedAndEnforcedLimits(t *testing.T) {
	sim := vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, Keys: []vendorsim.Key{
		{Secret: "sk-lim-loose", ID: "loose", Limits: vendorsim.Limits{RPM: 30}},
		{Secret: "sk-lim-tight", ID: "tight", Limits: vendorsim.Limits{RPM: 30}}}})
	t.Cleanup(sim.Close)
	base, _ := startProxy(t, simConfig(sim, t.TempDir(), `
      - {id: loose, secret: sk-lim-loose, limits: {rpm: 40}}
      - {id: tight, secret: sk-lim-tight, limits: {rpm: 8}}`))
	for range 2 {
		assert.Equal(t, http.StatusOK, send(t, http.MethodPost, base+"/v1/chat/completions", proxyToken))
	}
	routes, err := fetchStatus(t.Context(), base, proxyToken)
	require.NoError(t, err)
	keys := map[string]modelView{}
	for _, k := range routes[0].Keys {
		require.Len(t, k.Models, 1, k.ID)
		keys[k.ID] = k.Models[0]
	}
	loose, tight := keys["loose"], keys["tight"]
	assert.Equal(t, limitsView{RPM: 40}, loose.Configured)
	assert.Equal(t, int64(30), loose.Learned.RPM, "the vendor's x-ratelimit-limit-requests")
	assert.Equal(t, int64(30), loose.Enforced.RPM, "the tighter")
	assert.Equal(t, windowView{Requests: 1, RequestsLimit: 30, RequestsLearned: true}, withoutTokens(loose.Minute), "the bar's limit is the vendor's")
	assert.Equal(t, limitsView{RPM: 8}, tight.Configured)
	assert.Equal(t, int64(30), tight.Learned.RPM)
	assert.Equal(t, int64(8), tight.Enforced.RPM)
	assert.Equal(t, windowView{Requests: 1, RequestsLimit: 8}, withoutTokens(tight.Minute))
}

func withoutTokens(w windowView) windowView {
	w.Tokens, w.TokensLimit, w.TokensLearned = 0, 0, false
	return w
}

func TestLearned(t *testing.T) {
	tests := []struct {
		enforced, configured, vendor int64
		want                         bool
	}{
		{0, 0, 0, false},
		{30, 0, 30, true},   // only the vendor's
		{30, 40, 30, true},  // the vendor's is tighter
		{8, 8, 30, false},   // the configured is tighter
		{30, 30, 30, false}, // the same: configured
		{8, 8, 0, false},    // the vendor said nothing
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, learned(tt.enforced, tt.configured, tt.vendor), "learned(%d, %d, %d)", tt.enforced, tt.configured, tt.vendor)
	}
}

func TestPrintRoutesShowsAccountsAndLearnedLimits(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	routes := viewRoutes([]keypool.RouteStatus{{Name: "groq", URL: "https://api.groq.com/openai", Keys: []keypool.KeyStats{
		{ID: "GROQ_KEY_1", Account: "org-a", Models: []keypool.ModelStats{{Model: "llama", Limits: keypool.Limits{RPM: 20}, Configured: keypool.Limits{RPM: 30}, Learned: keypool.Limits{RPM: 20}, Usage: keypool.Usage{MinuteRequests: 3}}}},
		{ID: "GROQ_KEY_2", Models: []keypool.ModelStats{{Model: "llama", Limits: keypool.Limits{RPM: 30}, Configured: keypool.Limits{RPM: 30}, Usage: keypool.Usage{MinuteRequests: 1}}}},
	}}}, now)
	var out bytes.Buffer
	printRoutes(&out, routes, now, false)
	got := out.String()
	assert.Contains(t, got, "GROQ_KEY_1 (org-a)")
	assert.Regexp(t, `GROQ_KEY_1 \(org-a\)\s+free\s+serving\s+0\s+llama\s+3/20\* 0`, got)
	assert.Regexp(t, `GROQ_KEY_2\s+free\s+serving\s+0\s+llama\s+1/30 0`, got)
	assert.True(t, strings.HasSuffix(got, "* a limit learned from the vendor, tighter than any configured\n"), got)
}

func TestStatusCommandSaysTheStoreFails(t *testing.T) {
	base, _, store, _ := failingStoreProxy(t)
	store.fail(assert.AnError)
	status, stdout, stderr := runCommand(t, nil, "status", "-url", base, "-token", proxyToken)
	require.Equal(t, 0, status, stderr)
	assert.True(t, strings.HasPrefix(stdout, "The state store is failing: "+assert.AnError.Error()+"\n\nROUTE"), stdout)
}
