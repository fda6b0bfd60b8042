package keypool

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// childEnv names the environment variable that makes this test binary act as
// a child process of a test: its value is "mode dir".
const childEnv = "KEYPOOL_TEST_CHILD"

// startChild runs the test binary again as a child in mode over dir.
func startChild(t *testing.T, mode, dir string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildProcess$", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+mode+" "+dir)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, bufio.NewScanner(out)
}

// TestChildProcess is the body of the child processes of other tests.
func TestChildProcess(t *testing.T) {
	mode, dir, ok := strings.Cut(os.Getenv(childEnv), " ")
	if !ok {
		t.Skip("runs only as a child process of another test")
	}
	switch mode {
	case "crash":
		crashChild(t, dir)
	case "footprint":
		footprintChild(t, dir)
	case "hold":
		s, err := OpenBadgerStore(dir)
		require.NoError(t, err)
		fmt.Println("holding")
		time.Sleep(time.Minute)
		_ = s.Close()
	}
}

// crashChild drives a pool on a Badger store until it is killed, saying how
// many requests it has taken, and when.
func crashChild(t *testing.T, dir string) {
	s, err := OpenBadgerStore(dir, WithFlushInterval(100*time.Millisecond))
	require.NoError(t, err)
	p, err := New("crash", []Key{{Secret: "sk-1", ID: "k1"}, {Secret: "sk-2", ID: "k2"}},
		WithStore(s), WithLimits(Limits{RPM: 1 << 40, RPD: 1 << 40}))
	require.NoError(t, err)
	for range 2 { // k1, then k2, which is revoked
		require.NoError(t, p.Do(context.Background(), "m", func(_ context.Context, k Key) error {
			if k.ID == "k2" {
				return &ProviderError{Kind: KindAuth, Status: 401}
			}
			return nil
		}))
	}
	taken := 3
	last := time.Now()
	for {
		require.NoError(t, p.Do(context.Background(), "m", func(context.Context, Key) error { return nil }))
		taken++
		if taken%100 == 0 {
			time.Sleep(time.Millisecond) // a busy service, not a spin
		}
		if time.Since(last) > 20*time.Millisecond {
			last = time.Now()
			fmt.Printf("taken %d %d\n", taken, last.UnixNano())
		}
	}
}

func TestBadgerStoreSurvivesKill(t *testing.T) {
	dir := t.TempDir()
	cmd, lines := startChild(t, "crash", dir)
	type mark struct {
		taken int64
		at    time.Time
	}
	var marks []mark
	start := time.Now()
	for lines.Scan() {
		f := strings.Fields(lines.Text())
		if len(f) != 3 || f[0] != "taken" {
			continue
		}
		n, _ := strconv.ParseInt(f[1], 10, 64)
		ns, _ := strconv.ParseInt(f[2], 10, 64)
		marks = append(marks, mark{n, time.Unix(0, ns)})
		if time.Since(start) > 1500*time.Millisecond {
			break
		}
	}
	require.NotEmpty(t, marks, "the child said nothing")
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	killed := time.Now()
	_ = cmd.Wait()

	// Everything taken more than a flush interval (and a margin) before the
	// kill is on disk.
	var want int64
	for _, m := range marks {
		if m.at.Before(killed.Add(-300 * time.Millisecond)) {
			want = m.taken
		}
	}
	require.Positive(t, want)
	s, err := OpenBadgerStore(dir)
	require.NoError(t, err, "the store opens cleanly after a kill")
	defer s.Close()
	st, err := s.State(t.Context(), "crash", "k2", time.Now())
	require.NoError(t, err)
	assert.Equal(t, KindAuth, st.Bench.Kind, "the bench written before the kill")
	st, err = s.State(t.Context(), "crash", "k1", time.Now())
	require.NoError(t, err)
	require.Len(t, st.Models, 1)
	assert.GreaterOrEqual(t, st.Models[0].Usage.DayRequests, want,
		"requests taken before the last flush before the kill")
	t.Logf("child took at least %d requests up to %v before the kill; the store holds %d",
		want, 300*time.Millisecond, st.Models[0].Usage.DayRequests)
}

// rss returns the process's resident memory in bytes.
func rss(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/status")
	require.NoError(t, err)
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			require.NoError(t, err)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// footprintChild sends 10,000 requests through a pool on a Badger store and
// says how much its resident memory grew.
func footprintChild(t *testing.T, dir string) {
	before := rss(t)
	s, err := OpenBadgerStore(dir, WithFlushInterval(10*time.Millisecond))
	require.NoError(t, err)
	keys := make([]Key, 20)
	for i := range keys {
		keys[i] = Key{Secret: fmt.Sprintf("sk-%d", i)}
	}
	p, err := New("footprint", keys, WithStore(s), WithLimits(Limits{RPM: 1 << 40, RPD: 1 << 40, TPM: 1 << 50, TPD: 1 << 50}))
	require.NoError(t, err)
	rt := p.Transport(roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.Body != nil {
			_, _ = io.Copy(io.Discard, r.Body)
			r.Body.Close()
		}
		return &http.Response{StatusCode: 200, Header: http.Header{"X-Ratelimit-Remaining-Requests": {"99"}},
			Body: io.NopCloser(strings.NewReader(`{"usage":{"total_tokens":42}}`)), Request: r}, nil
	}))
	for i := range 10_000 {
		body := fmt.Sprintf(`{"model":"m%d","max_tokens":100,"messages":[{"role":"user","content":"hello"}]}`, i%10)
		req, _ := http.NewRequest(http.MethodPost, "http://vendor.test/v1/chat/completions", strings.NewReader(body))
		resp, err := rt.RoundTrip(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	require.NoError(t, p.Close())
	fmt.Printf("grew %d\n", rss(t)-before)
	require.NoError(t, s.Close())
}

func TestBadgerStoreFootprint(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's shadow memory swamps the figure; CI runs this test without it")
	}
	cmd, lines := startChild(t, "footprint", t.TempDir())
	var grew int64 = -1
	for lines.Scan() {
		if v, ok := strings.CutPrefix(lines.Text(), "grew "); ok {
			grew, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	require.NoError(t, cmd.Wait())
	require.NotEqual(t, int64(-1), grew, "the child did not report")
	assert.LessOrEqual(t, grew, int64(32<<20), "resident memory growth over 10,000 requests")
	t.Logf("resident memory grew by %.1f MiB over 10,000 requests", float64(grew)/(1<<20))
}

func TestBadgerStoreLocked(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenBadgerStore(dir)
	require.NoError(t, err)
	defer s.Close()
	_, err = OpenBadgerStore(dir)
	require.ErrorIs(t, err, ErrStoreLocked, "the same process opening it again")
	assert.Contains(t, err.Error(), dir)

	other := t.TempDir()
	_, lines := startChild(t, "hold", other)
	for lines.Scan() && lines.Text() != "holding" {
	}
	require.Equal(t, "holding", lines.Text(), "the child did not open the store")
	_, err = OpenBadgerStore(other)
	require.ErrorIs(t, err, ErrStoreLocked, "another process holds it")
	assert.Contains(t, err.Error(), other)
}

func TestBadgerStoreBadDirectory(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o600))
	corrupt := t.TempDir()
	for _, name := range []string{"MANIFEST", "000001.vlog", "000001.sst", "KEYREGISTRY"} {
		require.NoError(t, os.WriteFile(filepath.Join(corrupt, name), bytes.Repeat([]byte{0xde, 0xad}, 4096), 0o600))
	}
	tests := []struct{ name, dir string }{
		{"under a file", filepath.Join(file, "state")},
		{"not a Badger database", corrupt},
		{"empty name", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := OpenBadgerStore(tt.dir)
			require.Error(t, err)
			assert.Nil(t, s)
			assert.True(t, strings.HasPrefix(err.Error(), "keypool: badger store"), "error %q", err)
			assert.NotErrorIs(t, err, ErrStoreLocked)
		})
	}
}

func TestBadgerStoreLogsWarningsOnly(t *testing.T) {
	var logs bytes.Buffer
	l := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s, err := OpenBadgerStore(t.TempDir(), WithBadgerLogger(l))
	require.NoError(t, err)
	require.NoError(t, s.Close())
	assert.NotContains(t, logs.String(), "level=INFO", "Badger's informational logs are dropped")
	assert.NotContains(t, logs.String(), "level=DEBUG")
}

func TestPoolOnBadgerResumesAfterRestart(t *testing.T) {
	dir := t.TempDir()
	clock := newTestClock()
	open := func() (*Pool, *BadgerStore) {
		s, err := OpenBadgerStore(dir)
		require.NoError(t, err)
		p, err := New("openai", threeKeys(), WithStore(s), WithClock(clock.Now), WithLimits(Limits{RPD: 5}))
		require.NoError(t, err)
		return p, s
	}
	p, s := open()
	require.NoError(t, p.Do(t.Context(), "m", func(_ context.Context, k Key) error {
		if k.ID == "a" {
			return &ProviderError{Kind: KindQuota, Window: WindowWeekly, ResetAt: clock.Now().Add(72 * time.Hour)}
		}
		return nil
	}))
	for range 3 {
		require.NoError(t, p.Do(t.Context(), "m", func(context.Context, Key) error { return nil }))
	}
	before := p.Stats()
	require.NoError(t, p.Close())
	require.NoError(t, s.Close())

	p, s = open()
	defer s.Close()
	defer p.Close()
	after := p.Stats()
	for i := range before {
		assert.Equal(t, before[i].Bench, after[i].Bench, "key %s bench", before[i].ID)
		assert.Equal(t, before[i].Models, after[i].Models, "key %s windows and benches per model", before[i].ID)
	}
	a := after[0].Models[0]
	assert.Equal(t, KindQuota, a.Bench.Kind)
	assert.Equal(t, clock.Now().Add(12*time.Hour), a.Bench.Until, "a weekly window, capped at the longest bench")
}

// TestBadgerStoreNotifiesHealth: a listener hears a failing spell start and
// end, once each, however many failures come between, from a goroutine of
// the store's — so one that calls back into the store does not deadlock —
// and a removed one hears nothing.
func TestBadgerStoreNotifiesHealth(t *testing.T) {
	s, err := OpenBadgerStore(t.TempDir())
	require.NoError(t, err)
	defer s.Close()
	heard := make(chan bool, 4)
	remove := s.NotifyHealth(func() {
		// The locks setHealth and its callers hold: a listener called
		// under them would deadlock here.
		s.flushMu.Lock()
		s.spellMu.Lock()
		up := s.Health() == nil
		s.spellMu.Unlock()
		s.flushMu.Unlock()
		heard <- up
	})
	next := func() bool {
		select {
		case up := <-heard:
			return up
		case <-time.After(5 * time.Second):
			t.Fatal("no notice: a listener that calls back in deadlocked, or none came")
			return false
		}
	}
	s.setHealth(errDiskFull)
	s.setHealth(errDiskFull)
	assert.False(t, next(), "the spell began")
	s.setHealth(nil)
	s.setHealth(nil)
	assert.True(t, next(), "the spell ended")
	remove()
	s.setHealth(errDiskFull)
	select {
	case <-heard:
		t.Fatal("a removed listener heard")
	case <-time.After(50 * time.Millisecond):
	}
	s.setHealth(nil)
}
