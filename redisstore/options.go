package redisstore

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
)

// An Option configures a Store.
type Option func(*config)

// config is a Store's configuration.
type config struct {
	prefix   string
	fallback bool // serve locally while Redis is down, rather than refuse
	replicas int64
	onStatus func(available bool, err error)
	onError  func(error)
}

// WithPrefix sets the first part of the name of every Redis key the store
// writes, "keypool" by default, so that several applications can share one
// Redis. It holds no ':' '{' or '}'.
func WithPrefix(prefix string) Option {
	return func(c *config) { c.prefix = prefix }
}

// WithLocalFallback makes the store serve from windows in memory while
// Redis does not answer, rather than refuse: each limit is divided by
// replicas, the number of processes that share the pool (rounded down, at
// least 1), so that together they stay within it. Benches made meanwhile are
// kept in memory too, and written to Redis when it answers again. replicas
// must be at least 1.
func WithLocalFallback(replicas int) Option {
	return func(c *config) { c.fallback, c.replicas = true, int64(replicas) }
}

// WithStatusFunc sets a function told when Redis stops answering (available
// false, with the error) and when it answers again (true, nil). It is called
// from the store's goroutine, one call at a time; it should return quickly.
// By default the changes are logged with slog.Default().
func WithStatusFunc(f func(available bool, err error)) Option {
	return func(c *config) {
		if f != nil {
			c.onStatus = f
		}
	}
}

// WithErrorFunc sets a function told of what failed off the request path:
// adjustments of tokens that could not be written, benches made during an
// outage that had to be dropped. By default they are logged with
// slog.Default().
func WithErrorFunc(f func(error)) Option {
	return func(c *config) {
		if f != nil {
			c.onError = f
		}
	}
}

// newConfig returns the configuration opts make, and an error naming what
// is wrong with it.
func newConfig(opts []Option) (config, error) {
	c := config{prefix: "keypool"}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.prefix == "" || strings.ContainsAny(c.prefix, ":{}") {
		return config{}, fmt.Errorf("redisstore: prefix %q: want a non-empty prefix without ':', '{' or '}'", c.prefix)
	}
	if c.fallback && c.replicas < 1 {
		return config{}, errors.New("redisstore: WithLocalFallback: replicas must be at least 1")
	}
	if c.onStatus == nil {
		c.onStatus = func(available bool, err error) {
			if available {
				slog.Info("redisstore: redis answers again")
				return
			}
			slog.Warn("redisstore: redis unavailable", "err", err)
		}
	}
	if c.onError == nil {
		c.onError = func(err error) { slog.Warn("redisstore: background write", "err", err) }
	}
	return c, nil
}
