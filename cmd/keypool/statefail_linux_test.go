package main

import (
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The state tests that need a mount: a read-only directory (chmod does not
// stop root, which CI runs as) and a full filesystem (a tmpfs). Without
// root they skip, saying so; keypool's own tests of the store cover its
// part through its write seams (TestBadgerStoreWritesFail).

// canMount skips the test unless this process can mount filesystems.
func canMount(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a read-only directory or a full filesystem needs a mount, and mounting needs root; go test -run TestBadgerStoreWritesFail . covers the store's part")
	}
	dir := t.TempDir()
	if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
		t.Skipf("this root cannot mount (%v): a container without CAP_SYS_ADMIN?", err)
	}
	require.NoError(t, syscall.Unmount(dir, 0))
}

// readOnly bind-mounts dir read-only over itself and returns the undo;
// the test's end undoes it, if the test has not.
func readOnly(t *testing.T, dir string) (undo func()) {
	t.Helper()
	require.NoError(t, syscall.Mount(dir, dir, "", syscall.MS_BIND, ""))
	done := false
	undo = func() {
		if !done {
			done = true
			require.NoError(t, syscall.Unmount(dir, 0))
		}
	}
	t.Cleanup(func() {
		if !done {
			_ = syscall.Unmount(dir, syscall.MNT_DETACH)
		}
	})
	require.NoError(t, syscall.Mount("", dir, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY, ""))
	return undo
}

// fillUp mounts a tmpfs of 64 MiB and returns it, with a function that
// fills it to 4 MiB free — below the 24 MiB the store keeps in reserve —
// and returns the undo, which frees the space.
func fillUp(t *testing.T) (fs string, fill func() (undo func())) {
	t.Helper()
	fs = t.TempDir()
	require.NoError(t, syscall.Mount("tmpfs", fs, "tmpfs", 0, "size=64m"))
	t.Cleanup(func() { _ = syscall.Unmount(fs, syscall.MNT_DETACH) })
	return fs, func() func() {
		var st syscall.Statfs_t
		require.NoError(t, syscall.Statfs(fs, &st))
		free := int64(st.Bavail) * st.Bsize
		filler := filepath.Join(fs, "filler")
		require.NoError(t, os.WriteFile(filler, make([]byte, max(free-4<<20, 0)), 0o600))
		return func() { require.NoError(t, os.Remove(filler)) }
	}
}

func TestServeProcessStateFails(t *testing.T) {
	canMount(t)
	for _, failure := range []string{"read-only", "full"} {
		for _, recovers := range []bool{true, false} {
			name := failure + map[bool]string{true: ", then writable again, then SIGTERM", false: ", then SIGTERM"}[recovers]
			t.Run(name, func(t *testing.T) {
				var state string
				var fail func() (undo func())
				switch failure {
				case "read-only":
					state = filepath.Join(t.TempDir(), "state")
					fail = func() func() { return readOnly(t, state) }
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
