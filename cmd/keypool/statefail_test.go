package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool"
)

// Issue 21: the state fails under a running keypool serve — its directory
// removed, read-only or full, Redis stopped — and the process is stopped.
// Each test runs the command as a process, with an upstream of three keys:
// a, which always answers; b, revoked from the start and benched before the
// failure; and c, revoked while the state fails and benched then. It
// checks how long the stop took and its exit status, the lines logged —
// the failure at most twice when it starts (the store's line and the
// proxy's), twice when it ends — /healthz saying degraded while it lasted,
// and what a restart finds: b's bench, written before the failure, and
// c's, written only if the store worked again before the stop.

// stateShutdown is the shutdown_timeout of the tests: the stop of a proxy
// whose store cannot save takes this long.
const stateShutdown = 800 * time.Millisecond

// stateVendor is an upstream that answers every key 200 but those the test
// revoked, which get OpenAI's 401.
type stateVendor struct {
	url     string
	mu      sync.Mutex      // guards revoked
	revoked map[string]bool // by secret
}

func newStateVendor(t *testing.T) *stateVendor {
	v := &stateVendor{revoked: map[string]bool{"sk-state-b": true}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		v.mu.Lock()
		revoked := v.revoked[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]
		v.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if revoked {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}`)
			return
		}
		_, _ = io.WriteString(w, `{"choices":[{"message":{"role":"assistant","content":"hi"}}]}`)
	}))
	t.Cleanup(srv.Close)
	v.url = srv.URL
	return v
}

func (v *stateVendor) revoke(secret string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.revoked[secret] = true
}

// stateConfig is the configuration of the state tests, with the state and
// more settings as given.
func stateConfig(v *stateVendor, state, more string) string {
	return fmt.Sprintf("%sshutdown_timeout: %v\nproxy_tokens: [%q]\noperator_tokens: [%q]\nstate: %s\nupstreams: [{name: up, url: %s, keys: [{id: a, secret: sk-state-a}, {id: b, secret: sk-state-b}, {id: c, secret: sk-state-c}]}]\n",
		more, stateShutdown, proxyToken, operatorToken, state, v.url)
}

// stateRun is keypool serve as a process under a request every 20 ms.
type stateRun struct {
	t      *testing.T
	vendor *stateVendor
	conf   string
	p      *process

	stop, stopped chan struct{} // of the load, while it runs; nil otherwise
	mu            sync.Mutex    // guards statuses
	statuses      map[int]int   // of the requests sent, by status
}

// startStateRun starts keypool serve for conf, benches b, and starts the
// load.
func startStateRun(t *testing.T, v *stateVendor, conf string) *stateRun {
	t.Helper()
	r := &stateRun{t: t, vendor: v, conf: conf, p: startServe(t, conf), statuses: map[int]int{}}
	r.waitBenched("b")
	r.startLoad()
	t.Cleanup(r.stopLoad)
	return r
}

// startLoad starts sending a request every 20 ms, one at a time.
func (r *stateRun) startLoad() {
	r.stop, r.stopped = make(chan struct{}), make(chan struct{})
	go r.load(r.stop, r.stopped)
}

func (r *stateRun) request() int {
	return send(r.t, http.MethodPost, "http://"+r.p.addr+"/v1/chat/completions", proxyToken)
}

func (r *stateRun) load(stop <-chan struct{}, stopped chan<- struct{}) {
	defer close(stopped)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		req, _ := http.NewRequest(http.MethodPost, "http://"+r.p.addr+"/v1/chat/completions", strings.NewReader(chatBody))
		req.Header.Set("Authorization", "Bearer "+proxyToken)
		status := 0 // no answer
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			status = resp.StatusCode
		}
		r.mu.Lock()
		r.statuses[status]++
		r.mu.Unlock()
	}
}

// stopLoad stops the load, if it runs, and waits for its last request.
func (r *stateRun) stopLoad() {
	if r.stop == nil {
		return
	}
	close(r.stop)
	<-r.stopped
	r.stop, r.stopped = nil, nil
}

// sent returns the load's requests by status so far, and starts counting
// afresh.
func (r *stateRun) sent() map[int]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.statuses
	r.statuses = map[int]int{}
	return s
}

// waitBenched sends requests until the log says key id is benched.
func (r *stateRun) waitBenched(id string) {
	r.t.Helper()
	require.Eventually(r.t, func() bool {
		if strings.Contains(r.p.stderr.String(), "msg=benched route=up key="+id+" ") {
			return true
		}
		r.request()
		return false
	}, 10*time.Second, 20*time.Millisecond, "key %s benched: %s", id, r.p.stderr.String())
}

func (r *stateRun) healthz() string {
	r.t.Helper()
	_, body := get(r.t, "http://"+r.p.addr+"/healthz", nil, nil)
	return body
}

// waitHealthz waits until /healthz says degraded (or ok), and returns how
// long that took.
func (r *stateRun) waitHealthz(degraded bool) time.Duration {
	r.t.Helper()
	start := time.Now()
	require.Eventually(r.t, func() bool {
		return strings.HasPrefix(r.healthz(), "degraded: state store: ") == degraded
	}, 10*time.Second, 10*time.Millisecond, "/healthz degraded=%t: %s", degraded, r.p.stderr.String())
	return time.Since(start)
}

// waitLogged waits until the process has logged a line of msg.
func (r *stateRun) waitLogged(msg string) {
	r.t.Helper()
	require.Eventually(r.t, func() bool { return strings.Contains(r.p.stderr.String(), ` msg="`+msg+`"`) },
		10*time.Second, 10*time.Millisecond, "%s logged: %s", msg, r.p.stderr.String())
}

// duringTheFailure waits until the proxy has logged the failure, revokes c
// and waits until the proxy benches it — the load paused, so that one
// request meets c's 401 — while /healthz keeps saying degraded; the load is
// served as served says (http.StatusOK from memory, or refused).
func (r *stateRun) duringTheFailure(served int) {
	r.t.Helper()
	r.waitLogged("state store failing") // the watcher asks the store once a second
	r.stopLoad()
	r.sent()
	r.vendor.revoke("sk-state-c")
	r.waitBenched("c")
	r.startLoad()
	time.Sleep(200 * time.Millisecond)
	for range 3 {
		assert.Regexp(r.t, `^degraded: state store: .+\n$`, r.healthz(), "degraded while it lasts")
	}
	sent := r.sent()
	assert.Positive(r.t, sent[served], "the load during the failure: %v", sent)
	delete(sent, served)
	assert.Empty(r.t, sent, "every request of the load %d", served)
}

// term stops the load, sends SIGTERM and returns the exit status and how
// long the stop took.
func (r *stateRun) term(limit time.Duration) (int, time.Duration) {
	r.t.Helper()
	r.stopLoad()
	sent := time.Now()
	r.p.signal(r.t, syscall.SIGTERM)
	status := r.p.wait(r.t, sent, limit)
	r.t.Logf("exit status %d, %v after SIGTERM", status, r.p.took.Round(time.Millisecond))
	return status, r.p.took
}

// termWhileFailing stops the process while its state directory fails, and
// checks that the stop took shutdown_timeout, as long as the store had to
// save, and no longer, and said what was not saved, with exit status 1;
// and that the failure was logged twice.
func (r *stateRun) termWhileFailing(state string) {
	r.t.Helper()
	status, took := r.term(stateShutdown + 3*time.Second)
	assert.Equal(r.t, 1, status, "what was not saved makes the exit status 1")
	assert.GreaterOrEqual(r.t, took, stateShutdown-100*time.Millisecond, "the store had shutdown_timeout to save")
	assert.Less(r.t, took, stateShutdown+time.Second, "and not longer")
	assert.Equal(r.t, sorted([]string{"starting", "serving", "benched b", "benched c", notSaved(state)}, badgerFailing), r.logged(),
		"the failure logged twice when it started, and the stop's line: %s", r.p.stderr.String())
}

// logged returns what the process logged, a message (or, for a line that
// is not slog's, the line) a line, less the requests, sorted.
func (r *stateRun) logged() []string {
	var out []string
	msg := regexp.MustCompile(`^time=\S+ level=\S+ msg=("(?:[^"\\]|\\.)*"|\S+)`)
	for _, l := range lines(r.p.stderr.String()) {
		m := msg.FindStringSubmatch(l)
		switch {
		case m == nil:
			out = append(out, l)
		case m[1] != "request":
			out = append(out, strings.Trim(m[1], `"`)+lineKey(l))
		}
	}
	slices.Sort(out)
	return out
}

// lineKey is the key a benched line names: " b".
func lineKey(l string) string {
	if m := regexp.MustCompile(` msg=benched route=\S+ key=(\S+)`).FindStringSubmatch(l); m != nil {
		return " " + m[1]
	}
	return ""
}

// restartFinds starts keypool serve again for conf, and returns the state
// of each key on its /status; it stops it again.
func restartFinds(t *testing.T, conf string) map[string]string {
	t.Helper()
	p := startServe(t, conf)
	status, body := get(t, "http://"+p.addr+"/status", nil, http.Header{"Authorization": {"Bearer " + operatorToken}})
	require.Equal(t, http.StatusOK, status, body)
	var report statusReport
	require.NoError(t, json.Unmarshal([]byte(body), &report))
	found := map[string]string{}
	for _, k := range report.Routes[0].Keys {
		found[k.ID] = k.State
	}
	sent := time.Now()
	p.signal(t, syscall.SIGTERM)
	assert.Equal(t, 0, p.wait(t, sent, 5*time.Second), "the restarted proxy stops cleanly: %s", p.stderr.String())
	return found
}

// The lines of a failure's start and end: the store's and the proxy's.
var (
	badgerFailing = []string{"keypool: badger store failing; serving from memory until it writes again", "state store failing"}
	badgerWorking = []string{"keypool: badger store writing again", "state store working again"}
)

// sorted returns the lines, sorted.
func sorted(lines ...[]string) []string {
	out := slices.Concat(lines...)
	slices.Sort(out)
	return out
}

// notSaved is the line of a stop whose store could not save in time.
func notSaved(state string) string {
	return fmt.Sprintf("keypool serve: shutdown_timeout (%v) passed: not saved: the state store %s (not closed)", stateShutdown, state)
}

func TestServeProcessStateDirectoryRemovedThenSIGTERM(t *testing.T) {
	t.Parallel() // it waits in real time: on a process, a server or a bench
	v := newStateVendor(t)
	state := filepath.Join(t.TempDir(), "state")
	conf := stateConfig(v, state, "")
	r := startStateRun(t, v, conf)
	require.NoError(t, os.RemoveAll(state))
	t.Logf("/healthz degraded %v after the directory was removed", r.waitHealthz(true).Round(time.Millisecond))
	r.duringTheFailure(http.StatusOK) // served from memory
	r.termWhileFailing(state)
	assert.Equal(t, map[string]string{"a": "serving", "b": "serving", "c": "serving"}, restartFinds(t, conf),
		"a restart starts afresh: the state went with its directory")
	assert.DirExists(t, state, "made again")
}

func TestServeProcessSecondSignalWhileTheStateFails(t *testing.T) {
	t.Parallel() // it waits in real time: on a process, a server or a bench
	v := newStateVendor(t)
	state := filepath.Join(t.TempDir(), "state")
	conf := stateConfig(v, state, "")
	conf = strings.Replace(conf, fmt.Sprintf("shutdown_timeout: %v", stateShutdown), "shutdown_timeout: 1m", 1)
	r := startStateRun(t, v, conf)
	require.NoError(t, os.RemoveAll(state))
	r.waitHealthz(true)
	r.duringTheFailure(http.StatusOK)
	r.stopLoad()
	r.p.signal(t, syscall.SIGTERM)
	time.Sleep(300 * time.Millisecond) // the shutdown waits for the store, which cannot save
	select {
	case <-r.p.done:
		t.Fatalf("keypool serve stopped at the first signal: %s", r.p.stderr.String())
	default:
	}
	sent := time.Now()
	r.p.signal(t, syscall.SIGTERM)
	status := r.p.wait(t, sent, 5*time.Second)
	t.Logf("exit status %d, %v after the second SIGTERM", status, r.p.took.Round(time.Millisecond))
	assert.Equal(t, exitInterrupted, status)
	assert.Less(t, r.p.took, time.Second, "the second signal exits at once")
	assert.Equal(t, sorted([]string{"starting", "serving", "benched b", "benched c", "keypool: a second signal: exiting at once, without finishing the shutdown"}, badgerFailing), r.logged(),
		"the failure logged twice, the exit once: %s", r.p.stderr.String())
	assert.Equal(t, map[string]string{"a": "serving", "b": "serving", "c": "serving"}, restartFinds(t, conf),
		"a restart starts afresh: the state went with its directory")
}

// redisServer is a redis-server process on a port of its own, keeping its
// database in dir when told to save.
type redisServer struct {
	port int
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
}

// startRedis starts a redis-server on a free loopback port, or on port
// when it is not 0, with its files in dir and args after its own; the
// test's end stops it. It skips the test when there is no redis-server.
func startRedis(t *testing.T, port int, dir string, args ...string) *redisServer {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("no redis-server on PATH, and CI runs the Redis state tests: install redis-server (.ci/run does)")
		}
		t.Skip("no redis-server on PATH: install redis-server (Debian: apt-get install redis-server) to run keypool serve against a Redis that stops")
	}
	if port == 0 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		port = ln.Addr().(*net.TCPAddr).Port
		require.NoError(t, ln.Close())
	}
	rs := &redisServer{port: port, dir: dir, done: make(chan struct{})}
	rs.cmd = exec.Command(path, "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--dbfilename", "dump.rdb", "--maxmemory-policy", "noeviction", "--loglevel", "warning")
	rs.cmd.Args = append(rs.cmd.Args, args...)
	require.NoError(t, rs.cmd.Start())
	go func() {
		_ = rs.cmd.Wait()
		close(rs.done)
	}()
	t.Cleanup(func() {
		_ = rs.cmd.Process.Kill()
		<-rs.done
	})
	require.Eventually(t, func() bool { return rs.call("PING") == "+PONG" }, 10*time.Second, 20*time.Millisecond, "redis-server did not start")
	return rs
}

func (rs *redisServer) addr() string { return fmt.Sprintf("127.0.0.1:%d", rs.port) }

// call sends a command of one word to the server, and returns the first
// line of its answer, or "" when there is none.
func (rs *redisServer) call(words ...string) string {
	c, err := net.DialTimeout("tcp", rs.addr(), time.Second)
	if err != nil {
		return ""
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "*%d\r\n", len(words))
	for _, w := range words {
		fmt.Fprintf(c, "$%d\r\n%s\r\n", len(w), w)
	}
	line, _ := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line)
}

// stop saves the database to its directory and stops the server, as an
// operator's redis-cli shutdown save does.
func (rs *redisServer) stop(t *testing.T) {
	t.Helper()
	rs.call("SHUTDOWN", "SAVE")
	select {
	case <-rs.done:
	case <-time.After(10 * time.Second):
		t.Fatal("redis-server did not stop")
	}
	require.FileExists(t, filepath.Join(rs.dir, "dump.rdb"))
}

func TestServeProcessRedisStoppedThenSIGTERM(t *testing.T) {
	t.Parallel() // it waits in real time: on a process, a server or a bench
	tests := []struct {
		name     string
		replicas int
		served   int      // the answer to the load while Redis is down
		logged   []string // beyond the failure's and the stop's
	}{
		{"refusing requests", 0, http.StatusServiceUnavailable, []string{"benched b"}},
		// On local windows, the pool knows no bench Redis held: b meets
		// one more 401 and is benched again, locally.
		{"on local windows", 1, http.StatusOK, []string{"benched b", "benched b", "benched c"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			rs := startRedis(t, 0, dir)
			v := newStateVendor(t)
			state := "redis://" + rs.addr() + "/0"
			conf := stateConfig(v, state, fmt.Sprintf("replicas: %d\n", tt.replicas))
			r := startStateRun(t, v, conf)
			rs.stop(t)
			t.Logf("/healthz degraded %v after Redis stopped", r.waitHealthz(true).Round(time.Millisecond))
			if tt.replicas > 0 {
				r.duringTheFailure(tt.served)
			} else {
				r.waitLogged("state store failing")
				r.sent()
				time.Sleep(300 * time.Millisecond)
				for range 3 {
					assert.Regexp(t, `^degraded: state store: redisstore: redis unavailable: .+\n$`, r.healthz())
				}
				assert.Equal(t, http.StatusServiceUnavailable, r.request(), "refused while Redis is down")
				sent := r.sent()
				assert.Positive(t, sent[http.StatusServiceUnavailable], "%v", sent)
				delete(sent, http.StatusServiceUnavailable)
				assert.Empty(t, sent, "every request refused")
			}
			status, took := r.term(5 * time.Second)
			assert.Equal(t, 1, status, "the state not saved makes the exit status 1")
			assert.Less(t, took, time.Second, "nothing to wait for: Redis is out of reach")
			stopLine := regexp.MustCompile(`^keypool serve: state not saved: the state store redis://127\.0\.0\.1:\d+/0 \(out of reach: what changed since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ is not saved\)$`)
			var stops int
			got := slices.DeleteFunc(r.logged(), func(l string) bool {
				if stopLine.MatchString(l) {
					stops++
					return true
				}
				return false
			})
			assert.Equal(t, 1, stops, "the stop says what is not saved: %s", r.p.stderr.String())
			assert.Equal(t, sorted([]string{"starting", "serving", "redisstore: redis unavailable", "state store failing"}, tt.logged), got,
				"the failure logged twice, not once a request: %s", r.p.stderr.String())

			startRedis(t, rs.port, dir) // again, from the database it saved
			assert.Equal(t, map[string]string{"a": "serving", "b": "benched", "c": "serving"}, restartFinds(t, conf),
				"a restart finds b's bench, which Redis kept; c's, set on local windows while Redis was down, is lost")
		})
	}
}

// blockedClose is a store whose Close never ends until released.
type blockedClose struct {
	*stuckStore
	closing chan struct{}
}

func (s *blockedClose) Close() error {
	<-s.closing
	return nil
}

func TestServeStopNamesARedisStateWithoutItsPassword(t *testing.T) {
	conf := "shutdown_timeout: 600ms\nproxy_tokens: [t]\nstate: redis://:hunter2@127.0.0.1:1/0\nupstreams: [{url: 'http://127.0.0.1:1', keys: [{secret: s}]}]\n"
	t.Run("a close that does not end", func(t *testing.T) {
		store := &blockedClose{stuckStore: &stuckStore{Store: keypool.NewMemoryStore(), release: make(chan struct{})}, closing: make(chan struct{})}
		close(store.release)
		defer close(store.closing)
		_, stop := serveWithStore(t, conf, store)
		_, err := stop()
		require.Error(t, err)
		assert.Equal(t, "shutdown_timeout (600ms) passed: not saved: the state store redis://:xxxxx@127.0.0.1:1/0 (not closed)", err.Error())
	})
	t.Run("Redis out of reach", func(t *testing.T) {
		store := &stuckStore{Store: keypool.NewMemoryStore(), release: make(chan struct{})}
		close(store.release)
		store.fail(errors.New("redisstore: redis unavailable: dial tcp redis://:hunter2@127.0.0.1:1: connection refused"))
		_, stop := serveWithStore(t, conf, store)
		_, err := stop()
		require.Error(t, err)
		assert.Regexp(t, `^state not saved: the state store redis://:xxxxx@127\.0\.0\.1:1/0 \(out of reach: what changed since \S+ is not saved\)$`, err.Error())
		assert.NotContains(t, err.Error(), "hunter2")
	})
}
