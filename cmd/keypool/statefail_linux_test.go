package main

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool/internal/mounttest"
)

// The state tests that need a mount: a read-only directory (chmod does not
// stop root, which CI runs as) and a full filesystem (a tmpfs). Without
// root they skip, saying so; keypool's own tests of the store cover its
// part through its write seams (TestBadgerStoreWritesFail).

// fillUp mounts a tmpfs of 64 MiB and returns it, with a function that
// fills it to 4 MiB free — below the 24 MiB the store keeps in reserve —
// and returns the undo, which frees the space.
func fillUp(t *testing.T) (fs string, fill func() (undo func())) {
	t.Helper()
	fs = mounttest.Tmpfs(t, "64m")
	return fs, func() func() {
		filler := mounttest.Fill(t, fs, 4<<20)
		return func() { require.NoError(t, os.Remove(filler)) }
	}
}

func TestServeProcessStateFails(t *testing.T) {
	t.Parallel() // it waits in real time: on a process, a server or a bench
	mounttest.Require(t, "go test -run TestBadgerStoreWritesFail .")
	for _, failure := range []string{"read-only", "full"} {
		for _, recovers := range []bool{true, false} {
			name := failure + map[bool]string{true: ", then writable again, then SIGTERM", false: ", then SIGTERM"}[recovers]
			t.Run(name, func(t *testing.T) {
				t.Parallel() // each runs its own process on its own directory
				var state string
				var fail func() (undo func())
				switch failure {
				case "read-only":
					state = filepath.Join(t.TempDir(), "state")
					fail = func() func() { return mounttest.ReadOnly(t, state) }
				case "full":
					var fs string
					fs, fail = fillUp(t)
					state = filepath.Join(fs, "state")
				}
				v := newStateVendor(t)
				conf := stateConfig(v, state, "")
				r := startStateRun(t, v, conf)
				undo := fail()
				t.Logf("/healthz degraded %v after the directory turned %s", r.waitHealthz(true).Round(time.Millisecond), failure)
				r.duringTheFailure(http.StatusOK) // served from memory
				if recovers {
					undo()
					t.Logf("/healthz ok %v after the directory was writable again", r.waitHealthz(false).Round(time.Millisecond))
					r.waitLogged("state store working again")
					status, took := r.term(stateShutdown + 3*time.Second)
					assert.Equal(t, 0, status, "everything saved: %s", r.p.stderr.String())
					assert.Less(t, took, time.Second)
					assert.Equal(t, sorted([]string{"starting", "serving", "benched b", "benched c", "stopped"}, badgerFailing, badgerWorking), r.logged(),
						"the failure logged twice when it started and twice when it ended: %s", r.p.stderr.String())
					assert.Equal(t, map[string]string{"a": "serving", "b": "benched", "c": "benched"}, restartFinds(t, conf),
						"a restart finds every bench, c's written once the directory was writable again")
					return
				}
				r.termWhileFailing(state)
				undo()
				assert.Equal(t, map[string]string{"a": "serving", "b": "benched", "c": "serving"}, restartFinds(t, conf),
					"a restart finds what was written before the failure: b's bench, not c's")
			})
		}
	}
}
