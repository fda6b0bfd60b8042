package keypool

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{
		KindNone: "none", KindRate: "rate", KindQuota: "quota", KindAuth: "auth",
		KindTransient: "transient", Kind(-1): "unknown", Kind(99): "unknown",
	} {
		assert.Equal(t, want, k.String(), "Kind(%d).String()", int(k))
	}
}

func TestKindText(t *testing.T) {
	for k := KindNone; k <= KindTransient; k++ {
		b, err := k.MarshalText()
		assert.NoError(t, err)
		assert.Equal(t, k.String(), string(b))
	}
}
