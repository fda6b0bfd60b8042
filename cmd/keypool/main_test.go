package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRunUsage(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		status int
		stderr string
	}{
		{"no command", nil, exitUsage, ""},
		{"unknown command", []string{"frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{"bad flag", []string{"demo", "-nope"}, exitUsage, "flag provided but not defined"},
		{"too few keys", []string{"demo", "-keys", "2"}, exitUsage, "-keys 2: the demo needs at least 3 free keys"},
		{"bad duration", []string{"demo", "-duration", "-1s"}, exitUsage, "-duration -1s: must be positive"},
		{"stray argument", []string{"demo", "extra"}, exitUsage, `unexpected argument "extra"`},
		{"help", []string{"help"}, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			got := run(t.Context(), tt.args, &stdout, &stderr)
			assert.Equal(t, tt.status, got, "exit status; stderr: %s", stderr.String())
			assert.Contains(t, stderr.String(), tt.stderr)
		})
	}
}

func TestDemoPrintsSummary(t *testing.T) {
	t.Parallel() // it runs the demo for seconds of real time
	var stdout, stderr bytes.Buffer
	status := run(t.Context(), []string{"demo", "-duration", "1500ms", "-rate", "20"}, &stdout, &stderr)
	out := stdout.String()
	assert.Equal(t, 0, status, "stderr: %s", stderr.String())
	for _, want := range []string{"Summary after", "Benches by kind, as the last four columns count them per key:", "The vendor answered", "Callers saw", "The paid key served", "free-1", "paid"} {
		assert.Contains(t, out, want)
	}
	assert.Contains(t, out, "benched free-5: auth", "the revoked key is benched")
	// The table's bench columns add up to the line that counts them all.
	_, table, _ := strings.Cut(out, "TRANSIENT\n")
	table, rest, _ := strings.Cut(table, "\n\n")
	var sums [4]int
	for _, row := range strings.Split(table, "\n") {
		f := strings.Fields(row)
		require.Len(t, f, 8, "a row of the summary: %q", row)
		for i := range sums {
			n, err := strconv.Atoi(f[4+i])
			require.NoError(t, err)
			sums[i] += n
		}
	}
	line := strings.Join(strings.Fields(rest), " ")
	assert.Contains(t, line, fmt.Sprintf("rate %d, quota %d, auth %d, transient %d.", sums[0], sums[1], sums[2], sums[3]))
	assert.Regexp(t, `\d+\.\ds  learned free-2's limit from the vendor's headers: 12 a minute \(configured 20\)\n`, out)
	assert.Regexp(t, `free-2: learned RPM 12 \(configured 20\) from the vendor's headers \d+\.\d s in, and held it there since; the vendor's 429s for it: \d+ before, 0 after\.\n`, out)
	assert.NotContains(t, out, "sk-demo-", "no secret in the output")
	assert.False(t, strings.Contains(out, "\033["), "no terminal codes when stdout is not a terminal")
}

func TestRedraws(t *testing.T) {
	assert.True(t, redraws(true, "xterm-256color"))
	assert.False(t, redraws(true, "dumb"), "TERM=dumb gets plain lines")
	assert.False(t, redraws(true, ""))
	assert.False(t, redraws(false, "xterm"), "a pipe gets plain lines")
}

// escapes matches the terminal codes the live view writes.
var escapes = regexp.MustCompile("\033\\[[0-9]*[AK]")

func TestDemoLiveView(t *testing.T) {
	t.Parallel() // it runs the demo for seconds of real time
	for _, width := range []int{60, 80, 100} {
		t.Run(fmt.Sprint(width, " columns"), func(t *testing.T) {
			t.Parallel() // each runs a demo of its own
			var out bytes.Buffer
			v := &view{out: &out, live: true, width: func() int { return width }, now: time.Now}
			o := demoOptions{keys: 3, duration: 1500 * time.Millisecond, rate: 80, state: t.TempDir()}
			d, err := newDemo(o)
			require.NoError(t, err)
			defer d.close()
			require.NoError(t, d.run(t.Context(), v))
			text := escapes.ReplaceAllString(out.String(), "")
			live, _, _ := strings.Cut(text, "\nSummary after")
			_, live, _ = strings.Cut(live, "paid  used only when")
			for _, line := range strings.Split(live, "\n") {
				assert.Less(t, utf8.RuneCountInString(line), width, "a line as wide as the terminal wraps: %q", line)
			}
			table, _, _ := strings.Cut(live, "\nrecent events:")
			table, _, _ = strings.Cut(table, "\n* ") // the footnotes are prose, cut as prose
			assert.NotContains(t, table, "…", "a table cut at the terminal's edge loses its last columns")
			if width == 80 {
				// The wide table does not fit 79 columns: the compact one.
				assert.Contains(t, live, "KEY     STATE")
			} else if width < compactBelow {
				assert.Contains(t, live, "KEY     STATE")
				assert.NotContains(t, live, "TIER")
				assert.Contains(t, live, "full/min", "a key whose minute is full shows as full")
			} else {
				assert.Contains(t, live, "KEY     TIER  STATE")
				assert.Contains(t, live, "full this minute")
			}
			assert.Contains(t, text, "auth", "the revoked key's bench")
		})
	}
}

// TestDemoLearnsAKeysLimit runs the demo's five free keys fast enough to
// fill free-2's minute many times over: the pool, told 20 a minute, learns
// the vendor's 12 from its headers and shows it, and the vendor refuses
// free-2 no request sent after that.
func TestDemoLearnsAKeysLimit(t *testing.T) {
	t.Parallel() // it runs the demo for seconds of real time
	var out bytes.Buffer
	v := &view{out: &out, live: true, width: func() int { return 100 }, now: time.Now}
	d, err := newDemo(demoOptions{keys: 5, duration: 1500 * time.Millisecond, rate: 80, state: t.TempDir()})
	require.NoError(t, err)
	defer d.close()
	require.NoError(t, d.run(t.Context(), v))
	text := escapes.ReplaceAllString(out.String(), "")
	live, summary, _ := strings.Cut(text, "\nSummary after")
	assert.Regexp(t, `free-2\s+free\s+serving\s+\d+\s+\d+\s+\d+/12\*\n`, live, "the minute against the learned limit, starred")
	assert.Contains(t, live, "* free-2: learned RPM 12 from the vendor's headers (configured 20)\n")
	assert.Contains(t, live, "learned free-2's limit from the vendor's headers: 12 a minute (configured 20)", "an event")
	assert.Contains(t, live, "free-4: learned a daily quota of 5 from the vendor's headers\n", "free-4's quota is the day's")
	assert.NotContains(t, live, "free-4: learned RPM", "a quota resetting in hours is no minute's limit")

	ll, ok, before, after := d.learning.learnedOf("free-2")
	require.True(t, ok, "the pool learned free-2's limit")
	assert.Equal(t, learnedLimit{rpm: 12, configured: 20, at: ll.at}, ll)
	assert.Zero(t, after, "no 429 for a request sent after the pool learned the limit")
	st, _ := d.sim.StatsOf("free-2")
	assert.Equal(t, st.RateLimited, before, "every 429 the vendor sent free-2 came before")
	assert.LessOrEqual(t, d.sim.MaxInWindow("free-2", time.Minute), 12, "never more than the vendor's 12 in a minute")
	assert.GreaterOrEqual(t, st.Served, int64(12), "its minute was filled")
	summary = strings.Join(strings.Fields(summary), " ") // the live view wraps prose
	assert.Regexp(t, fmt.Sprintf(`free-2: learned RPM 12 \(configured 20\) from the vendor's headers \d+\.\d s in, and held it there since; the vendor's 429s for it: %d before, 0 after\.`, before), summary)
}

func TestDemoExplainsFailures(t *testing.T) {
	t.Parallel() // it runs the demo for seconds of real time
	var stdout, stderr bytes.Buffer
	status := run(t.Context(), []string{"demo", "-keys", "3", "-duration", "1500ms", "-rate", "100"}, &stdout, &stderr)
	require.Equal(t, 0, status, "stderr: %s", stderr.String())
	out := stdout.String()
	assert.Regexp(t, `Callers saw \d+ failures; every other vendor failure went to another key:`, out)
	assert.Regexp(t, `\d+ when no key could take the request: the free keys benched or full, and the paid key at its own limit of 40 a minute`, out)
}

func TestDemoProxy(t *testing.T) {
	stdout := &syncBuffer{}
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(t.Context(), []string{"demo", "-proxy", "-listen", "127.0.0.1:0", "-duration", "20s", "-rate", "5"}, stdout, &stderr)
	}()
	var base, page string
	require.Eventually(t, func() bool {
		m := regexp.MustCompile(`Base URL\s+(\S+)[\s\S]*Status page\s+(\S+)`).FindStringSubmatch(stdout.String())
		if m == nil {
			return false
		}
		base, page = m[1], m[2]
		return true
	}, 10*time.Second, 20*time.Millisecond, "the demo prints where to point a client: %s", stdout.String())
	assert.Contains(t, stdout.String(), "Token        demo-token")
	assert.True(t, strings.HasSuffix(base, "/v1"), base)

	req, _ := http.NewRequest(http.MethodPost, base+"/chat/completions", strings.NewReader(chatBody))
	req.Header.Set("Authorization", "Bearer demo-token")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)

	resp, err = http.Get(page)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "the status page")

	var out bytes.Buffer
	require.Eventually(t, func() bool {
		out.Reset()
		return run(t.Context(), []string{"status", "-url", base, "-token", "demo-token"}, &out, io.Discard) == 0 &&
			strings.Contains(out.String(), "benched (auth)")
	}, 10*time.Second, 200*time.Millisecond, "the demo's own requests reach the revoked key: %s", out.String())
	assert.Contains(t, out.String(), "backup")
	assert.NotContains(t, stdout.String()+stderr.String()+out.String(), "sk-demo-", "no secret in the output")
}

// TestDemoStopsOnSIGHUP runs the command in a child process, closes its
// "terminal" with SIGHUP, and checks that it stopped as Ctrl-C stops it:
// a summary, exit status 0, its temporary state removed.
func TestDemoStopsOnSIGHUP(t *testing.T) {
	if os.Getenv("KEYPOOL_TEST_MAIN") == "1" {
		os.Args = append([]string{"keypool"}, strings.Fields(os.Getenv("KEYPOOL_TEST_ARGS"))...)
		main()
		return
	}
	if runtime.GOOS == "windows" {
		t.Skip("no SIGHUP on Windows")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestDemoStopsOnSIGHUP$")
	cmd.Env = append(os.Environ(), "KEYPOOL_TEST_MAIN=1", "KEYPOOL_TEST_ARGS=demo -duration 60s -rate 10")
	stdout := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = stdout, stdout
	require.NoError(t, cmd.Start())
	var state string
	require.Eventually(t, func() bool {
		m := regexp.MustCompile(`State \(Badger\) in (\S+)\.`).FindStringSubmatch(stdout.String())
		if m != nil {
			state = m[1]
		}
		return m != nil && strings.Contains(stdout.String(), "sent")
	}, 20*time.Second, 50*time.Millisecond, "the demo started: %s", stdout.String())
	require.NoError(t, cmd.Process.Signal(syscall.SIGHUP))
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		require.NoError(t, err, "exit status; output: %s", stdout.String())
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("the demo did not stop on SIGHUP: %s", stdout.String())
	}
	assert.Contains(t, stdout.String(), "(interrupted)")
	_, err := os.Stat(state)
	assert.ErrorIs(t, err, os.ErrNotExist, "the temporary state %s is removed", state)
}
