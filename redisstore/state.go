package redisstore

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keypool-go/keypool"
	"github.com/keypool-go/keypool/internal/windowspec"
)

// state reads a key's state in two round trips: the server's time, the
// key's index, benches and cap windows (after the adjustments waiting),
// then the windows of each of its models.
func (s *Store) state(ctx context.Context, provider, keyID string, clientNow time.Time) (keypool.KeyStats, error) {
	n := names(s.cfg.prefix, provider, keyID)
	var (
		clock                      *redis.TimeCmd
		index, benches, cm, cd, cc *redis.MapStringStringCmd
		spent                      *redis.SliceCmd
	)
	s.sends.RLock()
	carried := s.carry(maxPending, provider)
	s.exec(ctx, carried, func(p redis.Pipeliner) {
		clock = p.Time(ctx)
		index = p.HGetAll(ctx, n.index())
		benches = p.HGetAll(ctx, n.benches())
		cm = p.HGetAll(ctx, n.capMinute())
		cd = p.HGetAll(ctx, n.capDay())
		cc = p.HGetAll(ctx, n.capCalendar())
		spent = p.HMGet(ctx, n.spend(), "ds", "de", "d", "ms", "me", "m", "dh", "mh")
	})
	s.sends.RUnlock()
	_ = s.checkCarried(ctx, carried) // reported there
	for _, c := range []redis.Cmder{clock, index, benches, cm, cd, cc, spent} {
		if err := c.Err(); err != nil {
			return keypool.KeyStats{}, err
		}
	}
	idx, b := index.Val(), benches.Val()
	now := clock.Val().UnixMilli()
	if s.cfg.serverNow != nil {
		now = s.cfg.serverNow().UnixMilli()
	}
	if last, err := strconv.ParseInt(idx["t"], 10, 64); err == nil {
		now = max(now, last)
	}
	cal := idx["d"] == "c"
	capDay := cd
	if cal {
		capDay = cc
	}
	// Benches end by the server's clock; State answers by the caller's.
	shift := clientNow.UnixMilli() - now
	st := keypool.KeyStats{Bench: benchState(b["*"], now, shift), Cap: usage(cm.Val(), capDay.Val(), cal, now),
		Spent: spentOf(spent.Val(), now)}

	var models []string
	for f := range idx {
		if m, ok := strings.CutPrefix(f, "m"); ok {
			models = append(models, m)
		}
	}
	for f := range b {
		if f != "*" {
			models = append(models, f[1:])
		}
	}
	slices.Sort(models)
	models = slices.Compact(models)
	if len(models) == 0 {
		return st, nil
	}
	minutes := make([]*redis.MapStringStringCmd, len(models))
	days := make([]*redis.MapStringStringCmd, len(models))
	_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, m := range models {
			minutes[i] = p.HGetAll(ctx, n.minute(m))
			days[i] = p.HGetAll(ctx, n.dayOf(m, cal))
		}
		return nil
	})
	st.Models = make([]keypool.ModelStats, len(models))
	for i, m := range models {
		if err := cmpErr(minutes[i].Err(), days[i].Err()); err != nil {
			return keypool.KeyStats{}, err
		}
		level, _ := strconv.Atoi(b["l"+m])
		st.Models[i] = keypool.ModelStats{Model: m, Bench: benchState(b["b"+m], now, shift), Level: level,
			Usage: usage(minutes[i].Val(), days[i].Val(), cal, now), Learned: learned(idx["m"+m])}
	}
	return st, nil
}

// spentOf reads a spend hash's fields ds, de, d, ms, me, m, dh, mh as they
// stand at now (Unix milliseconds): what was spent in the day and the
// month that hold now, with what requests in flight reserve, in dollars.
func spentOf(v []any, now int64) keypool.Budget {
	n := func(i int) int64 {
		s, _ := v[i].(string)
		x, _ := strconv.ParseInt(s, 10, 64)
		return x
	}
	var b keypool.Budget
	if len(v) == 8 && now >= n(0) && now < n(1) {
		b.PerDay = float64(n(2)+n(6)) / 1e6
	}
	if len(v) == 8 && now >= n(3) && now < n(4) {
		b.PerMonth = float64(n(5)+n(7)) / 1e6
	}
	return b
}

// learned reads the limits a model's entry in the index learned, as the
// scripts write it: "<busy>;<rpm>,<rpd>,<tpm>,<tpd>".
func learned(v string) keypool.Limits {
	_, rest, _ := strings.Cut(v, ";")
	var l [4]int64
	for i, f := range strings.SplitN(rest, ",", 4) {
		l[i], _ = strconv.ParseInt(f, 10, 64)
	}
	return keypool.Limits{RPM: l[0], RPD: l[1], TPM: l[2], TPD: l[3]}
}

// cmpErr returns a if it is an error, else b.
func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// benchState reads a bench, "kind:end", as it stands at now (Unix
// milliseconds): the zero BenchState once it has ended; its end moved by
// shift milliseconds, to the caller's clock.
func benchState(v string, now, shift int64) keypool.Bench {
	k, e, ok := strings.Cut(v, ":")
	if !ok {
		return keypool.Bench{}
	}
	kind, err1 := strconv.Atoi(k)
	ends, err2 := strconv.ParseInt(e, 10, 64)
	if err1 != nil || err2 != nil || ends <= now {
		return keypool.Bench{}
	}
	return keypool.Bench{Kind: keypool.Kind(kind), Until: time.UnixMilli(ends + shift).UTC()}
}

// usage returns what a minute window and a day window count at now.
func usage(minute, day map[string]string, cal bool, now int64) keypool.Usage {
	var u keypool.Usage
	u.MinuteRequests, u.MinuteTokens = slidingUsed(minute, minuteWidth, minuteBuckets, now)
	if cal {
		u.DayRequests, u.DayTokens = calendarUsed(day, now)
	} else {
		u.DayRequests, u.DayTokens = slidingUsed(day, dayWidth, dayBuckets, now)
	}
	return u
}

// slidingUsed returns what a sliding window's buckets, as the take script
// writes them, count at now: the last n buckets up to now's — or, for a
// window in exact mode, its entries still in the span and its guard
// (windowspec.ExactGuard).
func slidingUsed(fields map[string]string, width, n, now int64) (requests, tokens int64) {
	if fields["e"] != "" {
		return exactUsed(fields, (n-1)*width+int64(windowspec.ExactGuard/time.Millisecond), now)
	}
	head := now / width
	oldest := head - n + 1
	for f, v := range fields {
		if len(f) < 2 {
			continue
		}
		i, err1 := strconv.ParseInt(f[1:], 10, 64)
		n, err2 := strconv.ParseInt(v, 10, 64)
		if err1 != nil || err2 != nil || i < oldest || i > head {
			continue
		}
		switch f[0] {
		case 'r':
			requests += n
		case 't':
			tokens += n
		}
	}
	return requests, tokens
}

// exactUsed returns what an exact window's entries — r<slot> a request's
// time, t<slot> its tokens — count at now, over span.
func exactUsed(fields map[string]string, span, now int64) (requests, tokens int64) {
	for f, v := range fields {
		slot, ok := strings.CutPrefix(f, "r")
		if !ok {
			continue
		}
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms+span <= now {
			continue
		}
		requests++
		t, _ := strconv.ParseInt(fields["t"+slot], 10, 64)
		tokens += t
	}
	return requests, tokens
}

// calendarUsed returns what a calendar day counts at now: nothing once it
// has ended.
func calendarUsed(fields map[string]string, now int64) (requests, tokens int64) {
	end, err := strconv.ParseInt(fields["e"], 10, 64)
	if err != nil || end <= now {
		return 0, 0
	}
	requests, _ = strconv.ParseInt(fields["r"], 10, 64)
	tokens, _ = strconv.ParseInt(fields["t"], 10, 64)
	return requests, tokens
}
