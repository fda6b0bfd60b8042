package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool/internal/vendorsim"
)

// fleet is a Redis Cluster of three masters and three replicas, each a
// redis-server of the test's own on a port of its own.
type fleet struct {
	t     *testing.T
	nodes map[int]*redisServer // by port
	ports []int
}

// startFleet starts a Redis Cluster of six nodes on the ports from base,
// with a node timeout of a second, and waits until every node says the
// cluster is ok. It skips the test when redis-server or redis-cli is not
// on the PATH.
func startFleet(t *testing.T, base int) *fleet {
	t.Helper()
	for _, cmd := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(cmd); err != nil {
			t.Skipf("no %s on PATH: install redis-server (Debian: apt-get install redis-server) to run keypool serve over a Redis Cluster", cmd)
		}
	}
	f := &fleet{t: t, nodes: map[int]*redisServer{}}
	dir := t.TempDir()
	var addrs []string
	for p := base; p < base+6; p++ {
		// A port another process holds would answer this test's PING.
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		require.NoError(t, err, "port %d is taken", p)
		require.NoError(t, ln.Close())
		f.nodes[p] = startRedis(t, p, dir, "--cluster-enabled", "yes",
			"--cluster-config-file", fmt.Sprintf("%s/nodes-%d.conf", dir, p), "--cluster-node-timeout", "1000")
		f.ports = append(f.ports, p)
		addrs = append(addrs, fmt.Sprintf("127.0.0.1:%d", p))
	}
	out, err := exec.Command("redis-cli", append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", "1", "--cluster-yes")...).CombinedOutput()
	require.NoError(t, err, "redis-cli --cluster create: %s", out)
	require.Eventually(t, func() bool {
		for _, p := range f.ports {
			if !strings.Contains(f.cli(p, "cluster", "info"), "cluster_state:ok") {
				return false
			}
		}
		return true
	}, 30*time.Second, 50*time.Millisecond, "the cluster is not ok")
	return f
}

// url is the state: URL of the cluster, in the Cluster URL form.
func (f *fleet) url() string {
	u := fmt.Sprintf("redis://127.0.0.1:%d", f.ports[0])
	for i, p := range f.ports[1:] {
		sep := "&"
		if i == 0 {
			sep = "?"
		}
		u += fmt.Sprintf("%saddr=127.0.0.1:%d", sep, p)
	}
	return u
}

// cli runs redis-cli against the node on port, and returns what it wrote,
// or "" when it failed.
func (f *fleet) cli(port int, args ...string) string {
	out, err := exec.Command("redis-cli", append([]string{"-p", strconv.Itoa(port)}, args...)...).Output()
	if err != nil {
		return ""
	}
	return string(out)
}

// slot returns the slot of key.
func (f *fleet) slot(key string) int {
	f.t.Helper()
	n, err := strconv.Atoi(strings.TrimSpace(f.cli(f.ports[0], "cluster", "keyslot", key)))
	require.NoError(f.t, err)
	return n
}

// holder returns, as the node on port sees the cluster, the port of the
// master that holds slot and that is not taken as failed, and the ports of
// its replicas; 0 when there is none.
func (f *fleet) holder(port, slot int) (master int, replicas []int) {
	type node struct {
		port   int
		master string
	}
	var masterID string
	byID := map[string]node{}
	for line := range strings.Lines(f.cli(port, "cluster", "nodes")) {
		fields := strings.Fields(line)
		if len(fields) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(fields[1], "@")
		_, ps, _ := strings.Cut(addr, ":")
		p, _ := strconv.Atoi(ps)
		byID[fields[0]] = node{port: p, master: fields[3]}
		flags := fields[2]
		if !strings.Contains(flags, "master") || strings.Contains(flags, "fail") {
			continue
		}
		for _, r := range fields[8:] {
			lo, hi, isRange := strings.Cut(r, "-")
			if !isRange {
				hi = lo
			}
			a, errA := strconv.Atoi(lo)
			b, errB := strconv.Atoi(hi)
			if errA == nil && errB == nil && a <= slot && slot <= b {
				masterID = fields[0]
			}
		}
	}
	if masterID == "" {
		return 0, nil
	}
	for _, n := range byID {
		if n.master == masterID {
			replicas = append(replicas, n.port)
		}
	}
	return byID[masterID].port, replicas
}

// agreed returns the port of the master of slot when every node but those
// of skip names the same one, else 0.
func (f *fleet) agreed(slot int, skip ...int) int {
	seen := 0
	for _, p := range f.ports {
		if slices.Contains(skip, p) {
			continue
		}
		m, _ := f.holder(p, slot)
		if m == 0 || seen != 0 && m != seen {
			return 0
		}
		seen = m
	}
	return seen
}

// answer is one request of the load: when it was sent and its status, 0
// for no answer.
type answer struct {
	sent, back time.Time
	status     int
}

// fleetLoad sends a request through the proxy every 20 ms, one at a time,
// and records each answer.
type fleetLoad struct {
	mu      sync.Mutex
	answers []answer
	stop    chan struct{}
	stopped chan struct{}
}

func startFleetLoad(t *testing.T, addr string) *fleetLoad {
	l := &fleetLoad{stop: make(chan struct{}), stopped: make(chan struct{})}
	client := &http.Client{Timeout: 10 * time.Second}
	go func() {
		defer close(l.stopped)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-l.stop:
				return
			case <-tick.C:
			}
			req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(chatBody))
			req.Header.Set("Authorization", "Bearer "+proxyToken)
			req.Header.Set("Content-Type", "application/json")
			a := answer{sent: time.Now()}
			if resp, err := client.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				a.status = resp.StatusCode
			}
			a.back = time.Now()
			l.mu.Lock()
			l.answers = append(l.answers, a)
			l.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		close(l.stop)
		<-l.stopped
	})
	return l
}

// since returns the answers to the requests sent from start on.
func (l *fleetLoad) since(start time.Time) []answer {
	l.mu.Lock()
	defer l.mu.Unlock()
	var got []answer
	for _, a := range l.answers {
		if !a.sent.Before(start) {
			got = append(got, a)
		}
	}
	return got
}

// outage returns, of the answers to the requests sent from start on, how
// many failed, the span from the first sent that failed to the last answer
// that failed, and from start to the last answer that failed (0 when none
// failed); and how many were served after it.
func (l *fleetLoad) outage(start time.Time) (failed int, span, back time.Duration, servedAfter int) {
	var first, last time.Time
	for _, a := range l.since(start) {
		if a.status == http.StatusOK {
			servedAfter++
			continue
		}
		failed++
		servedAfter = 0
		if first.IsZero() {
			first = a.sent
		}
		last = a.back
	}
	if failed == 0 {
		return 0, 0, 0, servedAfter
	}
	return failed, last.Sub(first), last.Sub(start), servedAfter
}

// waitServed waits until the load's last 10 requests were served.
func (l *fleetLoad) waitServed(t *testing.T, p *process) {
	t.Helper()
	require.Eventually(t, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		n := len(l.answers)
		if n < 10 {
			return false
		}
		for _, a := range l.answers[n-10:] {
			if a.status != http.StatusOK {
				return false
			}
		}
		return true
	}, 20*time.Second, 20*time.Millisecond, "the proxy does not serve: %s", storeLog(p))
}

// storeLog returns what the process logged but its requests' lines.
func storeLog(p *process) string {
	var b strings.Builder
	for line := range strings.Lines(p.stderr.String()) {
		if !strings.Contains(line, " msg=request ") {
			b.WriteString(line)
		}
	}
	return b.String()
}

// The fleet: keypool serve over a Redis Cluster of six nodes serves, and
// after a CLUSTER FAILOVER and after a kill -9 of the master of its pool's
// slot, it serves again within the failover's time and a second.
func TestFailoverCluster(t *testing.T) {
	long(t)
	if raceEnabled {
		// What it measures is time, which the race detector's build
		// stretches: .ci/run runs it without (see "timing").
		t.Skip("a timing test: run it without -race")
	}
	for _, tt := range []struct {
		replicas int
		base     int // of the ports of the cluster
	}{{0, 6480}, {2, 6490}} {
		t.Run(fmt.Sprintf("replicas %d", tt.replicas), func(t *testing.T) {
			f := startFleet(t, tt.base)
			sim := vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, Keys: []vendorsim.Key{
				{Secret: "sk-one", ID: "one"}, {Secret: "sk-two", ID: "two"}, {Secret: "sk-three", ID: "three"},
			}})
			t.Cleanup(sim.Close)
			conf := fmt.Sprintf("replicas: %d\n", tt.replicas) + simConfig(sim, f.url(), `
      - {id: one, secret: sk-one}
      - {id: two, secret: sk-two}
      - {id: three, secret: sk-three}`)
			p := startServe(t, conf)
			load := startFleetLoad(t, p.addr)
			load.waitServed(t, p)

			slot := f.slot("{openai}")
			master, replicas := f.holder(f.ports[0], slot)
			require.NotZero(t, master, "no master holds slot %d", slot)
			require.NotEmpty(t, replicas, "the master of slot %d has no replica", slot)
			t.Logf("slot %d of {openai}: master %d, replica %v", slot, master, replicas)

			// A CLUSTER FAILOVER on the replica: the master hands its
			// slots over.
			replica := replicas[0]
			start := time.Now()
			require.Equal(t, "OK\n", f.cli(replica, "cluster", "failover"))
			require.Eventually(t, func() bool { return strings.HasPrefix(f.cli(replica, "role"), "master\n") },
				10*time.Second, 5*time.Millisecond, "%d did not become master", replica)
			took := time.Since(start)
			time.Sleep(took + 2*time.Second)
			failed, span, back, served := load.outage(start)
			t.Logf("CLUSTER FAILOVER: %d requests failed for %v, served again %v after the command; failover took %v",
				failed, span.Round(time.Millisecond), back.Round(time.Millisecond), took.Round(time.Millisecond))
			assert.LessOrEqual(t, back, took+time.Second, "served again within the failover and a second: %s", storeLog(p))
			assert.Positive(t, served, "served after the failover")
			require.Eventually(t, func() bool { return f.agreed(slot) == replica }, 10*time.Second, 10*time.Millisecond,
				"the cluster does not agree %d holds slot %d", replica, slot)
			load.waitServed(t, p)

			// kill -9 of the new master: the cluster elects its replica,
			// the old master, once the node timeout has passed.
			master, replicas = replica, []int{master}
			start = time.Now()
			require.NoError(t, f.nodes[master].cmd.Process.Kill())
			<-f.nodes[master].done
			require.Eventually(t, func() bool { return f.agreed(slot, master) == replicas[0] }, 30*time.Second, 10*time.Millisecond,
				"the cluster did not elect %d for slot %d", replicas[0], slot)
			took = time.Since(start)
			time.Sleep(took + 2*time.Second)
			failed, span, back, served = load.outage(start)
			t.Logf("kill -9: %d requests failed for %v, served again %v after the kill; failover took %v",
				failed, span.Round(time.Millisecond), back.Round(time.Millisecond), took.Round(time.Millisecond))
			assert.LessOrEqual(t, back, took+time.Second, "served again within the failover and a second: %s", storeLog(p))
			assert.Positive(t, served, "served after the failover")
			if tt.replicas > 0 {
				assert.Zero(t, failed, "with replicas, served from local windows while the master is down")
			}
		})
	}
}
