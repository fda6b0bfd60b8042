package redisstore_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool"
	"github.com/keypool-go/keypool/internal/vendorsim"
	"github.com/keypool-go/keypool/redisstore"
)

// The replicas tests: four processes share one key of RPM 60 through a real
// Redis, against a vendor that counts and limits nothing.
const (
	replicas   = 4
	replicaRPM = 60
)

// TestChildProcess is the body of the child processes of other tests.
func TestChildProcess(t *testing.T) {
	args := strings.Fields(os.Getenv(childEnv))
	if len(args) == 0 {
		t.Skip("runs only as a child process of another test")
	}
	switch args[0] {
	case "replica":
		replica(t, args[1:])
	default:
		t.Fatalf("unknown child %q", args[0])
	}
}

// roundTrips counts the round trips a go-redis client makes: a command, or
// a pipeline of them.
type roundTrips struct{ n atomic.Int64 }

func (*roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// replica sends requests through a pool of one key over a Redis store, as
// fast as the pool lets it, for span from the start its parent writes on
// its standard input once every replica has said it is ready, and says
// what it got.
func replica(t *testing.T, args []string) {
	require.Len(t, args, 4, "vendor URL, Redis address, prefix, span")
	vendor, addr, prefix := args[0], args[1], args[2]
	span, err := time.ParseDuration(args[3])
	require.NoError(t, err)

	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	var trips roundTrips
	c.AddHook(&trips)
	s, err := redisstore.New(c, redisstore.WithPrefix(prefix))
	require.NoError(t, err)
	defer s.Close()
	p, err := keypool.New("replicas", []keypool.Key{{Secret: "sk-shared", ID: "shared"}},
		keypool.WithStore(s), keypool.WithLimits(keypool.Limits{RPM: replicaRPM}))
	require.NoError(t, err)
	defer p.Close()
	client := &http.Client{Transport: p.Transport(nil)}

	fmt.Println("replica ready")
	var startNs int64
	_, err = fmt.Fscanln(os.Stdin, &startNs)
	require.NoError(t, err, "the start, from the parent")
	start := time.Unix(0, startNs)
	end := start.Add(span)
	time.Sleep(time.Until(start))
	trips.n.Store(0)
	var served, refused, failed, takes int64
	for time.Now().Before(end) {
		req, err := http.NewRequest(http.MethodPost, vendor+"/v1/chat/completions",
			strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`))
		require.NoError(t, err)
		resp, err := client.Do(req)
		takes++
		var none *keypool.NoAvailableKeyError
		switch {
		case errors.As(err, &none):
			refused++
			// Sleep until the key is free, and a little more so that the
			// replicas do not all ask at the same instant.
			wait := time.Until(none.RetryAt) + time.Duration(rand.Int64N(int64(5*time.Millisecond)))
			time.Sleep(min(max(wait, time.Millisecond), time.Until(end)))
		case err != nil:
			failed++
			t.Logf("request: %v", err)
			time.Sleep(100 * time.Millisecond)
		default:
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				served++
			} else {
				failed++
			}
		}
	}
	fmt.Printf("replica served %d refused %d failed %d takes %d roundtrips %d\n",
		served, refused, failed, takes, trips.n.Load())
}

// Four processes share one key of RPM 60 through a real Redis for a few
// seconds: together they send what one minute of it holds, and no more —
// each alone would send as much.
func TestReplicasShareOneKey(t *testing.T) { shareOneKey(t, 2*time.Second) }

// The same over 130 seconds of real time, the windows of three minutes:
// the replicas use at least 95% of what the key holds as its windows slide,
// and a minute of the vendor's never sees more than RPM 60.
func TestReplicasShareOneKeyForMinutes(t *testing.T) {
	long(t)
	shareOneKey(t, 130*time.Second)
}

// shareOneKey runs the replicas over one key for span and checks what the
// vendor saw.
func shareOneKey(t *testing.T, span time.Duration) {
	c := realRedis(t)
	prefix := newPrefix(t, c)
	sim := vendorsim.Start(vendorsim.Config{Keys: []vendorsim.Key{{Secret: "sk-shared", ID: "shared"}}})
	defer sim.Close()

	env := fmt.Sprintf("%s=replica %s %s %s %s", childEnv, sim.URL(), c.Options().Addr, prefix, span)
	type report struct{ served, refused, failed, takes, trips int64 }
	reports := make([]report, replicas)
	starts := make([]io.WriteCloser, replicas)
	ready := make(chan int, replicas)
	var wg sync.WaitGroup
	for i := range replicas {
		cmd := exec.Command(os.Args[0], "-test.run=^TestChildProcess$", "-test.v")
		cmd.Env = append(os.Environ(), env)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		starts[i], err = cmd.StdinPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		wg.Go(func() {
			lines := bufio.NewScanner(out)
			for lines.Scan() {
				if lines.Text() == "replica ready" {
					ready <- i
					continue
				}
				r := &reports[i]
				if n, _ := fmt.Sscanf(lines.Text(), "replica served %d refused %d failed %d takes %d roundtrips %d",
					&r.served, &r.refused, &r.failed, &r.takes, &r.trips); n != 5 && strings.Contains(lines.Text(), "FAIL") {
					t.Errorf("replica %d: %s", i, lines.Text())
				}
			}
			assert.NoError(t, cmd.Wait(), "replica %d", i)
		})
	}
	// Every replica starts at once, when all are ready.
	timeout := time.After(30 * time.Second)
	for range replicas {
		select {
		case <-ready:
		case <-timeout:
			t.Fatal("the replicas did not all say they were ready within 30 s")
		}
	}
	start := time.Now().Add(100 * time.Millisecond)
	for _, w := range starts {
		_, err := fmt.Fprintln(w, start.UnixNano())
		require.NoError(t, err)
		require.NoError(t, w.Close())
	}
	wg.Wait()

	var total report
	for i, r := range reports {
		t.Logf("replica %d: served %d, refused %d, failed %d", i, r.served, r.refused, r.failed)
		total.served += r.served
		total.failed += r.failed
		total.takes += r.takes
		total.trips += r.trips
	}
	// A strict vendor of RPM 60 accepts at most 60 in each minute of the
	// span, begun or not: that is the capacity.
	capacity := replicaRPM * int64(math.Ceil(span.Minutes()))
	// The pool counts a request when Redis records its take, the vendor
	// when it arrives, a trip later — under the race detector, on a busy
	// machine, trips can differ by tens of milliseconds. The pool's
	// promise is its own minute's; the vendor's minute less tripSlack
	// holds it to that.
	const tripSlack = 250 * time.Millisecond
	inWindow := sim.MaxInWindow("shared", time.Minute-tripSlack)
	t.Logf("the vendor saw at most %d in any minute (%d in any minute less %v)",
		sim.MaxInWindow("shared", time.Minute), inWindow, tripSlack)
	st, _ := sim.StatsOf("shared")
	share := float64(total.served) / float64(capacity)
	t.Logf("served %d of a capacity of %d in %v (%.1f%%); at most %d in any minute; %d round trips for %d takes (%.2f a take)",
		total.served, capacity, span, 100*share, inWindow, total.trips, total.takes,
		float64(total.trips)/float64(max(total.takes, 1)))
	assert.LessOrEqual(t, inWindow, replicaRPM, "requests the vendor saw in one minute, less the trips' slack")
	assert.GreaterOrEqual(t, share, 0.95, "share of the capacity the replicas used")
	assert.Equal(t, total.served, st.Served, "the vendor's count")
	assert.Zero(t, total.failed, "failed requests")
}
