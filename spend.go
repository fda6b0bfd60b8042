package keypool

import (
	"fmt"
	"math"
	"time"

	"github.com/keypool-go/keypool/internal/refusal"
)

// Price is what a model costs, in US dollars per million tokens.
type Price struct {
	// Input prices input tokens; Output output tokens, reasoning included.
	Input, Output float64
	// CachedInput prices the input tokens a vendor reports it read from a
	// cache; zero prices them as Input.
	CachedInput float64
}

// Budget caps what a key (Key.Budget) or an account (WithAccountBudget)
// spends, in US dollars, per calendar day and per calendar month; a zero
// field is no cap. Days follow the pool's calendar (WithCalendarDay, or
// midnight UTC), months start on the first day at the same hour in the
// same zone. In KeyStats a Budget also says what was spent today and this
// month.
type Budget struct {
	PerDay, PerMonth float64
}

func (b Budget) validate() error {
	if !(b.PerDay >= 0) || !(b.PerMonth >= 0) || math.IsInf(b.PerDay, 0) || math.IsInf(b.PerMonth, 0) {
		return fmt.Errorf("budget %+v: want finite, non-negative dollars", b)
	}
	return nil
}

func (p Price) validate() error {
	for _, v := range []float64{p.Input, p.Output, p.CachedInput} {
		if !(v >= 0) || math.IsInf(v, 0) {
			return fmt.Errorf("price %+v: want finite, non-negative dollars per million tokens", p)
		}
	}
	return nil
}

// micros returns the budget in millionths of a dollar, the unit stores
// count spend in.
func (b Budget) micros() (day, month int64) { return toMicros(b.PerDay), toMicros(b.PerMonth) }

// toMicros returns dollars in millionths of a dollar, rounded down, within
// what a store counts exactly.
func toMicros(usd float64) int64 { return int64(min(math.Floor(usd*1e6), 1<<53)) }

// fromMicros returns millionths of a dollar in dollars.
func fromMicros(m int64) float64 { return float64(m) / 1e6 }

// usageReport is the tokens a vendor reported an answer used: input (all of
// it, cached included), the part of the input read from a cache, and output
// (reasoning included). The usage reader (usage_response.go) maps each
// vendor's fields to it.
type usageReport struct {
	input, cachedInput, output int64
	// limited, when hasLimited, is what the vendor's token rate limits
	// count where that is not input + output: the total the vendor states,
	// or Anthropic's input and output less its cache reads, which its
	// input-token limits do not count. The usage reader sets it.
	limited    int64
	hasLimited bool
}

// total returns the tokens the answer counts against the token windows:
// limited when set, else input + output.
func (u usageReport) total() int64 {
	if u.hasLimited {
		return max(u.limited, 0)
	}
	return addTokens(max(u.input, 0), max(u.output, 0))
}

// cost returns what u costs at price p, in millionths of a dollar, rounded
// up: a price in dollars per million tokens is millionths of a dollar per
// token.
func (p Price) cost(u usageReport) int64 {
	cached := min(max(u.cachedInput, 0), max(u.input, 0))
	cachedPrice := p.CachedInput
	if cachedPrice == 0 {
		cachedPrice = p.Input
	}
	c := float64(max(u.input, 0)-cached)*p.Input + float64(cached)*cachedPrice + float64(max(u.output, 0))*p.Output
	return int64(min(math.Ceil(c), 1<<53))
}

// estimateUse splits a request's token estimate into the input and the
// output it reserves: the output is what the request reserves (as
// DefaultEstimate counts it), the input the rest.
func estimateUse(info RequestInfo, estimate int64) usageReport {
	output := info.MaxOutput
	if output <= 0 {
		output = defaultReservedOutput
	}
	output = min(output, maxReservedOutput, estimate)
	return usageReport{input: estimate - output, output: output}
}

// errNoPrice is the error of a request for a model without a price that
// only keys with a budget could take.
var errNoPrice = refusal.Errorf("has no price (WithPrices), and every key that could take it has a budget")

// budgetDays returns the calendar budgets count by: the pool's calendar
// days, or midnight UTC when the pool's days slide.
func budgetDays(c calendar) calendar {
	if c.loc == nil {
		return calendar{loc: time.UTC}
	}
	return c
}

// spend counts what a key or an account spent, in millionths of a dollar,
// in the calendar day and month that hold its latest spend. The zero spend
// has spent nothing.
type spend struct {
	day, month period
}

// period is a calendar period and what was spent in it: [start, end), in
// Unix nanoseconds.
type period struct {
	start, end, spent int64
}

// roll starts the period that holds now once the current one has ended.
func (p *period) roll(now int64, bounds func(int64) (int64, int64)) {
	if now >= p.end {
		p.start, p.end = bounds(now)
		p.spent = 0
	}
}

// room reports whether cost fits what is left of the day's and the month's
// caps (0: none) at now; when it does not, it returns when it could: the
// end of the later period that is spent.
func (s *spend) room(now, cost, dayCap, monthCap int64, c calendar) (ok bool, retryAt int64) {
	s.day.roll(now, c.period)
	s.month.roll(now, c.month)
	ok = true
	if dayCap > 0 && s.day.spent+cost > dayCap {
		ok, retryAt = false, s.day.end
	}
	if monthCap > 0 && s.month.spent+cost > monthCap {
		ok, retryAt = false, max(retryAt, s.month.end)
	}
	return ok, retryAt
}

// add counts cost (negative: gives it back) as spent at time at, in the
// periods that hold at, never below zero.
func (s *spend) add(at, cost int64) {
	for _, p := range []*period{&s.day, &s.month} {
		if at >= p.start && at < p.end {
			p.spent = max(p.spent+cost, 0)
		}
	}
}

// spent returns what was spent in the day and the month that hold now.
func (s *spend) spent(now int64) (day, month int64) {
	if now < s.day.end && now >= s.day.start {
		day = s.day.spent
	}
	if now < s.month.end && now >= s.month.start {
		month = s.month.spent
	}
	return day, month
}
