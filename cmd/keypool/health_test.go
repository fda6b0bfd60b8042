package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool"
	"github.com/keypool-go/keypool/internal/notify"
)

// failingStoreProxy starts the proxy over a store whose health is what the
// test sets, its watcher ticking every poll, with a redis:// state whose
// password must never show; it returns its URL, the server, the store and
// the log.
func failingStoreProxy(t *testing.T) (string, *server, *stuckStore, *syncBuffer) {
	t.Helper()
	store := &stuckStore{Store: keypool.NewMemoryStore(), release: make(chan struct{})}
	close(store.release)
	c, err := parseConfig([]byte("proxy_tokens: ["+proxyToken+"]\nstate: redis://:hunter2@127.0.0.1:1/0\n"+
		"upstreams: [{name: up, url: 'http://127.0.0.1:1', keys: [{id: k1, secret: sk-health-1}, {id: k2, secret: sk-health-2}]}]\n"), "k")
	require.NoError(t, err)
	base, srv, logs := startLogged(t, c, slog.LevelInfo, store)
	return base, srv, store, logs
}

// fail sets the store's health, and tells of a change as a store does.
func (s *stuckStore) fail(err error) {
	s.mu.Lock()
	changed := (s.health == nil) != (err == nil)
	s.health = err
	s.mu.Unlock()
	if changed {
		s.watch.Call()
	}
}

// storeOf returns the store part of the proxy's /status.
func storeOf(t *testing.T, base string) storeView {
	t.Helper()
	status, body := get(t, base+"/status", nil, http.Header{"Authorization": {"Bearer " + proxyToken}})
	require.Equal(t, http.StatusOK, status, body)
	var report statusReport
	require.NoError(t, json.Unmarshal([]byte(body), &report))
	require.NotNil(t, report.Store, body)
	return *report.Store
}

// healthGauge returns the value of keypool_store_healthy on /metrics.
func healthGauge(t *testing.T, base string) string {
	t.Helper()
	status, body := get(t, base+"/metrics", nil, http.Header{"Authorization": {"Bearer " + proxyToken}})
	require.Equal(t, http.StatusOK, status)
	m := regexp.MustCompile(`(?m)^keypool_store_healthy(?:\{[^}]*\})? (\S+)$`).FindAllStringSubmatch(body, -1)
	require.Len(t, m, 1, "one series, without the reason as a label:\n%s", body)
	assert.NotContains(t, body, "hunter2")
	return m[0][1]
}

func TestStoreFailureIsReported(t *testing.T) {
	base, srv, store, logs := failingStoreProxy(t)
	assert.Equal(t, storeView{Healthy: true}, storeOf(t, base))
	assert.Equal(t, "1", healthGauge(t, base))

	long := strings.Repeat("x", 2*maxReason)
	store.fail(errors.New("redisstore: redis unavailable: dial redis://:hunter2@127.0.0.1:1: refused\nsk-health-1 " + long))
	require.Eventually(t, func() bool { return len(logLines(logs, "state store failing")) == 1 }, 5*time.Second, 5*time.Millisecond)
	st := storeOf(t, base)
	assert.False(t, st.Healthy)
	assert.True(t, strings.HasPrefix(st.Reason, "redisstore: redis unavailable: dial redis://:xxxxx@127.0.0.1:1: refused\\n[redacted:k1] xxx"), st.Reason)
	assert.True(t, strings.HasSuffix(st.Reason, "…"), "bounded as /healthz bounds it")
	assert.LessOrEqual(t, len(st.Reason), maxReason+len("…"))
	assert.NotContains(t, st.Reason, "hunter2")
	assert.NotContains(t, st.Reason, "sk-health")
	assert.WithinDuration(t, time.Now(), st.Since, 5*time.Second)
	assert.Equal(t, "0", healthGauge(t, base))

	// The failure goes on, and changes its words: nothing more is logged.
	time.Sleep(100 * time.Millisecond)
	store.fail(errors.New("redisstore: redis unavailable: i/o timeout"))
	time.Sleep(100 * time.Millisecond)
	store.fail(nil)
	require.Eventually(t, func() bool { return len(logLines(logs, "state store working again")) == 1 }, 5*time.Second, 5*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	spell := regexp.MustCompile(`(?m)msg="state store `).FindAllString(logs.String(), -1)
	assert.Len(t, spell, 2, "one line when the failure starts, one when it ends:\n%s", logs.String())
	assert.Regexp(t, `level=WARN msg="state store failing" state=redis://:xxxxx@127.0.0.1:1/0 reason="redisstore: redis unavailable: dial redis://:xxxxx@`, logLines(logs, "state store failing")[0])
	assert.Regexp(t, `level=INFO msg="state store working again" state=redis://:xxxxx@127.0.0.1:1/0 failed_for=\d+s`, logLines(logs, "state store working again")[0])
	assert.NotContains(t, logs.String(), "hunter2")
	assert.NotContains(t, logs.String(), "sk-health")
	assert.Equal(t, storeView{Healthy: true}, storeOf(t, base))
	assert.Equal(t, "1", healthGauge(t, base))

	// A shutdown stops the watcher: the store's notices go nowhere.
	srv.close()
	store.fail(errors.New("after the end"))
	assert.Len(t, logLines(logs, "state store failing"), 1, "nothing logged after the shutdown")
}

// TestStoreHealthIsHeardNotPolled: the watcher reads the store's health
// when it starts and at each change the store tells of — never on a
// clock.
func TestStoreHealthIsHeardNotPolled(t *testing.T) {
	calls := &countingHealth{}
	srv := &server{settings: &settings{}, log: slog.New(slog.DiscardHandler), store: calls, redact: newRedactor(nil)}
	srv.startWatch()
	time.Sleep(50 * time.Millisecond)
	assert.Equal(t, int64(1), calls.n.Load(), "once at the start, and not again while nothing changes")
	calls.watch.Call()
	assert.Equal(t, int64(2), calls.n.Load(), "once at a change")
	srv.stopWatch()
	srv.stopWatch() // again: nothing
	calls.watch.Call()
	assert.Equal(t, int64(2), calls.n.Load(), "nothing once stopped")
}

// countingHealth is a store that counts the calls of its Health.
type countingHealth struct {
	keypool.Store
	n     atomic.Int64
	watch notify.Listeners
}

func (c *countingHealth) Health() error {
	c.n.Add(1)
	return nil
}

func (c *countingHealth) NotifyHealth(f func()) func() { return c.watch.Add(f) }

func TestServeStartsWithReplicasWhileRedisIsDown(t *testing.T) {
	t.Parallel() // it waits in real time: on a process, a server or a bench
	mr := miniredis.RunT(t)
	addr := mr.Addr()
	mr.Close()
	p := startServe(t, fmt.Sprintf("replicas: 2\nstate: redis://:hunter2@%s/0\nproxy_tokens: [%q]\nupstreams: [{url: 'http://127.0.0.1:1', keys: [{secret: sk-a}]}]\n", addr, proxyToken))
	require.Eventually(t, func() bool { return strings.Contains(p.stderr.String(), `msg="state store failing"`) }, 10*time.Second, 20*time.Millisecond, p.stderr.String())
	assert.Equal(t, 1, strings.Count(p.stderr.String(), `msg="state store failing"`))
	assert.NotContains(t, p.stderr.String(), "hunter2")
	assert.NotContains(t, p.stderr.String(), "pool.go", "the Redis client's own log is at debug")
	status, body := get(t, "http://"+p.addr+"/healthz", nil, nil)
	assert.Equal(t, http.StatusOK, status)
	assert.True(t, strings.HasPrefix(body, "degraded: state store: "), body)
}

// TestHealthzDegradedOnAnIdleProxy: Redis going away under a proxy that no
// request uses shows on /healthz within 3 s, and in the log once.
func TestHealthzDegradedOnAnIdleProxy(t *testing.T) {
	t.Parallel() // it waits in real time: on a process and a server
	mr := miniredis.RunT(t)
	p := startServe(t, fmt.Sprintf("state: redis://%s/0\nproxy_tokens: [%q]\nupstreams: [{url: 'http://127.0.0.1:1', keys: [{secret: sk-a}]}]\n", mr.Addr(), proxyToken))
	status, body := get(t, "http://"+p.addr+"/healthz", nil, nil)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "ok\n", body)
	mr.Close()
	gone := time.Now()
	require.Eventually(t, func() bool {
		_, body := get(t, "http://"+p.addr+"/healthz", nil, nil)
		return strings.HasPrefix(body, "degraded: state store: ")
	}, 3*time.Second, 20*time.Millisecond, "degraded within 3 s of Redis going away")
	t.Logf("/healthz degraded %v after Redis went away", time.Since(gone).Round(time.Millisecond))
	require.Eventually(t, func() bool { return strings.Contains(p.stderr.String(), `msg="state store failing"`) }, time.Second, 20*time.Millisecond, p.stderr.String())
}
