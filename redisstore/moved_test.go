package redisstore

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
)

// replyError is an error reply of Redis's own.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

// Issue 36: a plain client that meets MOVED or ASK once running — the
// server became a Cluster node, or a Cluster's node was named alone — says
// in one line that the address is a Cluster node and how to name the
// cluster, and does not take Redis for down.
func TestMovedAtRuntimeNamesAClusterNode(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:7002"})
	defer c.Close()
	s := &Store{rdb: c}
	for _, reply := range []string{"MOVED 2836 127.0.0.1:7003", "ASK 2836 127.0.0.1:7003"} {
		err := s.fail(context.Background(), replyError(reply))
		msg := err.Error()
		assert.True(t, errors.Is(err, errClusterNode), "%q", msg)
		assert.False(t, errors.Is(err, ErrUnavailable), "%q is no outage", msg)
		assert.Contains(t, msg, "redisstore: 127.0.0.1:7002 is a Redis Cluster node")
		assert.Contains(t, msg, "?addr=")
		assert.Contains(t, msg, reply)
		assert.False(t, strings.Contains(msg, "\n"), "one line: %q", msg)
		assert.Equal(t, 1, strings.Count(msg, "redisstore:"), "named once: %q", msg)
	}
}
