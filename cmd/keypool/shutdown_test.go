package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/keypool-go/keypool"
	"github.com/keypool-go/keypool/internal/notify"
)

// binDir holds the keypool command built for the tests that run it as a
// process; TestMain removes it.
var binDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// keypoolBinary builds the command once, for the tests that need it, with
// VCS stamping whatever GOFLAGS says, as TestVersionOfBuild reads it (go
// build stamps nothing in a git worktree, and does not fail there).
func keypoolBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the command")
	}
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "keypool-test-")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "keypool")
		out, err := exec.Command("go", "build", "-buildvcs=true", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	require.NoError(t, buildErr)
	return binPath
}

// process is keypool serve running as a process of its own.
type process struct {
	cmd    *exec.Cmd
	addr   string
	stderr *syncBuffer
	done   chan struct{} // closed when it has exited
	took   time.Duration // from the signal to the exit, once done
}

// startServe starts keypool serve with the configuration conf (whose
// listen is set here) and waits until it serves.
func startServe(t *testing.T, conf string) *process {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keypool.yaml")
	require.NoError(t, os.WriteFile(path, []byte("listen: 127.0.0.1:0\n"+conf), 0o600))
	return startCommand(t, exec.Command(keypoolBinary(t), "serve", "-config", path))
}

// startCommand starts cmd, keypool serve, and waits until it serves.
func startCommand(t *testing.T, cmd *exec.Cmd) *process {
	t.Helper()
	p := &process{cmd: cmd, stderr: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Stderr = p.stderr
	require.NoError(t, p.cmd.Start())
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	require.Eventually(t, func() bool {
		// " addr=", not "addr=": the starting line names the state, and a
		// Cluster URL's addr parameters.
		_, rest, ok := strings.Cut(p.stderr.String(), " addr=")
		p.addr, _, _ = strings.Cut(rest, " ")
		return ok
	}, 20*time.Second, 10*time.Millisecond, "keypool serve did not start: %s", p.stderr.String())
	return p
}

// signal sends sig to the process.
func (p *process) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(sig))
}

// wait waits up to limit for the process to exit after a signal sent at
// sent, and returns its exit status.
func (p *process) wait(t *testing.T, sent time.Time, limit time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		p.took = time.Since(sent)
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(limit):
		t.Fatalf("keypool serve still runs %v after the signal: %s", limit, p.stderr.String())
		return -1
	}
}

// holdingUpstream is an upstream whose streams send one event, then hold
// until released; started tells of each stream begun.
func holdingUpstream(t *testing.T) (url string, started <-chan struct{}, release func()) {
	begun := make(chan struct{}, 100)
	hold := make(chan struct{})
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"n\":1}\n\n")
		w.(http.Flusher).Flush()
		begun <- struct{}{}
		select {
		case <-hold:
		case <-r.Context().Done():
		}
	}))
	var once sync.Once
	release = func() { once.Do(func() { close(hold) }) }
	t.Cleanup(func() {
		release()
		upstream.Close()
	})
	return upstream.URL, begun, release
}

// openStream starts a stream through the proxy at addr and returns its
// body once the first event has arrived.
func openStream(t *testing.T, addr string) io.ReadCloser {
	t.Helper()
	resp, err := chat(t, "http://"+addr, true)
	require.NoError(t, err)
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "data: {\"n\":1}\n", line)
	t.Cleanup(func() { resp.Body.Close() })
	return resp.Body
}

func TestServeProcessStopsOnSignal(t *testing.T) {
	up, started, _ := holdingUpstream(t)
	tests := []struct {
		name   string
		stream bool // a stream is in flight, which never ends by itself
		limit  time.Duration
	}{
		{"idle", false, 1500 * time.Millisecond},
		{"a stream in flight", true, 3 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			state := t.TempDir()
			p := startServe(t, "shutdown_timeout: 1500ms\n"+fmt.Sprintf("proxy_tokens: [%q]\nstate: %s\nupstreams: [{url: %s, keys: [{id: a, secret: sk-a}]}]\n", proxyToken, state, up))
			var body io.ReadCloser
			if tt.stream {
				body = openStream(t, p.addr)
				<-started
			}
			sent := time.Now()
			p.signal(t, syscall.SIGTERM)
			status := p.wait(t, sent, tt.limit+2*time.Second)
			t.Logf("exit status %d, %v after SIGTERM", status, p.took.Round(time.Millisecond))
			assert.Equal(t, 0, status, "the state was saved: %s", p.stderr.String())
			assert.Less(t, p.took, tt.limit, "stopped within shutdown_timeout")
			assert.Contains(t, p.stderr.String(), "stopped")
			if tt.stream {
				_, err := io.ReadAll(body)
				assert.Error(t, err, "the stream was cut, not ended")
				assert.GreaterOrEqual(t, p.took, time.Second, "the stream had two thirds of shutdown_timeout to end")
			}
			var out strings.Builder
			require.NoError(t, printState(t.Context(), &out, state, true, 0), "the state directory is free again")
		})
	}
}

func TestServeProcessExitsAtASecondSignal(t *testing.T) {
	up, started, _ := holdingUpstream(t)
	p := startServe(t, "shutdown_timeout: 1m\n"+fmt.Sprintf("proxy_tokens: [%q]\nstate: %s\nupstreams: [{url: %s, keys: [{secret: sk-a}]}]\n", proxyToken, t.TempDir(), up))
	openStream(t, p.addr)
	<-started
	p.signal(t, syscall.SIGINT)
	time.Sleep(200 * time.Millisecond) // the shutdown waits for the stream
	select {
	case <-p.done:
		t.Fatalf("keypool serve stopped at the first signal: %s", p.stderr.String())
	default:
	}
	sent := time.Now()
	p.signal(t, syscall.SIGINT)
	status := p.wait(t, sent, 5*time.Second)
	t.Logf("exit status %d, %v after the second SIGINT", status, p.took.Round(time.Millisecond))
	assert.Equal(t, exitInterrupted, status)
	assert.Less(t, p.took, time.Second, "the second signal exits at once")
	assert.Contains(t, p.stderr.String(), "keypool: a second signal: exiting at once")
}

// stuckStore is a store whose flushes never end until released, and whose
// health is what it is told.
type stuckStore struct {
	keypool.Store
	release chan struct{}
	mu      sync.Mutex
	health  error
	watch   notify.Listeners
}

// NotifyHealth implements keypool.HealthNotifier: fail tells of a change.
func (s *stuckStore) NotifyHealth(f func()) func() { return s.watch.Add(f) }

func (s *stuckStore) Flush(ctx context.Context) error {
	<-s.release
	return nil
}

func (s *stuckStore) Health() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.health
}

func (s *stuckStore) Close() error { return nil }

// serveWithStore runs the proxy for conf over store, as serve does, and
// returns its address and a function that stops it and returns how long
// the stop took, with what serve returned.
func serveWithStore(t *testing.T, conf string, store interface {
	keypool.Store
	io.Closer
}) (addr string, stop func() (time.Duration, error)) {
	t.Helper()
	var c config
	require.NoError(t, yaml.Unmarshal([]byte(conf), &c))
	s, err := c.resolve(func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	srv, err := newServerWith(s, slog.New(slog.NewTextHandler(io.Discard, nil)), store, store)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.serve(ctx, ln) }()
	stop = func() (time.Duration, error) {
		start := time.Now()
		cancel()
		select {
		case err := <-done:
			return time.Since(start), err
		case <-time.After(10 * time.Second):
			t.Fatal("serve did not return")
			return 0, nil
		}
	}
	return ln.Addr().String(), stop
}

func TestServeNamesStateNotSavedInTime(t *testing.T) {
	store := &stuckStore{Store: keypool.NewMemoryStore(), release: make(chan struct{})}
	defer close(store.release)
	_, stop := serveWithStore(t, "shutdown_timeout: 600ms\nproxy_tokens: [t]\nupstreams: [{name: groq, url: 'http://127.0.0.1:1', keys: [{secret: s}]}, {name: openai, url: 'http://127.0.0.1:1', keys: [{secret: s2}]}]\n", store)
	took, err := stop()
	t.Logf("%v after the signal: %v", took.Round(time.Millisecond), err)
	require.Error(t, err)
	assert.Equal(t, "shutdown_timeout (600ms) passed: not saved: the windows and benches of groq, openai", err.Error())
	assert.Less(t, took, time.Second, "stopped within shutdown_timeout")
	assert.GreaterOrEqual(t, took, 500*time.Millisecond)

}

func TestHealthzSaysDegraded(t *testing.T) {
	store := &stuckStore{Store: keypool.NewMemoryStore(), release: make(chan struct{})}
	close(store.release)
	addr, stop := serveWithStore(t, "proxy_tokens: [t]\nstate: redis://:hunter2@127.0.0.1:1/0\nupstreams: [{url: 'http://127.0.0.1:1', keys: [{secret: sk-health}]}]\n", store)
	defer stop()
	get := func() (int, string) {
		resp, err := http.Get("http://" + addr + "/healthz")
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	status, body := get()
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, "ok\n", body)

	store.mu.Lock()
	store.health = errors.New("redis unavailable: dial tcp redis://:hunter2@127.0.0.1:1: connection refused\nsk-health")
	store.mu.Unlock()
	status, body = get()
	assert.Equal(t, http.StatusOK, status, "a load balancer still sees it alive")
	assert.True(t, strings.HasPrefix(body, "degraded: state store: redis unavailable: "), "%q", body)
	assert.Equal(t, 1, strings.Count(body, "\n"), "one line: %q", body)
	assert.NotContains(t, body, "hunter2", "no password")
	assert.NotContains(t, body, "sk-health", "no key")
}

func TestServeProcessAnswersThroughAConnectionFlood(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh to lower the file limit with")
	}
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "{}") }))
	t.Cleanup(upstream.Close)
	path := filepath.Join(t.TempDir(), "keypool.yaml")
	require.NoError(t, os.WriteFile(path, fmt.Appendf(nil, "listen: 127.0.0.1:0\nheader_timeout: 500ms\nproxy_tokens: [%q]\nstate: %s\nupstreams: [{url: %s, keys: [{secret: sk-a}]}]\n",
		proxyToken, t.TempDir(), upstream.URL), 0o600))
	// 256 file descriptors, as a small container has, and a flood of
	// connections that never send a request.
	p := startCommand(t, exec.Command("sh", "-c", `ulimit -n 256 && exec "$0" serve -config "$1"`, keypoolBinary(t), path))
	var flood []net.Conn
	for range 600 {
		c, err := net.Dial("tcp", p.addr)
		require.NoError(t, err)
		flood = append(flood, c)
	}
	t.Cleanup(func() {
		for _, c := range flood {
			c.Close()
		}
	})
	start := time.Now()
	client := &http.Client{Timeout: 15 * time.Second}
	req, _ := http.NewRequest(http.MethodGet, "http://"+p.addr+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer "+proxyToken)
	resp, err := client.Do(req)
	require.NoError(t, err, "an authenticated request behind 600 idle connections gets an answer")
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	t.Logf("answered after %v", time.Since(start).Round(time.Millisecond))
}

// floodHeaders opens n connections to addr, each sending the headers of
// one request, a line of 4 KiB after another, up to size bytes, without
// the blank line that would end them, as a client that means to hold the
// proxy's memory does. It returns once each has sent its share or been
// cut off, with the connections still open, which the test closes, and
// how many the proxy cut off.
func floodHeaders(t testing.TB, addr string, n, size int) (open []net.Conn, cut int) {
	t.Helper()
	line := "X-Flood: " + strings.Repeat("a", 4<<10) + "\r\n"
	var mu sync.Mutex
	var cutOff atomic.Int64
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			c, err := net.Dial("tcp", addr)
			if !assert.NoError(t, err) {
				return
			}
			// A small send buffer: a write ends only once the proxy has read
			// all but what its receive buffer holds.
			_ = c.(*net.TCPConn).SetWriteBuffer(8 << 10)
			_ = c.SetWriteDeadline(time.Now().Add(30 * time.Second))
			w := bufio.NewWriterSize(c, 64<<10)
			_, err = w.WriteString("POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\n")
			for sent := 0; err == nil && sent < size; sent += len(line) {
				_, err = w.WriteString(line)
			}
			if err == nil {
				err = w.Flush()
			}
			if err != nil {
				cutOff.Add(1)
				c.Close()
				return
			}
			mu.Lock()
			open = append(open, c)
			mu.Unlock()
		})
	}
	wg.Wait()
	return open, int(cutOff.Load())
}

// procStatus returns a figure of /proc/PID/status in KiB: VmRSS, the
// memory a process holds now, or VmHWM, the most it has held.
func procStatus(t testing.TB, pid int, field string) int {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if errors.Is(err, fs.ErrNotExist) {
		t.Skip("no /proc to read a process's memory from")
	}
	require.NoError(t, err)
	for line := range bytes.Lines(data) {
		if v, ok := bytes.CutPrefix(line, []byte(field+":")); ok {
			kib, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(string(v)), " kB"))
			require.NoError(t, err)
			return kib
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// envInt returns the whole number in the environment variable name, or
// def when it is not set.
func envInt(t testing.TB, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, name)
	return n
}

// Connections that send headers and never end them hold what the proxy
// has read of them until header_timeout. The proxy, with its defaults,
// reads at most max_header_bytes of a request's headers — a client that
// sends more gets 431 and is cut off — and holds at most
// max_pending_conns connections whose first request's headers are not all
// in (TestProxyBoundsPendingConnections): what a flood makes it hold is
// bounded by their product, whatever the number of connections.
//
// KEYPOOL_FLOOD_CONNS sets the number of connections (default 300; 2000
// is the measured attack) and KEYPOOL_FLOOD_BINARY another build of
// keypool to flood, for a figure of before.
func TestServeProcessHoldsLittleUnderAHeaderFlood(t *testing.T) {
	n := envInt(t, "KEYPOOL_FLOOD_CONNS", 300)
	bin := os.Getenv("KEYPOOL_FLOOD_BINARY")
	if bin == "" {
		bin = keypoolBinary(t)
	}
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "{}") }))
	t.Cleanup(upstream.Close)
	path := filepath.Join(t.TempDir(), "keypool.yaml")
	// header_timeout outlasts the flood, so that nothing but the bounds
	// lets go of a connection.
	require.NoError(t, os.WriteFile(path, fmt.Appendf(nil, "listen: 127.0.0.1:0\nheader_timeout: 1m\nproxy_tokens: [%q]\nstate: %s\nupstreams: [{url: %s, keys: [{secret: sk-a}]}]\n",
		proxyToken, t.TempDir(), upstream.URL), 0o600))
	p := startCommand(t, exec.Command("sh", "-c", `ulimit -n 8192 && exec "$0" serve -config "$1"`, bin, path))
	pid := p.cmd.Process.Pid
	before := procStatus(t, pid, "VmRSS")
	start := time.Now()
	open, cut := floodHeaders(t, p.addr, n, 1<<20)
	t.Cleanup(func() {
		for _, c := range open {
			c.Close()
		}
	})
	peak := procStatus(t, pid, "VmHWM")
	t.Logf("%d connections sending 1 MiB of headers each, in %v: %d cut off while sending; memory %d MiB before, at most %d MiB during the flood",
		n, time.Since(start).Round(time.Millisecond), cut, before>>10, peak>>10)

	client := &http.Client{Timeout: 10 * time.Second}
	req, err := http.NewRequest(http.MethodGet, "http://"+p.addr+"/v1/models", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+proxyToken)
	resp, err := client.Do(req)
	require.NoError(t, err, "a client with the token is answered after the flood")
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	// What each connection may hold, three times over: read, copied into
	// the header, and garbage not yet collected.
	bound := 3*min(n, defaultMaxPendingConns)*(defaultMaxHeaderBytes+4<<10) + 32<<20
	assert.Less(t, (peak-before)<<10, bound, "the flood made the proxy hold more than %d MiB", bound>>20)
}

func TestServeShutdownClosesConnectionsThatSentNothing(t *testing.T) {
	store := &stuckStore{Store: keypool.NewMemoryStore(), release: make(chan struct{})}
	close(store.release)
	addr, stop := serveWithStore(t, "shutdown_timeout: 3s\nproxy_tokens: [t]\nupstreams: [{url: 'http://127.0.0.1:1', keys: [{secret: s}]}]\n", store)
	conn, err := net.Dial("tcp", addr) // dialed ahead, as Go's transport does, and never used
	require.NoError(t, err)
	defer conn.Close()
	time.Sleep(100 * time.Millisecond) // accepted, and in http.StateNew
	took, err := stop()
	t.Logf("%v after the signal", took.Round(time.Millisecond))
	require.NoError(t, err)
	assert.Less(t, took, time.Second, "not held for the drain's two seconds by a connection with no request on it")
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(time.Second)))
	_, err = conn.Read(make([]byte, 1))
	assert.ErrorIs(t, err, io.EOF, "the connection was closed")
}
