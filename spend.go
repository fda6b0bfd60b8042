package keypool

import (
	"fmt"
	"math"
	"time"

	"github.com/keypool-go/keypool/internal/refusal"
	"github.com/keypool-go/keypool/internal/windowspec"
)

// Price is what a model costs, in US dollars per million tokens, and the
// most it writes in one answer.
type Price struct {
	// Input prices input tokens; Output output tokens, reasoning included.
	Input, Output float64
	// CachedInput prices the input tokens a vendor reports it read from a
	// cache; zero prices them as Input.
	CachedInput float64
	// MaxOutput is the most output tokens, reasoning included, the model
	// writes in one answer (its vendor's maximum output); zero when unknown.
	// A budget reserves it for a request that states no max_tokens, and
	// never more than it for one that states more (see Budget).
	MaxOutput int64
}

// Budget caps what a key (Key.Budget) or an account (WithAccountBudget)
// spends, in US dollars, per calendar day and per calendar month; a zero
// field is no cap, and a cap below a millionth of a dollar, the unit spend
// is counted in, is an error. Days follow the pool's calendar
// (WithCalendarDay, or midnight UTC), months start on the first day at the
// same hour in the same zone. In KeyStats a Budget also says what was
// spent today and this month, with what requests in flight reserve.
//
// A budget is a promise. Each request reserves what it can cost at most:
// its input as the pool estimates it (WithEstimator), and its output
// bound — its max_tokens (or max_completion_tokens, max_output_tokens,
// Gemini's maxOutputTokens), or the model's Price.MaxOutput when it states
// none, the smaller when both — priced by WithPrices. The pool sends it
// only when that reserve fits what is left of each cap after what the
// requests in flight reserve, in one atomic step of the store; its answer
// then settles at what the vendor reported. A request with no output bound
// (no max_tokens, no MaxOutput) reserves all that is left, so nothing runs
// beside it; a request whose reserve is more than a whole cap is refused
// with an error. A request refused for what requests in flight reserve is
// told to retry a second later, when they may have settled; one refused
// for what was spent, when the day or the month ends.
//
// The bound: spend passes a cap only by what answers report beyond their
// requests' reserves, and only by the answers in flight when the cap
// filled. An answer never counts more output than its request's bound,
// nor more than 2^24 input or output tokens, so what
// passes a reserve is input beyond the estimate, or the cost of a request
// without a bound beyond all that was left: when one answer overruns, one
// request's difference between its reserve and what the vendor reported.
// A process that ends with requests in flight leaves their reserves
// counted as spent; Pool.ResetSpend lifts them.
type Budget struct {
	PerDay, PerMonth float64
}

func (b Budget) validate() error {
	if !(b.PerDay >= 0) || !(b.PerMonth >= 0) || math.IsInf(b.PerDay, 0) || math.IsInf(b.PerMonth, 0) {
		return fmt.Errorf("budget %+v: want finite, non-negative dollars", b)
	}
	for _, v := range []float64{b.PerDay, b.PerMonth} {
		if v != 0 && toMicros(v) == 0 {
			return fmt.Errorf("budget %+v: %g is below a millionth of a dollar, the unit spend is counted in, and would cap nothing (0 is no cap)", b, v)
		}
	}
	return nil
}

func (p Price) validate() error {
	for _, v := range []float64{p.Input, p.Output, p.CachedInput} {
		if !(v >= 0) || math.IsInf(v, 0) {
			return fmt.Errorf("price %+v: want finite, non-negative dollars per million tokens", p)
		}
	}
	if p.MaxOutput < 0 {
		return fmt.Errorf("price %+v: a negative MaxOutput", p)
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

// maxAnswerTokens bounds the input and the output one answer counts,
// whatever the vendor reports: above every model's context window, so
// that no real answer is cut, and far below what a broken report may
// claim.
const maxAnswerTokens = 1 << 24

// outputBound returns the most output, in tokens, an answer to a request
// that states stated (its max_tokens and kin; 0: none) can hold at price
// p (nil: none): stated, at most p's MaxOutput when known; 0 when neither
// bounds it.
func (p *Price) outputBound(stated int64) int64 {
	if p != nil && p.MaxOutput > 0 && (stated <= 0 || stated > p.MaxOutput) {
		return p.MaxOutput
	}
	return max(stated, 0)
}

// reserve returns what a request estimated at est, which states the output
// bound stated (0: none), reserves at p, in millionths of a dollar: the
// cost of its estimated input and of its output bound. When nothing bounds
// its output, it returns the cost of est and unbounded: a store then
// reserves all that is left (Claim.Unbounded).
func (p *Price) reserve(est usageReport, stated int64) (cost int64, unbounded bool) {
	bound := p.outputBound(stated)
	if bound == 0 {
		return p.cost(est), true
	}
	return p.cost(usageReport{input: est.input, output: bound}), false
}

// clamp returns u within what its request could have used: output at
// most bound (the request's output bound, 0: none), input and output each
// at most maxAnswerTokens, cached input at most the input, and what the
// token limits count at most the two.
func (u usageReport) clamp(bound int64) usageReport {
	u.input = min(max(u.input, 0), maxAnswerTokens)
	u.output = min(max(u.output, 0), maxAnswerTokens)
	if bound > 0 {
		u.output = min(u.output, bound)
	}
	u.cachedInput = min(max(u.cachedInput, 0), u.input)
	u.limited = min(max(u.limited, 0), u.input+u.output)
	return u
}

// errNoPrice is the error of a request for a model without a price that
// only keys with a budget could take.
var errNoPrice = refusal.Errorf("has no price (WithPrices), and every key that could take it has a budget")

// tooDearError is the error of a request whose reserve is more than a whole
// cap of every key that could take it.
func tooDearError(provider, model string, reserve int64) error {
	return fmt.Errorf("keypool: %s: %w", provider, refusal.Errorf(
		"a request for model %q can cost up to $%.6f (its max_tokens, or the model's MaxOutput, at its price): more than a whole budget of every key that could take it",
		truncate(model, 64), fromMicros(reserve)))
}

// exceeds reports whether cost, in millionths of a dollar, is more than a
// whole cap of b.
func (b Budget) exceeds(cost int64) bool {
	day, month := b.micros()
	return (day > 0 && cost > day) || (month > 0 && cost > month)
}

// reservedRetry is how soon a request refused for what requests in flight
// reserve of a budget is told to try again: they settle as their answers
// end.
const reservedRetry = windowspec.ReservedRetry

// budgetDays returns the calendar budgets count by: the pool's calendar
// days, or midnight UTC when the pool's days slide.
func budgetDays(c calendar) calendar {
	if c.loc == nil {
		return calendar{loc: time.UTC}
	}
	return c
}

// spend counts what a key or an account spent, in millionths of a dollar,
// in the calendar day and month that hold its latest spend, and what
// requests in flight reserve of them. The zero spend has spent nothing.
type spend struct {
	day, month period
	// resets counts the resets of the spend (ResetSpend): a reservation
	// taken before the latest holds nothing since.
	resets uint32
}

// period is a calendar period, what was spent in it and what requests in
// flight reserve of it: [start, end), in Unix nanoseconds.
type period struct {
	start, end, spent, held int64
}

// roll starts the period that holds now once the current one has ended.
func (p *period) roll(now int64, bounds func(int64) (int64, int64)) {
	if now >= p.end {
		p.start, p.end = bounds(now)
		p.spent, p.held = 0, 0
	}
}

// room reports whether cost fits what is left of the day's and the month's
// caps (0: none) at now, after what requests in flight reserve. When it
// does not, it returns when it could: the end of the later period that is
// spent (spent); or, when only reservations fill them, a moment
// reservedRetry later, by which they may have settled.
func (s *spend) room(now, cost, dayCap, monthCap int64, c calendar) (ok bool, retryAt int64, spent bool) {
	s.day.roll(now, c.period)
	s.month.roll(now, c.month)
	ok = true
	for _, x := range [...]struct {
		p   *period
		cap int64
	}{{&s.day, dayCap}, {&s.month, monthCap}} {
		switch {
		case x.cap <= 0 || x.p.spent+x.p.held+cost <= x.cap:
		case x.p.spent+cost > x.cap:
			ok, spent, retryAt = false, true, max(retryAt, x.p.end)
		case !spent:
			ok, retryAt = false, now+int64(reservedRetry)
		}
	}
	return ok, retryAt, spent
}

// left returns what is left of the day's and the month's caps (0: none)
// after what was spent and what requests in flight reserve, the less of
// the two; room must have rolled the periods.
func (s *spend) left(dayCap, monthCap int64) int64 {
	left := int64(1 << 53)
	if dayCap > 0 {
		left = min(left, dayCap-s.day.spent-s.day.held)
	}
	if monthCap > 0 {
		left = min(left, monthCap-s.month.spent-s.month.held)
	}
	return max(left, 0)
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

// hold counts cost (negative: gives it back) as reserved at time at by a
// request in flight, in the periods that hold at, never below zero.
func (s *spend) hold(at, cost int64) {
	for _, p := range []*period{&s.day, &s.month} {
		if at >= p.start && at < p.end {
			p.held = max(p.held+cost, 0)
		}
	}
}

// reset forgets what was spent and what requests in flight reserve.
func (s *spend) reset() {
	s.day.spent, s.day.held, s.month.spent, s.month.held = 0, 0, 0, 0
	s.resets++
}

// spent returns what was spent, with what requests in flight reserve, in
// the day and the month that hold now.
func (s *spend) spent(now int64) (day, month int64) {
	if now < s.day.end && now >= s.day.start {
		day = s.day.spent + s.day.held
	}
	if now < s.month.end && now >= s.month.start {
		month = s.month.spent + s.month.held
	}
	return day, month
}
