package keypool

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRecordKeepsTheModelsAStoreTakes reads records that name models no
// store takes — a control character, a name over the bound — as a store
// written before names were bounded could hold. Those entries are dropped;
// the rest of the record, the entry models beyond the bound share
// included, is read as written.
func TestRecordKeepsTheModelsAStoreTakes(t *testing.T) {
	const now = int64(1772366400) * 1e9
	w := &windows{}
	w.add(now, Limits{RPM: 10}.spans(), 3, 30, calendar{})
	written := &memKey{models: map[string]*memModel{}, last: now}
	for _, name := range []string{"gpt-4o", overflowModel, "a\x01b", strings.Repeat("m", 257), "bad\xff"} {
		written.models[name] = &memModel{win: w, level: 2, bench: benchState{kind: KindQuota, until: now + 1e9}}
	}

	read := &memKey{models: map[string]*memModel{}}
	require.NoError(t, read.decodeWindows(written.encodeWindows(nil)))
	require.NoError(t, read.decodeBenches(written.encodeBenches(nil)))

	require.Len(t, read.models, 2)
	for _, name := range []string{"gpt-4o", overflowModel} {
		m := read.models[name]
		require.NotNil(t, m, name)
		require.Equal(t, *w, *m.win, name)
		require.Equal(t, 2, m.level, name)
		require.Equal(t, benchState{kind: KindQuota, until: now + 1e9}, m.bench, name)
	}
}
