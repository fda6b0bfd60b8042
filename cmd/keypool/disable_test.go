package main

import (
	"context"
	"path/filepath"

	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keypool-go/keypool"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// keyState returns the state of key id of route up in the proxy's
// /status, with who disabled it ("" when no one did).
func keyState(t *testing.T, addr, id string) (state, by string) {
	t.Helper()
	for _, r := range statusOf(t, addr).Routes {
		for _, k := range r.Keys {
			if k.ID == id {
				if k.Disabled != nil {
					by = k.Disabled.By
				}
				return k.State, by
			}
		}
	}
	t.Fatalf("no key %s in /status", id)
	return "", ""
}

// Through the real serve and a counting vendor: keypool disable takes a
// key out of rotation with the operator's name on it, a client's token
// cannot, the key stays out across a restart on the same state and across
// a reload, and keypool enable puts it back.
func TestDisableCommand(t *testing.T) {
	up := newKeyCounter(t)
	state := t.TempDir()
	conf := reloadConf(state, up.url, "{id: a, secret: sk-dis-a}, {id: b, secret: sk-dis-b}")
	p, _ := startServeFile(t, conf)
	chat := func(addr string, n int) {
		t.Helper()
		for range n {
			require.Equal(t, http.StatusOK, send(t, http.MethodPost, "http://"+addr+"/v1/chat/completions", proxyToken))
		}
	}
	t.Setenv("KEYPOOL_OPERATOR_TOKEN", operatorToken)

	assert.Equal(t, http.StatusUnauthorized, send(t, http.MethodPost, "http://"+p.addr+"/keys/up/a/disable", proxyToken),
		"a client's token is no operator's")
	st, _ := keyState(t, p.addr, "a")
	require.Equal(t, "serving", st)

	status, stdout, stderr := runKeypool(t, "disable", "-url", "http://"+p.addr+"/v1", "up/a")
	require.Equal(t, 0, status, stderr)
	assert.Equal(t, "Disabled a of route up: no request is sent with it until keypool enable.\n", stdout)
	assert.Eventually(t, func() bool {
		return strings.Contains(p.stderr.String(), "msg=disabled route=up key=a by=operator_tokens[0]")
	}, 5*time.Second, 10*time.Millisecond, "logged: %s", p.stderr.String())
	chat(p.addr, 4)
	assert.Zero(t, up.count("sk-dis-a"))
	assert.Equal(t, 4, up.count("sk-dis-b"))
	st, by := keyState(t, p.addr, "a")
	assert.Equal(t, "disabled", st)
	assert.Equal(t, "operator_tokens[0]", by)
	t.Setenv("COLUMNS", "80")
	status, stdout, stderr = runKeypool(t, "status", "-url", "http://"+p.addr)
	require.Equal(t, 0, status, stderr)
	assert.Regexp(t, `a +free +sent 0 +disabled by operator_tokens\[0\] since \d\d:\d\d, \d+ s ago`, stdout)
	for _, line := range strings.Split(stdout, "\n") {
		assert.LessOrEqual(t, len([]rune(line)), 100, "keypool status fits 100 columns at COLUMNS=80: %q", line)
	}
	events := statusOf(t, p.addr).Events
	require.NotEmpty(t, events)
	assert.Equal(t, "a disabled by operator_tokens[0]", events[0].Text)

	// Every key out: the client hears that none is left, at once.
	status, _, stderr = runKeypool(t, "disable", "-url", "http://"+p.addr, "up/b")
	require.Equal(t, 0, status, stderr)
	req, _ := http.NewRequest(http.MethodPost, "http://"+p.addr+"/v1/chat/completions", strings.NewReader(chatBody))
	req.Header.Set("Authorization", "Bearer "+proxyToken)
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	status, body := resp.StatusCode, string(b)
	assert.Equal(t, http.StatusTooManyRequests, status)
	assert.Contains(t, body, "no up key available (2 disabled)")
	assert.Less(t, time.Since(start), 5*time.Second)
	status, _, stderr = runKeypool(t, "enable", "-url", "http://"+p.addr, "up/b")
	require.Equal(t, 0, status, stderr)

	p.signal(t, syscall.SIGTERM)
	p.wait(t, time.Now(), 30*time.Second)
	p, path := startServeFile(t, conf)
	st, by = keyState(t, p.addr, "a")
	assert.Equal(t, "disabled", st, "after a restart on the same state")
	assert.Equal(t, "operator_tokens[0]", by)
	chat(p.addr, 3)
	assert.Zero(t, up.count("sk-dis-a"))

	p.hangUp(t, path, reloadConf(state, up.url, "{id: a, secret: sk-dis-a}, {id: b, secret: sk-dis-b}, {id: c, secret: sk-dis-c}"))
	chat(p.addr, 4)
	assert.Zero(t, up.count("sk-dis-a"), "after a reload")
	assert.Positive(t, up.count("sk-dis-c"))

	status, stdout, stderr = runKeypool(t, "enable", "-url", "http://"+p.addr, "up/a")
	require.Equal(t, 0, status, stderr)
	assert.Equal(t, "Enabled a of route up: it is back in rotation.\n", stdout)
	chat(p.addr, 6)
	assert.Positive(t, up.count("sk-dis-a"))
	st, _ = keyState(t, p.addr, "a")
	assert.Equal(t, "serving", st)

	status, _, stderr = runKeypool(t, "disable", "-url", "http://"+p.addr, "up/nope")
	assert.Equal(t, 1, status)
	assert.Contains(t, stderr, `no key "nope" in a route "up"`)
}

// keypool status -state shows a disabled key that never served — it holds
// no windows — as disabled, with who did it.
func TestStatusStateShowsADisabledKey(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	store, err := keypool.OpenBadgerStore(dir)
	require.NoError(t, err)
	pool, err := keypool.New("up", []keypool.Key{{Secret: "sk-used", ID: "used"}, {Secret: "sk-fresh", ID: "fresh"}},
		keypool.WithStore(store), keypool.WithLimits(keypool.Limits{RPM: 100}))
	require.NoError(t, err)
	require.NoError(t, pool.Disable(t.Context(), "fresh", "operator_tokens[0]"))
	require.NoError(t, pool.Do(t.Context(), "m", func(context.Context, keypool.Key) error { return nil }))
	require.NoError(t, pool.Close())
	require.NoError(t, store.Close())

	status, stdout, stderr := runKeypool(t, "status", "-state", dir, "-wide")
	require.Equal(t, 0, status, stderr)
	assert.Regexp(t, `up +fresh +- +disabled by operator_tokens\[0\] since`, stdout)
	assert.Regexp(t, `up +used +- +serving`, stdout)
}
