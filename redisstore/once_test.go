package redisstore_test

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool"
	"github.com/keypool-go/keypool/redisstore"
)

// stallProxy is a TCP proxy to a Redis that, once armed, swallows the
// next answer Redis sends on each connection open at the time: Redis ran
// the command, and the client never hears of it.
type stallProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex // guards conns
	conns  []*stallConn
}

type stallConn struct{ swallow atomic.Bool }

func newStallProxy(t *testing.T, target string) *stallProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &stallProxy{ln: ln, target: target}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", target)
			if err != nil {
				client.Close()
				continue
			}
			c := &stallConn{}
			p.mu.Lock()
			p.conns = append(p.conns, c)
			p.mu.Unlock()
			wg.Add(2)
			go func() {
				defer wg.Done()
				_, _ = io.Copy(server, client)
				server.Close()
			}()
			go func() {
				defer wg.Done()
				defer client.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := server.Read(buf)
					if err != nil {
						return
					}
					if c.swallow.CompareAndSwap(true, false) {
						continue
					}
					if _, err := client.Write(buf[:n]); err != nil {
						return
					}
				}
			}()
		}
	}()
	return p
}

func (p *stallProxy) addr() string { return p.ln.Addr().String() }

// arm makes each connection open now swallow its next answer.
func (p *stallProxy) arm() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.swallow.Store(true)
	}
}

// Issue 36: a take, and a settle, whose answer is lost after Redis ran
// it — go-redis then runs the script again on another connection, as it
// does after a read timeout — count once.
func TestCallRunAgainCountsOnce(t *testing.T) {
	r := realRedis(t)
	p := newStallProxy(t, r.Options().Addr)
	// go-redis's defaults but a short read timeout: it retries a command
	// whose answer did not come in time.
	c := redis.NewClient(&redis.Options{Addr: p.addr(), ReadTimeout: 200 * time.Millisecond, PoolSize: 1, MaxRetries: 3})
	t.Cleanup(func() { _ = c.Close() })
	prefix := newPrefix(t, r)
	s := newStore(t, c, redisstore.WithPrefix(prefix), redisstore.WithTimeout(5*time.Second))
	lim := keypool.Limits{RPM: 10, TPM: 10_000}
	g, err := s.Take(t.Context(), take("k", "m", lim, 100, time.Now()))
	require.NoError(t, err)
	require.True(t, g.OK)

	p.arm()
	g, err = s.Take(t.Context(), take("k", "m", lim, 100, time.Now()))
	require.NoError(t, err, "the take run again answers")
	require.True(t, g.OK)
	st, err := s.State(t.Context(), "test", "k", time.Now())
	require.NoError(t, err)
	require.Len(t, st.Models, 1)
	assert.Equal(t, int64(2), st.Models[0].Usage.MinuteRequests, "requests counted for 2 takes, the second run twice")

	require.NoError(t, g.Reservation.Settle(t.Context(), 300, 0))
	p.arm()
	require.NoError(t, s.Flush(t.Context()))
	st, err = s.State(t.Context(), "test", "k", time.Now())
	require.NoError(t, err)
	assert.Equal(t, int64(100+300), st.Models[0].Usage.MinuteTokens, "tokens after a settle of 100 to 300, run twice")
}
