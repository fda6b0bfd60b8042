package main

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/keypool-go/keypool"
)

// Spend caps in the configuration: an upstream's prices (model → US dollars
// per million tokens), a key's budget and each account's budget (US
// dollars per day and per month). keypool.New judges every value, asked of
// each alone as the limits are (configcheck.go); the command adds what only
// the file can say: a budget with no price to count it by, an account no
// key names.

// price is what a model costs, in US dollars per million tokens;
// cached_input zero prices cached input tokens as input. max_output is
// the most output tokens the model writes in one answer (zero: unknown):
// a budget reserves it for a request that states no max_tokens, which
// otherwise reserves all that is left and runs alone (keypool.Budget).
type price struct {
	Input       float64 `yaml:"input"`
	Output      float64 `yaml:"output"`
	CachedInput float64 `yaml:"cached_input"`
	MaxOutput   int64   `yaml:"max_output"`
}

func (p price) pool() keypool.Price {
	return keypool.Price{Input: p.Input, Output: p.Output, CachedInput: p.CachedInput, MaxOutput: p.MaxOutput}
}

// budget caps what a key or an account spends, in US dollars per calendar
// day and month; zero is no cap.
type budget struct {
	PerDay   float64 `yaml:"per_day"`
	PerMonth float64 `yaml:"per_month"`
}

func (b budget) pool() keypool.Budget { return keypool.Budget{PerDay: b.PerDay, PerMonth: b.PerMonth} }

// dollarField is one field of a price or a budget, with the value of that
// field alone.
type dollarField[T any] struct {
	name  string
	value float64
	only  T
}

func (p price) fields() []dollarField[keypool.Price] {
	return []dollarField[keypool.Price]{
		{"input", p.Input, keypool.Price{Input: p.Input}},
		{"output", p.Output, keypool.Price{Output: p.Output}},
		{"cached_input", p.CachedInput, keypool.Price{CachedInput: p.CachedInput}},
		{"max_output", float64(p.MaxOutput), keypool.Price{MaxOutput: p.MaxOutput}},
	}
}

func (b budget) fields() []dollarField[keypool.Budget] {
	return []dollarField[keypool.Budget]{
		{"per_day", b.PerDay, keypool.Budget{PerDay: b.PerDay}},
		{"per_month", b.PerMonth, keypool.Budget{PerMonth: b.PerMonth}},
	}
}

// judgeDollars notes in m the mistake keypool.New finds in each field of a
// price or a budget, given alone to try (which asks keypool.New), at
// field.input and so on, and reports whether there was none.
func judgeDollars[T any](field string, fields []dollarField[T], try func(T) error, m *mistakes) bool {
	fine := true
	for _, f := range fields {
		if f.value != 0 {
			if err := try(f.only); err != nil {
				m.add(dollarMistake(field+"."+f.name, f.value, err))
				fine = false
			}
		}
	}
	return fine
}

// asOption returns a try for judgeDollars: keypool.New asked of the
// stand-in key with the option opt makes.
func asOption[T any](opt func(T) keypool.Option) func(T) error {
	return func(v T) error { return judge([]keypool.Key{standIn}, opt(v)) }
}

// judgeKeyBudget notes in m the mistake keypool.New finds in each field of
// a key's budget, the stand-in key given it alone, and reports whether
// there was none.
func judgeKeyBudget(entry string, b budget, m *mistakes) bool {
	return judgeDollars(entry+".budget", b.fields(), func(b keypool.Budget) error {
		return judge([]keypool.Key{{Secret: standIn.Secret, ID: standIn.ID, Budget: b}})
	}, m)
}

// dollarMistake says what keypool.New found wrong with an amount v at
// field: "-1 is negative", "+Inf is not a finite amount", or its reason.
func dollarMistake(field string, v float64, reason error) error {
	switch {
	case v < 0:
		return fieldErr(field, "%s is negative", formatDollars(v))
	case math.IsNaN(v) || math.IsInf(v, 0):
		return fieldErr(field, "%s is not a finite amount", formatDollars(v))
	}
	return &configError{field, reason}
}

func formatDollars(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// spendOptions returns the pool options of an upstream's prices and
// account budgets, noting in m each mistake keypool.New finds in them;
// accounts are the accounts its keys name.
func (u upstream) spendOptions(field string, accounts map[string]bool, m *mistakes) []keypool.Option {
	var opts []keypool.Option
	if len(u.Prices) > 0 {
		all := map[string]keypool.Price{}
		for _, model := range sortedKeys(u.Prices) {
			p := u.Prices[model]
			if judgeDollars(mapPath(field+".prices", model), p.fields(), asOption(func(p keypool.Price) keypool.Option {
				return keypool.WithPrices(map[string]keypool.Price{model: p})
			}), m) {
				all[model] = p.pool()
			}
		}
		opts = append(opts, keypool.WithPrices(all))
	}
	for _, account := range sortedKeys(u.AccountBudgets) {
		b, at := u.AccountBudgets[account], mapPath(field+".account_budgets", account)
		switch {
		case !accounts[account]:
			m.addf(at, "no key of this upstream names the account %q", account)
		case len(u.Prices) == 0:
			m.addf(at, "%s is not set: a budget counts spend by the models' prices, and a model without one is never sent to an account with a budget", field+".prices")
		case judgeOption(at, keypool.WithAccountBudget(account, keypool.Budget{}), m) &&
			judgeDollars(at, b.fields(), asOption(func(b keypool.Budget) keypool.Option { return keypool.WithAccountBudget(account, b) }), m):
			opts = append(opts, keypool.WithAccountBudget(account, b.pool()))
		}
	}
	return opts
}

// needsPrices notes in m a key entry's budget in an upstream without
// prices: such a key would take no request.
func (u upstream) needsPrices(field string, m *mistakes) {
	if len(u.Prices) > 0 {
		return
	}
	for j, k := range u.Keys {
		if k.Budget != (budget{}) {
			m.addf(fmt.Sprintf("%s.keys[%d].budget", field, j), "%s is not set: a budget counts spend by the models' prices, and a model without one is never sent to a key with a budget", field+".prices")
		}
	}
}

// unboundedWarning says, for an upstream with a budget, which priced models
// have no max_output: a request for one that names no max_tokens reserves
// all that is left of a budget, so such requests run one at a time. The
// proxy does not set max_tokens on them: that would cut the answers its
// clients asked for, and the vendors name the field differently. It
// returns "" when there is nothing to say.
func (u upstream) unboundedWarning(field string) string {
	budgeted := len(u.AccountBudgets) > 0
	for _, k := range u.Keys {
		budgeted = budgeted || k.Budget != (budget{})
	}
	if !budgeted {
		return ""
	}
	var models []string
	for _, model := range sortedKeys(u.Prices) {
		if u.Prices[model].MaxOutput == 0 {
			models = append(models, model)
		}
	}
	if len(models) == 0 {
		return ""
	}
	return fmt.Sprintf("%s.prices: %s %s no max_output: a request for %s that names no max_tokens reserves all that is left of a budget, and runs alone",
		field, strings.Join(models, ", "), plural(len(models), "has", "have"), plural(len(models), "it", "them"))
}

// plural returns one when n is 1, else many.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// sortedKeys returns the keys of a map in order, so that mistakes come in
// the same order every time.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
