package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool"
)

// keyCounter is a fake vendor that counts the requests each key sends,
// answers 401 to the keys it is told are revoked, and holds the requests
// of its slow key until released.
type keyCounter struct {
	url     string
	mu      sync.Mutex
	sent    map[string]int  // guarded by mu
	revoked map[string]bool // guarded by mu
	started chan string     // the slow key, at each of its requests
	hold    chan struct{}
	once    sync.Once
	// slow is a key whose requests are held until released, then
	// answered 401; "" for none.
	slow string
}

func newKeyCounter(t *testing.T, revoked ...string) *keyCounter {
	c := &keyCounter{sent: map[string]int{}, revoked: map[string]bool{}, started: make(chan string, 10), hold: make(chan struct{})}
	for _, k := range revoked {
		c.revoked[k] = true
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		c.mu.Lock()
		c.sent[key]++
		revoked := c.revoked[key]
		c.mu.Unlock()
		if key == c.slow {
			c.started <- key
			select {
			case <-c.hold:
			case <-r.Context().Done():
				return
			}
			revoked = true
		}
		if revoked {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"error":{"type":"invalid_request_error","code":"invalid_api_key","message":"Incorrect API key provided"}}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"c","object":"chat.completion","model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`)
	}))
	t.Cleanup(func() {
		c.release()
		srv.Close()
	})
	c.url = srv.URL
	return c
}

// release lets the slow key's requests be answered.
func (c *keyCounter) release() { c.once.Do(func() { close(c.hold) }) }

// count returns the requests key has sent.
func (c *keyCounter) count(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sent[key]
}

// reloadConf is a configuration with an operator token, a state
// directory, and one upstream at url with keys, a YAML flow list's items.
func reloadConf(state, url, keys string) string {
	return fmt.Sprintf("listen: 127.0.0.1:0\nproxy_tokens: [%q]\noperator_tokens: [%q]\nstate: %s\nupstreams:\n  - {name: up, url: %s, keys: [%s]}\n",
		proxyToken, operatorToken, state, url, keys)
}

// startServeFile starts keypool serve on a configuration file holding
// conf, and returns it with the file's path, to rewrite.
func startServeFile(t *testing.T, conf string) (*process, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keypool.yaml")
	require.NoError(t, os.WriteFile(path, []byte(conf), 0o600))
	return startCommand(t, exec.Command(keypoolBinary(t), "serve", "-config", path)), path
}

// hangUp rewrites the file at path with conf, sends the process SIGHUP
// and waits until it has logged the outcome of one more reload.
func (p *process) hangUp(t *testing.T, path, conf string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(conf), 0o600))
	before := p.reloads()
	p.signal(t, syscall.SIGHUP)
	require.Eventually(t, func() bool { return p.reloads() > before }, 10*time.Second, 10*time.Millisecond,
		"no reload logged after SIGHUP: %s", p.stderr.String())
}

// reloads counts the reloads the process has logged, done or refused.
func (p *process) reloads() int {
	log := p.stderr.String()
	return strings.Count(log, "msg=reloaded") + strings.Count(log, `msg="reload refused`)
}

// running fails t if the process has exited.
func (p *process) running(t *testing.T) {
	t.Helper()
	select {
	case <-p.done:
		t.Fatalf("keypool serve exited: %s", p.stderr.String())
	default:
	}
}

// statusOf reads the proxy's /status with the operator token.
func statusOf(t *testing.T, addr string) statusReport {
	t.Helper()
	status, body := get(t, "http://"+addr+"/status", nil, http.Header{"Authorization": {"Bearer " + operatorToken}})
	require.Equal(t, http.StatusOK, status, body)
	var report statusReport
	require.NoError(t, json.Unmarshal([]byte(body), &report))
	return report
}

func TestReloadProcessAddsAKeyOnSIGHUP(t *testing.T) {
	up := newKeyCounter(t)
	state := t.TempDir()
	p, path := startServeFile(t, reloadConf(state, up.url, "{id: a, secret: sk-reload-a}"))
	pid := p.cmd.Process.Pid
	for range 2 {
		require.Equal(t, http.StatusOK, send(t, http.MethodPost, "http://"+p.addr+"/v1/chat/completions", proxyToken))
	}
	require.Equal(t, 0, up.count("sk-reload-b"))

	p.hangUp(t, path, reloadConf(state, up.url, "{id: a, secret: sk-reload-a}, {id: b, secret: sk-reload-b}"))
	p.running(t)
	assert.Equal(t, pid, p.cmd.Process.Pid)
	assert.Contains(t, p.stderr.String(), "upstreams=\"up (2 keys)\"")
	for range 4 {
		require.Equal(t, http.StatusOK, send(t, http.MethodPost, "http://"+p.addr+"/v1/chat/completions", proxyToken))
	}
	assert.Positive(t, up.count("sk-reload-b"), "requests reach the key added")
	assert.Equal(t, 1, strings.Count(p.stderr.String(), "msg=serving"), "the same process serves on: %s", p.stderr.String())
	report := statusOf(t, p.addr)
	require.NotNil(t, report.Reload)
	assert.True(t, report.Reload.OK)
	assert.Equal(t, "SIGHUP", report.Reload.By)
	require.Len(t, report.Routes, 1)
	assert.Len(t, report.Routes[0].Keys, 2)
	require.Eventually(t, func() bool {
		status, body := get(t, "http://"+p.addr+"/metrics", nil, http.Header{"Authorization": {"Bearer " + operatorToken}})
		return status == http.StatusOK && regexp.MustCompile(`(?m)^keypool_keys_available\{.*keypool_provider="up".*\} 2$`).MatchString(body)
	}, 5*time.Second, 20*time.Millisecond, "/metrics counts the keys of the new configuration")
	assert.NotContains(t, p.stderr.String(), "sk-reload-", "no secret in the log")
}

func TestReloadKeepsAnUnchangedKeysBench(t *testing.T) {
	up := newKeyCounter(t, "sk-bench-a")
	state := t.TempDir()
	p, path := startServeFile(t, reloadConf(state, up.url, "{id: a, secret: sk-bench-a}, {id: b, secret: sk-bench-b}"))
	for range 3 {
		require.Equal(t, http.StatusOK, send(t, http.MethodPost, "http://"+p.addr+"/v1/chat/completions", proxyToken))
	}
	require.Equal(t, 1, up.count("sk-bench-a"), "a answered 401 once, and was benched")

	// a and b as they were; c added, with a limit of its own.
	p.hangUp(t, path, reloadConf(state, up.url, "{id: a, secret: sk-bench-a}, {id: b, secret: sk-bench-b}, {id: c, secret: sk-bench-c, limits: {rpm: 100}}"))
	require.Contains(t, p.stderr.String(), "msg=reloaded")
	for range 6 {
		require.Equal(t, http.StatusOK, send(t, http.MethodPost, "http://"+p.addr+"/v1/chat/completions", proxyToken))
	}
	assert.Equal(t, 1, up.count("sk-bench-a"), "a, benched before the reload, is still benched after it")
	assert.Positive(t, up.count("sk-bench-c"))
	keys := map[string]keyView{}
	for _, k := range statusOf(t, p.addr).Routes[0].Keys {
		keys[k.ID] = k
	}
	require.Len(t, keys, 3)
	assert.Equal(t, "benched", stateWords(keys["a"], time.Now())[:len("benched")], "a's bench on the page: %+v", keys["a"])
}

func TestReloadLiftsTheBenchOfAKeyRenewedInPlace(t *testing.T) {
	up := newKeyCounter(t, "sk-renew-old")
	state := t.TempDir()
	p, path := startServeFile(t, reloadConf(state, up.url, "{id: a, secret: sk-renew-old}, {id: b, secret: sk-renew-b}"))
	for range 3 {
		require.Equal(t, http.StatusOK, send(t, http.MethodPost, "http://"+p.addr+"/v1/chat/completions", proxyToken))
	}
	require.Equal(t, 1, up.count("sk-renew-old"), "a answered 401 once, and was benched")

	// a gets a new secret under its ID; b stays as it was.
	p.hangUp(t, path, reloadConf(state, up.url, "{id: a, secret: sk-renew-new}, {id: b, secret: sk-renew-b}"))
	assert.Contains(t, p.stderr.String(), `msg="renewed: its benches lifted" route=up key=a`)
	for range 4 {
		require.Equal(t, http.StatusOK, send(t, http.MethodPost, "http://"+p.addr+"/v1/chat/completions", proxyToken))
	}
	assert.Positive(t, up.count("sk-renew-new"), "the renewed key is back in rotation")
	assert.Equal(t, 1, up.count("sk-renew-old"))
	assert.NotContains(t, p.stderr.String(), "sk-renew-", "no secret in the log")
}

func TestReloadKeepsAClientsWindowAndTakesItsNewClients(t *testing.T) {
	up := newKeyCounter(t)
	state := t.TempDir()
	const capped, added = "kp-client-capped-token", "kp-client-added-token"
	conf := func(clients string) string {
		return strings.Replace(reloadConf(state, up.url, "{id: a, secret: sk-cl-a}"), "state:", "clients:\n"+clients+"state:", 1)
	}
	p, path := startServeFile(t, conf(fmt.Sprintf("  - {name: capped, token: %s, limits: {rpm: 3}}\n", capped)))
	statuses := map[int]int{}
	for range 3 {
		statuses[send(t, http.MethodPost, "http://"+p.addr+"/v1/chat/completions", capped)]++
	}
	require.Equal(t, map[int]int{http.StatusOK: 3}, statuses)
	require.Equal(t, http.StatusUnauthorized, send(t, http.MethodPost, "http://"+p.addr+"/v1/chat/completions", added))

	// capped as it was; a client added.
	p.hangUp(t, path, conf(fmt.Sprintf("  - {name: capped, token: %s, limits: {rpm: 3}}\n  - {name: added, token: %s}\n", capped, added)))
	require.Contains(t, p.stderr.String(), "msg=reloaded")
	assert.Equal(t, http.StatusTooManyRequests, send(t, http.MethodPost, "http://"+p.addr+"/v1/chat/completions", capped),
		"the client's minute, used up before the reload, is still used up after it")
	assert.Equal(t, http.StatusOK, send(t, http.MethodPost, "http://"+p.addr+"/v1/chat/completions", added), "the client added is served")
	var capView *clientReport
	report := statusOf(t, p.addr)
	for i, c := range report.Clients {
		if c.Name == "capped" {
			capView = &report.Clients[i]
		}
	}
	require.NotNil(t, capView, "%+v", report.Clients)
	assert.Equal(t, int64(3), capView.Today.Requests, "its use today goes on across the reload")

	// capped removed: its token no longer forwards.
	p.hangUp(t, path, conf(fmt.Sprintf("  - {name: added, token: %s}\n", added)))
	assert.Equal(t, http.StatusUnauthorized, send(t, http.MethodPost, "http://"+p.addr+"/v1/chat/completions", capped))
	assert.Equal(t, 4, up.count("sk-cl-a"))
}

func TestReloadRefusesABrokenFileAndServesOn(t *testing.T) {
	up := newKeyCounter(t)
	state := t.TempDir()
	conf := reloadConf(state, up.url, "{id: a, secret: sk-broken-a}")
	p, path := startServeFile(t, conf)
	require.Equal(t, http.StatusOK, send(t, http.MethodPost, "http://"+p.addr+"/v1/chat/completions", proxyToken))

	// Three mistakes: a listen that needs a restart, a field misspelt, and
	// a limit below zero; and a key added, which is not applied either.
	broken := strings.Replace(reloadConf(state, up.url, "{id: a, secret: sk-broken-a}, {id: b, secret: sk-broken-b, limits: {rpm: -1}}"),
		"listen: 127.0.0.1:0", "listen: 127.0.0.1:1\nlog_levl: debug", 1)
	p.hangUp(t, path, broken)
	p.running(t)
	mistakes := []string{"listen: changes need a restart", "log_levl", "upstreams[0].keys[1].limits.rpm"}
	require.Eventually(t, func() bool {
		return strings.Count(p.stderr.String(), `msg="reload mistake"`) == len(mistakes)
	}, 5*time.Second, 10*time.Millisecond, "a line a mistake: %s", p.stderr.String())
	log := p.stderr.String()
	for _, mistake := range mistakes {
		assert.Equal(t, 1, strings.Count(log, mistake), "mistake %q logged once: %s", mistake, log)
	}
	for range 3 {
		require.Equal(t, http.StatusOK, send(t, http.MethodPost, "http://"+p.addr+"/v1/chat/completions", proxyToken))
	}
	assert.Equal(t, 0, up.count("sk-broken-b"), "nothing of the broken file applied")
	assert.Equal(t, 4, up.count("sk-broken-a"), "the old configuration serves on")
	report := statusOf(t, p.addr)
	require.NotNil(t, report.Reload)
	assert.False(t, report.Reload.OK)
	assert.Len(t, report.Reload.Mistakes, 3, "%q", report.Reload.Mistakes)

	// keypool reload prints them, one a line, and exits 1.
	cmd := exec.Command(keypoolBinary(t), "reload", "-url", "http://"+p.addr, "-token", operatorToken)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "%s", out)
	assert.Equal(t, 1, exit.ExitCode())
	for _, line := range []string{"keypool reload: listen: changes need a restart", "keypool reload: upstreams[0].keys[1].limits.rpm"} {
		assert.Contains(t, string(out), line)
	}

	// Mended, the file reloads.
	require.NoError(t, os.WriteFile(path, []byte(reloadConf(state, up.url, "{id: a, secret: sk-broken-a}, {id: b, secret: sk-broken-b}")), 0o600))
	out, err = exec.Command(keypoolBinary(t), "reload", "-url", "http://"+p.addr, "-token", operatorToken).CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Equal(t, "Reloaded: serving up (2 keys).\n", string(out))
	assert.True(t, statusOf(t, p.addr).Reload.OK)
	assert.NotContains(t, p.stderr.String(), "sk-broken-", "no secret in the log")
}

func TestReloadEndpointTakesOnlyAnOperatorToken(t *testing.T) {
	up := newKeyCounter(t)
	state := t.TempDir()
	p, path := startServeFile(t, reloadConf(state, up.url, "{id: a, secret: sk-op-a}"))
	require.NoError(t, os.WriteFile(path, []byte(reloadConf(state, up.url, "{id: a, secret: sk-op-a}, {id: b, secret: sk-op-b}")), 0o600))
	for _, token := range []string{proxyToken, ""} { // a client's token, and none
		status, body := sendWith(t, http.MethodPost, "http://"+p.addr+"/reload", nil, http.Header{"Authorization": {"Bearer " + token}})
		assert.Equal(t, http.StatusUnauthorized, status, "token %q: %s", token, body)
	}
	assert.Equal(t, 0, p.reloads(), "nothing reloaded: %s", p.stderr.String())
	assert.Len(t, statusOf(t, p.addr).Routes[0].Keys, 1)

	status, body := sendWith(t, http.MethodPost, "http://"+p.addr+"/reload", nil, http.Header{"Authorization": {"Bearer " + operatorToken}})
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, `"ok": true`)
	assert.Eventually(t, func() bool { return strings.Contains(p.stderr.String(), "by=operator_tokens[0]") }, 5*time.Second, 10*time.Millisecond,
		"the log says who reloaded: %s", p.stderr.String())
	assert.Len(t, statusOf(t, p.addr).Routes[0].Keys, 2)
}

func TestReloadLetsARequestInFlightFinish(t *testing.T) {
	up := newKeyCounter(t)
	up.slow = "sk-flight-a" // held, then revoked: its request fails over to b
	state := t.TempDir()
	p, path := startServeFile(t, reloadConf(state, up.url, "{id: a, secret: sk-flight-a}, {id: b, secret: sk-flight-b}"))
	answered := make(chan int, 1)
	go func() {
		resp, err := chat(t, "http://"+p.addr, false)
		if err != nil {
			answered <- 0
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		answered <- resp.StatusCode
	}()
	require.Equal(t, "sk-flight-a", <-up.started)

	// a and b are replaced by c while the request is on a; it fails over
	// to b, on the pool it started with, once a answers.
	p.hangUp(t, path, reloadConf(state, up.url, "{id: c, secret: sk-flight-c}"))
	require.Contains(t, p.stderr.String(), "msg=reloaded")
	require.Equal(t, http.StatusOK, send(t, http.MethodPost, "http://"+p.addr+"/v1/chat/completions", proxyToken))
	assert.Equal(t, 1, up.count("sk-flight-c"), "a new request goes to the new key")
	assert.Equal(t, 0, up.count("sk-flight-b"))

	up.release()
	select {
	case status := <-answered:
		assert.Equal(t, http.StatusOK, status, "the request in flight finished on its pool: %s", p.stderr.String())
	case <-time.After(10 * time.Second):
		t.Fatal("the request in flight did not finish")
	}
	assert.Equal(t, 1, up.count("sk-flight-b"), "it failed over to b, a key of the configuration it started with")
	p.running(t)
}

// reloadServer runs the proxy in this process on the configuration file
// conf, reloadable, and returns it with its address and the file's path.
func reloadServer(t *testing.T, conf string) (*server, string, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keypool.yaml")
	require.NoError(t, os.WriteFile(path, []byte(conf), 0o600))
	s, err := loadConfig(path, os.LookupEnv)
	require.NoError(t, err)
	srv, err := newServer(s, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	srv.reloads = newReloads(srv, path)
	hs := httptest.NewServer(srv.handler())
	t.Cleanup(func() {
		hs.Close()
		srv.close()
	})
	return srv, hs.URL, path
}

func TestReloadRefusesWhatNeedsARestartAndAppliesNothing(t *testing.T) {
	up := newKeyCounter(t)
	state := t.TempDir()
	srv, _, path := reloadServer(t, reloadConf(state, up.url, "{id: a, secret: sk-rs-a}"))
	first := srv.current()
	for _, tt := range []struct{ field, from, to string }{
		{"listen", "listen: 127.0.0.1:0", "listen: 127.0.0.1:9"},
		{"state", "state: " + state, "state: " + t.TempDir()},
		{"shutdown_timeout", "listen: 127.0.0.1:0", "listen: 127.0.0.1:0\nshutdown_timeout: 3s"},
		{"log_level", "listen: 127.0.0.1:0", "listen: 127.0.0.1:0\nlog_level: debug"},
	} {
		t.Run(tt.field, func(t *testing.T) {
			conf := strings.Replace(reloadConf(state, up.url, "{id: a, secret: sk-rs-a}, {id: b, secret: sk-rs-b}"), tt.from, tt.to, 1)
			require.NoError(t, os.WriteFile(path, []byte(conf), 0o600))
			view := srv.reloads.reload("test")
			assert.False(t, view.OK)
			assert.Equal(t, []string{tt.field + ": changes need a restart"}, view.Mistakes)
			assert.Same(t, first, srv.current(), "nothing applied: the key added neither")
		})
	}
}

func TestReloadClosesReplacedPoolsAndLeaksNoGoroutine(t *testing.T) {
	up := newKeyCounter(t)
	state := t.TempDir()
	confs := []string{
		reloadConf(state, up.url, "{id: a, secret: sk-gr-a}"),
		reloadConf(state, up.url, "{id: a, secret: sk-gr-a}, {id: b, secret: sk-gr-b, limits: {rpm: 50}}"),
	}
	srv, base, path := reloadServer(t, confs[0])
	first := srv.current()
	reload := func(i int) {
		require.NoError(t, os.WriteFile(path, []byte(confs[i%2]), 0o600))
		require.True(t, srv.reloads.reload("test").OK)
		require.Equal(t, http.StatusOK, send(t, http.MethodPost, base+"/v1/chat/completions", proxyToken))
	}
	reload(1) // the first of each: a meter's, a connection's goroutines
	reload(0)
	http.DefaultClient.CloseIdleConnections()
	before := settledGoroutines(t, -1)
	for i := range 20 {
		reload(i + 1)
	}
	http.DefaultClient.CloseIdleConnections()
	after := settledGoroutines(t, before)
	assert.LessOrEqual(t, after, before, "goroutines after 20 reloads")

	require.Eventually(t, func() bool {
		err := first.pools[0].Do(t.Context(), "", func(ctx context.Context, k keypool.Key) error { return nil })
		return err != nil && strings.Contains(err.Error(), "closed")
	}, 5*time.Second, 10*time.Millisecond, "the first configuration's pool is closed once its requests are done")
	srv.reloads.poolsMu.Lock()
	defer srv.reloads.poolsMu.Unlock()
	assert.Empty(t, srv.reloads.draining, "every replaced configuration closed")
}

func TestReloadUnderLoadFailsNoRequest(t *testing.T) {
	up := newKeyCounter(t)
	state := t.TempDir()
	confs := []string{
		reloadConf(state, up.url, "{id: a, secret: sk-load-a}, {id: b, secret: sk-load-b}"),
		reloadConf(state, up.url, "{id: b, secret: sk-load-b}, {id: c, secret: sk-load-c}"),
	}
	srv, base, path := reloadServer(t, confs[0])
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	for range 6 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				status := send(t, http.MethodPost, base+"/v1/chat/completions", proxyToken)
				mu.Lock()
				statuses[status]++
				mu.Unlock()
			}
		})
	}
	for i := range 30 {
		require.NoError(t, os.WriteFile(path, []byte(confs[(i+1)%2]), 0o600))
		require.True(t, srv.reloads.reload("test").OK)
	}
	close(stop)
	wg.Wait()
	assert.Len(t, statuses, 1, "every request answered 200 across 30 reloads: %v", statuses)
	assert.Positive(t, statuses[http.StatusOK])
	assert.Positive(t, up.count("sk-load-a"))
	assert.Positive(t, up.count("sk-load-c"))
}

// settledGoroutines waits until the count of goroutines is at most want
// (any, when want < 0) and stops changing, and returns it.
func settledGoroutines(t *testing.T, want int) int {
	t.Helper()
	n, same := runtime.NumGoroutine(), 0
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		m := runtime.NumGoroutine()
		if m == n {
			same++
		} else {
			n, same = m, 0
		}
		if same >= 10 && (want < 0 || n <= want) {
			break
		}
	}
	return n
}

func TestReloadRefusedShowsOnTheStatusPage(t *testing.T) {
	ctx := browser(t)
	dir := screenshotDir(t)
	up := newKeyCounter(t)
	state := t.TempDir()
	conf := reloadConf(state, up.url, "{id: a, secret: sk-page-a}")
	srv, base, path := reloadServer(t, conf)
	broken := strings.Replace(reloadConf(state, up.url, "{id: a, secret: sk-page-a}, {id: b, secret: sk-page-b, limits: {rpm: -1}}"),
		"listen: 127.0.0.1:0", "listen: 127.0.0.1:1", 1)
	require.NoError(t, os.WriteFile(path, []byte(broken), 0o600))
	require.False(t, srv.reloads.reload("SIGHUP").OK)
	logInAs(t, ctx, base, operatorToken, chromedp.WaitVisible(chromedp.ID("reload-banner")))
	banner := strings.ReplaceAll(read(t, ctx, chromedp.Text(chromedp.ID("reload-banner"))), "\u00a0", " ")
	assert.Regexp(t, `^The configuration was not reloaded at \d\d:\d\d:\d\d \(SIGHUP\): nothing changed, and the proxy serves on as before\. Its mistakes:`, banner)
	assert.Equal(t, 2, read(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll("#reload-banner li").length`)), "a mistake an item: %s", banner)
	assert.Contains(t, banner, "listen: changes need a restart")
	assert.Contains(t, banner, "upstreams[0].keys[1].limits.rpm")
	assert.Contains(t, read(t, ctx, chromedp.Text(chromedp.ID("summary"))), "1 route · 1 key: ", "one key, in the singular")
	assert.Zero(t, countOf(t, ctx, "#clients table"), "one proxy token without rules: no table of clients")
	shoot(t, ctx, dir, "status-reload-refused.png")

	require.NoError(t, os.WriteFile(path, []byte(conf), 0o600))
	require.True(t, srv.reloads.reload("SIGHUP").OK)
	inTab(t, ctx, "the banner goes once a reload is done",
		chromedp.WaitNotVisible(chromedp.ID("reload-banner")))
}

// A refused file's mistakes quote a value in the wrong field, which may be
// a secret pasted there — the live configuration's, or the file's own:
// what the reload says, in the log and on the page, carries neither.
func TestReloadMistakesQuoteNoSecret(t *testing.T) {
	up := newKeyCounter(t)
	state := t.TempDir()
	const live, fresh = "sk-reload-live-secret-0001", "sk-reload-new-secret-00002"
	srv, _, path := reloadServer(t, reloadConf(state, up.url, "{id: a, secret: "+live+"}"))
	broken := reloadConf(state, up.url, "{id: a, secret: "+live+", limits: {rpm: "+live+"}}, {id: b, secret: "+fresh+", limits: {rpd: "+fresh+"}}")
	require.NoError(t, os.WriteFile(path, []byte(broken), 0o600))
	view := srv.reloads.reload("SIGHUP")
	require.False(t, view.OK)
	require.Len(t, view.Mistakes, 2, "%q", view.Mistakes)
	for _, m := range view.Mistakes {
		assert.NotContains(t, m, live, "the live key's secret")
		assert.NotContains(t, m, fresh, "the refused file's new key's secret")
		assert.Contains(t, m, "redacted", "the mistake still says where: %s", m)
	}
}

// TestReloadKeepsTheInFlightCap: a request under way on the pool a reload
// replaces holds its key's place in the new pool's in_flight cap, so the
// vendor never sees the key hold more than its cap; the request waiting
// for that place is served once the old one ends.
func TestReloadKeepsTheInFlightCap(t *testing.T) {
	var mu sync.Mutex
	now, most := map[string]int{}, map[string]int{}
	held := false // a's first request is held until hold closes
	hold := make(chan struct{})
	started := make(chan struct{}, 4)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Authorization")
		mu.Lock()
		now[key]++
		most[key] = max(most[key], now[key])
		first := key == "Bearer sk-cap-a" && !held
		held = held || first
		mu.Unlock()
		started <- struct{}{}
		if first {
			<-hold
		}
		mu.Lock()
		now[key]--
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"c","object":"chat.completion","usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`)
	}))
	t.Cleanup(upstream.Close)
	t.Cleanup(func() {
		select {
		case <-hold:
		default:
			close(hold)
		}
	})
	state := t.TempDir()
	conf := func(keys string) string {
		return fmt.Sprintf("listen: 127.0.0.1:0\nproxy_tokens: [%q]\noperator_tokens: [%q]\nstate: %s\nupstreams:\n  - {name: up, url: %s, wait: 30s, limits: {in_flight: 1}, keys: [%s]}\n",
			proxyToken, operatorToken, state, upstream.URL, keys)
	}
	srv, base, path := reloadServer(t, conf("{id: a, secret: sk-cap-a}"))
	answered := make(chan int, 2)
	ask := func() {
		resp, err := chat(t, base, false)
		if err != nil {
			answered <- 0
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		answered <- resp.StatusCode
	}
	go ask()
	<-started // the first request holds a's one place, on the old pool

	require.NoError(t, os.WriteFile(path, []byte(conf("{id: a, secret: sk-cap-a}, {id: b, secret: sk-cap-b, paid: true}")), 0o600))
	require.True(t, srv.reloads.reload("test").OK)
	go ask() // on the new pool: a is full, b is paid and free of requests
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the second request reached no key")
	}
	assert.Equal(t, http.StatusOK, <-answered, "the second request is served by b, a being full")
	mu.Lock()
	assert.Equal(t, 1, most["Bearer sk-cap-a"], "a never held more than its cap")
	assert.Equal(t, 1, most["Bearer sk-cap-b"])
	mu.Unlock()
	close(hold)
	assert.Equal(t, http.StatusOK, <-answered, "the old pool's request finishes")
}
