package redisstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool"
	"github.com/keypool-go/keypool/redisstore"
)

// addrEnv names the environment variable that gives the tests a real Redis
// ("127.0.0.1:6390"). CI sets it; without it, TestMain starts a redis-server
// when one is on the PATH.
const addrEnv = "KEYPOOL_REDIS_ADDR"

// childEnv names the environment variable that makes the test binary a
// child process of a test.
const childEnv = "KEYPOOL_REDISSTORE_CHILD"

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func runTests(m *testing.M) int {
	redis.SetLogger(quiet{}) // the outage tests make go-redis log every failed dial
	if os.Getenv(addrEnv) == "" && os.Getenv(childEnv) == "" {
		srv, err := startRedis(os.TempDir(), 0)
		switch {
		case errors.Is(err, exec.ErrNotFound):
			// The real-Redis tests skip, saying why.
		case err != nil:
			fmt.Fprintln(os.Stderr, "starting redis-server:", err)
			return 1
		default:
			defer srv.stop()
			os.Setenv(addrEnv, srv.addr)
		}
	}
	return m.Run()
}

// quiet is a go-redis logger that logs nothing.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// realRedis returns a client of the real Redis the tests use, closed at the
// end of the test, or skips the test when there is none. A Redis named by
// KEYPOOL_REDIS_ADDR that does not answer fails the test.
func realRedis(t testing.TB) *redis.Client {
	t.Helper()
	addr := os.Getenv(addrEnv)
	if addr == "" {
		t.Skip("no real Redis: set " + addrEnv + " or put redis-server on the PATH")
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.Ping(context.Background()).Err(), "the Redis at %s=%s", addrEnv, addr)
	return c
}

// newPrefix returns a prefix no other test uses; on a shared Redis its keys
// are deleted at the end of the test.
func newPrefix(t testing.TB, c redis.UniversalClient) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	prefix := "kpt" + hex.EncodeToString(b)
	t.Cleanup(func() {
		ctx := context.Background()
		keys, err := c.Keys(ctx, prefix+":*").Result()
		if err == nil && len(keys) > 0 {
			for _, k := range keys {
				_ = c.Del(ctx, k).Err() // one by one: the keys of several pools are in several slots
			}
		}
	})
	return prefix
}

// newStore returns a Store over c, closed at the end of the test.
func newStore(t testing.TB, c redis.UniversalClient, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(c, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// fakeRedis is a miniredis on a clock the test moves.
type fakeRedis struct {
	*miniredis.Miniredis
	mu  sync.Mutex
	now time.Time
}

func newFakeRedis(t testing.TB) *fakeRedis {
	f := &fakeRedis{Miniredis: miniredis.RunT(t), now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	f.SetTime(f.now)
	return f
}

func (f *fakeRedis) client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: f.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Now returns the server's time.
func (f *fakeRedis) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Advance moves the server's time, TIME and TTLs both.
func (f *fakeRedis) Advance(_ *testing.T, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	f.SetTime(f.now)
	f.FastForward(d)
}

// redisServer is a redis-server the tests started, on loopback.
type redisServer struct {
	addr string
	port int
	dir  string
	cmd  *exec.Cmd
}

// startRedis starts a redis-server in dir on port, a free one for 0, that
// saves nothing, and waits until it answers.
func startRedis(dir string, port int, args ...string) (*redisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, err
	}
	if port == 0 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		port = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	r := &redisServer{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), port: port, dir: dir}
	r.cmd = exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "no", "--dir", dir, "--loglevel", "warning")
	r.cmd.Args = append(r.cmd.Args, args...)
	if err := r.cmd.Start(); err != nil {
		return nil, err
	}
	c := redis.NewClient(&redis.Options{Addr: r.addr, MaxRetries: -1})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if err = c.Ping(context.Background()).Err(); err == nil {
			return r, nil
		}
		if time.Now().After(deadline) {
			r.stop()
			return nil, fmt.Errorf("redis-server on %s does not answer: %w", r.addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop kills the server and waits for it to exit.
func (r *redisServer) stop() {
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
}

// restart starts the server again on the same port, empty.
func (r *redisServer) restart() error {
	n, err := startRedis(r.dir, r.port)
	if err != nil {
		return err
	}
	r.cmd = n.cmd
	return nil
}

// ownRedis starts a redis-server for one test, stopped at its end, or skips
// the test when none is on the PATH.
func ownRedis(t *testing.T) *redisServer {
	t.Helper()
	r, err := startRedis(t.TempDir(), 0)
	if errors.Is(err, exec.ErrNotFound) {
		t.Skip("no redis-server on the PATH")
	}
	require.NoError(t, err)
	t.Cleanup(r.stop)
	return r
}

// take is a take of key k for model m.
func take(k, m string, lim keypool.Limits, tokens int64, now time.Time) keypool.Claim {
	return keypool.Claim{Provider: "test", KeyID: k, Model: m, Limits: lim, Tokens: tokens, Now: now}
}
