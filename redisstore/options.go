package redisstore

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// An Option configures a Store; a bad value is an error from New or Open.
type Option interface {
	apply(*config) error
}

type option func(*config) error

func (f option) apply(c *config) error { return f(c) }

// config is a Store's configuration.
type config struct {
	prefix   string
	fallback bool // serve locally while Redis is down, rather than refuse
	replicas int64
	logger   *slog.Logger
	// timeout bounds each call to Redis (see WithTimeout).
	timeout time.Duration
	// clock is the pool's clock, against which a bench's end is read.
	clock func() time.Time
	// probeEvery is how often a Redis taken as down is asked whether it
	// is back: probeEvery (the constant) but in tests.
	probeEvery time.Duration
	// script is the store's script: storeScript but in tests, whose
	// script counts by serverNow, the time each call passes first, in
	// place of the server's TIME.
	script    *redis.Script
	serverNow func() time.Time
}

// WithClock sets the clock the store reads a bench's end against — the
// pool's (keypool.WithClock), time.Now by default: a bench until
// clock()+d lasts d from the Redis server's time, and the times the store
// answers (a refused take's RetryAt, a bench's end in State) are the
// server's moved to that clock.
func WithClock(now func() time.Time) Option {
	return option(func(c *config) error {
		if now != nil {
			c.clock = now
		}
		return nil
	})
}

// WithPrefix sets the first part of the name of every Redis key the store
// writes, "keypool" by default, so that several applications can share one
// Redis. It holds no ':' '{' or '}'.
func WithPrefix(prefix string) Option {
	return option(func(c *config) error {
		if prefix == "" || strings.ContainsAny(prefix, ":{}") {
			return fmt.Errorf("WithPrefix(%q): want a non-empty prefix without ':', '{' or '}'", prefix)
		}
		c.prefix = prefix
		return nil
	})
}

// WithLocalFallback makes the store serve from windows in memory while
// Redis does not answer, rather than refuse: each limit is divided by
// replicas, the number of processes that share the pool (rounded down, at
// least 1), so that together they stay within it. Benches made meanwhile are
// kept in memory too, and written to Redis when it answers again. replicas
// must be at least 1.
func WithLocalFallback(replicas int) Option {
	return option(func(c *config) error {
		if replicas < 1 {
			return errors.New("WithLocalFallback: replicas must be at least 1")
		}
		c.fallback, c.replicas = true, int64(replicas)
		return nil
	})
}

// WithLogger sets where the store logs what it cannot return to a caller:
// Redis stopping to answer and answering again (once each per outage), and
// what failed off the request path — adjustments of tokens that could not be
// written, benches made during an outage that had to be dropped. The default
// is slog.Default(). A pool hears of outages through its OnStoreError, which
// reads Health.
func WithLogger(l *slog.Logger) Option {
	return option(func(c *config) error {
		if l != nil {
			c.logger = l
		}
		return nil
	})
}

// DefaultTimeout is how long the store waits for Redis to answer a call
// unless WithTimeout says otherwise: well above a Redis round trip, well
// below what a client of the pool would wait.
const DefaultTimeout = 500 * time.Millisecond

// WithTimeout sets how long the store waits for Redis to answer each call
// — a take, a bench, a state, a send of adjustments, a probe — before it
// takes Redis as down: DefaultTimeout by default. A pause of Redis longer
// than d is thus noticed within d, and WithLocalFallback decides what
// happens next. Over a client given to New, the bound holds only if the
// client was made with ContextTimeoutEnabled (Open's client is); d must be
// positive.
func WithTimeout(d time.Duration) Option {
	return option(func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("WithTimeout(%v): want a positive duration", d)
		}
		c.timeout = d
		return nil
	})
}

// newConfig returns the configuration opts make, and an error naming what
// is wrong with it.
func newConfig(opts []Option) (config, error) {
	c := config{prefix: "keypool", logger: slog.Default(), timeout: DefaultTimeout, clock: time.Now, probeEvery: probeEvery,
		script: storeScript}
	var errs []error
	for _, o := range opts {
		if o != nil {
			errs = append(errs, o.apply(&c))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return config{}, fmt.Errorf("redisstore: %w", err)
	}
	return c, nil
}
