package redisstore_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool"
	"github.com/keypool-go/keypool/redisstore"
)

// A caller reads what it wrote: a statement the store's goroutine has
// carried off to send is in what the next take or state reads, however
// slowly that send goes, rather than left behind it by a call that
// overtook it (as the parity test once saw, on a loaded machine).
func TestCallsReadWhatASendUnderWayWrites(t *testing.T) {
	for _, call := range []string{"state", "take"} {
		t.Run(call, func(t *testing.T) {
			f := newFakeRedis(t)
			rs := newStore(t, f.client(t))
			carried, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			defer redisstore.HoldSends(func() {
				once.Do(func() {
					close(carried)
					<-release
				})
			})()
			now := f.Now()
			require.NoError(t, rs.Learn(t.Context(), keypool.Stated{Provider: "p", KeyID: "k", Model: "m", Now: now,
				Limits: keypool.Limits{RPM: 4}, Used: keypool.Limits{RPM: 4, RPD: -1, TPM: -1, TPD: -1}}))
			select {
			case <-carried: // the store's goroutine holds the statement, not yet sent
			case <-time.After(5 * time.Second):
				t.Fatal("the store's goroutine did not send the statement")
			}
			type answer struct {
				stats keypool.KeyStats
				grant keypool.Grant
				err   error
			}
			answered := make(chan answer, 1)
			go func() {
				var a answer
				if call == "state" {
					a.stats, a.err = rs.State(t.Context(), "p", "k", now)
				} else {
					a.grant, a.err = rs.Take(t.Context(), keypool.Claim{Provider: "p", KeyID: "k", Model: "m", Now: now, Limits: keypool.Limits{RPM: 100}})
				}
				answered <- a
			}()
			var got answer
			early := false
			select {
			case got = <-answered:
				early = true
				t.Error("answered beside the send under way, before it")
			case <-time.After(200 * time.Millisecond):
			}
			close(release)
			if !early {
				select {
				case got = <-answered:
				case <-time.After(5 * time.Second):
					t.Fatal("no answer after the send")
				}
			}
			require.NoError(t, got.err)
			if call == "state" {
				require.Len(t, got.stats.Models, 1)
				assert.Equal(t, int64(4), got.stats.Models[0].Learned.RPM, "the statement sent before the state was read")
			} else {
				assert.False(t, got.grant.OK, "the vendor said 4 of 4 were used: the take is refused")
			}
		})
	}
}
