package redisstore_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool/redisstore"
)

func TestBadConfiguration(t *testing.T) {
	f := newFakeRedis(t)
	c := f.client(t)
	cases := []struct {
		name string
		opts []redisstore.Option
		want string
	}{
		{"empty prefix", []redisstore.Option{redisstore.WithPrefix("")}, `redisstore: WithPrefix("")`},
		{"prefix with a colon", []redisstore.Option{redisstore.WithPrefix("a:b")}, `redisstore: WithPrefix("a:b")`},
		{"prefix with a brace", []redisstore.Option{redisstore.WithPrefix("a{b")}, `redisstore: WithPrefix("a{b")`},
		{"no replicas", []redisstore.Option{redisstore.WithLocalFallback(0)}, "replicas must be at least 1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := redisstore.New(c, tc.opts...)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	t.Run("nil client", func(t *testing.T) {
		_, err := redisstore.New(nil)
		assert.EqualError(t, err, "redisstore: nil client")
	})
	t.Run("nil options are ignored", func(t *testing.T) {
		s, err := redisstore.New(c, nil, redisstore.WithLogger(nil))
		require.NoError(t, err)
		require.NoError(t, s.Close())
		require.NoError(t, s.Close(), "a second Close")
	})
}

func TestOpen(t *testing.T) {
	f := newFakeRedis(t)
	s, err := redisstore.Open("redis://" + f.Addr() + "/0")
	require.NoError(t, err)
	require.NoError(t, s.Close())

	for _, bad := range []string{"redis://user:s3cret@[::1", "http://user:s3cret@localhost:6379", "redis://user:s3cret@localhost:6379/db"} {
		_, err := redisstore.Open(bad)
		require.Error(t, err, "Open(%q)", bad)
		assert.True(t, strings.HasPrefix(err.Error(), "redisstore: parsing the Redis URL: "), "Open(%q) = %v", bad, err)
		assert.NotContains(t, err.Error(), "s3cret", "the password in the error of Open(%q)", bad)
	}
}
