package main

import (
	"cmp"
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/keypool-go/keypool"
)

// This file is the one place that reads keypool's status types
// (RouteStatus, KeyStats, ModelStats, the store's state): everything the
// command shows — /status, the status page, keypool status, the demo — goes
// through the views below, so that a rename in the library touches only
// this file.

// statusReport is the JSON of /status, which the status page and keypool
// status -url read. A time that is not known is left out, never shown as
// the zero time.
type statusReport struct {
	Now time.Time `json:"now"`
	// Store is the state store's health; a report read from an older
	// proxy, without it, reads as healthy.
	Store  *storeView  `json:"store,omitempty"`
	Routes []routeView `json:"routes"`
	Events []eventView `json:"events"`
	// Clients are the proxy's clients with what they used, by tag
	// (clients.go); /status shows them to operators only, as it is.
	Clients []clientReport `json:"clients,omitempty"`
	// Reload is the outcome of the last reload of the configuration;
	// absent before any.
	Reload *reloadView `json:"reload,omitempty"`
}

// routeView is one upstream route.
type routeView struct {
	Name string `json:"name"`
	URL  string `json:"url"`
	// BenchedUntil is when the route is back in rotation; zero when it is
	// not benched.
	BenchedUntil time.Time `json:"benched_until,omitzero"`
	Keys         []keyView `json:"keys"`
	// Accounts are the accounts of the route's keys that have a budget or
	// have spent, with their spend; nil when none has.
	Accounts []accountView `json:"accounts,omitempty"`
}

// accountView is an account's spend: what the keys naming it spent
// together.
type accountView struct {
	Name  string    `json:"name"`
	Spend spendView `json:"spend"`
}

// spendView is what a key or an account spent today and this month, in US
// dollars, against its budget (a zero cap is none). Days and months are
// the pool's calendar's: midnight UTC unless calendar_day says otherwise.
type spendView struct {
	Today    float64 `json:"today"`
	Month    float64 `json:"month"`
	PerDay   float64 `json:"per_day,omitempty"`
	PerMonth float64 `json:"per_month,omitempty"`
}

// viewSpend reads what was spent against a budget; nil when there is no
// budget and nothing was spent.
func viewSpend(spent, budget keypool.Budget) *spendView {
	if spent == (keypool.Budget{}) && budget == (keypool.Budget{}) {
		return nil
	}
	return &spendView{Today: spent.PerDay, Month: spent.PerMonth, PerDay: budget.PerDay, PerMonth: budget.PerMonth}
}

// spentPeriod returns the period whose budget is spent — "month" or "day"
// (the month first: it lasts longer) — or "".
func (s *spendView) spentPeriod() string {
	switch {
	case s == nil:
		return ""
	case s.PerMonth > 0 && s.Month >= s.PerMonth:
		return "month"
	case s.PerDay > 0 && s.Today >= s.PerDay:
		return "day"
	}
	return ""
}

// keyView is one key of a route.
type keyView struct {
	ID   string `json:"id"`
	Paid bool   `json:"paid"`
	// Account is the account whose windows the key shares; empty when it
	// names none.
	Account string `json:"account,omitempty"`
	// State is "serving", "benched", "full" (a window at its limit) or
	// "disabled" (an operator took it out of rotation: Disabled says who).
	State    string        `json:"state"`
	Disabled *disabledView `json:"disabled,omitempty"`
	// Bench is the bench that holds the key: for every model, or — when
	// BenchModel is set — for that model; zero when none does.
	Bench      benchView `json:"bench,omitzero"`
	BenchModel string    `json:"bench_model,omitempty"`
	// Full names the window that is at its limit when State is "full":
	// "minute" or "day" (the pool's count), "vendor" (the vendor said its
	// window is used up until FullUntil), or "budget-day" or
	// "budget-month" (the key's or its account's budget is spent).
	Full      string           `json:"full,omitempty"`
	FullUntil time.Time        `json:"full_until,omitzero"`
	Sent      int64            `json:"sent"`
	Answers   map[string]int64 `json:"answers,omitempty"`
	// Conversations counts the conversations that stay on the key.
	Conversations int         `json:"conversations,omitempty"`
	Models        []modelView `json:"models"`
	// Last is what the vendor last said of the key's windows; nil when it
	// has said nothing.
	Last *readingView `json:"last,omitempty"`
	// Spend is what the key spent against its own budget; nil when it has
	// no budget and has spent nothing. Its account's is the route's.
	Spend *spendView `json:"spend,omitempty"`
	// Cap is the key's use across all its models against its cap
	// (key_cap); nil when it has none. A cap at its limit makes the key
	// full, as a model's window does.
	Cap *capView `json:"cap,omitempty"`
}

// disabledView says who took a key out of rotation, and when.
type disabledView struct {
	By string    `json:"by"`
	At time.Time `json:"at,omitzero"` // zero for a record that could not be read
}

// capView is a key's use of its cap: the minute and the day, across its
// models.
type capView struct {
	Minute windowView `json:"minute"`
	Day    windowView `json:"day"`
}

// viewCap reads a key's use of its cap; nil without a cap.
func viewCap(used keypool.Usage, l keypool.Limits) *capView {
	if l.RPM == 0 && l.RPD == 0 && l.TPM == 0 && l.TPD == 0 {
		return nil
	}
	return &capView{
		Minute: windowView{Requests: used.MinuteRequests, RequestsLimit: l.RPM, Tokens: used.MinuteTokens, TokensLimit: l.TPM},
		Day:    windowView{Requests: used.DayRequests, RequestsLimit: l.RPD, Tokens: used.DayTokens, TokensLimit: l.TPD},
	}
}

// kindName is a keypool.Kind as /status writes it, by name ("rate"), which
// the status command reads back.
type kindName keypool.Kind

func (k kindName) String() string { return keypool.Kind(k).String() }

func (k kindName) MarshalText() ([]byte, error) { return keypool.Kind(k).MarshalText() }

func (k *kindName) UnmarshalText(b []byte) error {
	for kind := keypool.KindNone; kind <= keypool.KindTransient; kind++ {
		if kind.String() == string(b) {
			*k = kindName(kind)
			return nil
		}
	}
	return fmt.Errorf("unknown kind %q", b)
}

// benchView is one bench: its kind, the reason in words, and when it ends.
type benchView struct {
	Kind   kindName  `json:"kind"`
	Reason string    `json:"reason"`
	Until  time.Time `json:"until"`
	// Level is the bench's level (quota answers without a date
	// since the last success); zero when none.
	Level int `json:"level,omitempty"`
}

// modelView is a key's use of one model against the limits the pool
// enforces — axis by axis the tighter of those configured and those the
// vendor stated (learned) — with both; a zero limit is no limit.
type modelView struct {
	Model      string     `json:"model"`
	Bench      benchView  `json:"bench,omitzero"`
	Minute     windowView `json:"minute"`
	Day        windowView `json:"day"`
	Configured limitsView `json:"configured,omitzero"`
	Learned    limitsView `json:"learned,omitzero"`
	Enforced   limitsView `json:"enforced,omitzero"`
}

// limitsView is a set of limits; a zero field is no limit.
type limitsView struct {
	RPM int64 `json:"rpm,omitempty"`
	RPD int64 `json:"rpd,omitempty"`
	TPM int64 `json:"tpm,omitempty"`
	TPD int64 `json:"tpd,omitempty"`
}

func viewLimits(l keypool.Limits) limitsView {
	return limitsView{RPM: l.RPM, RPD: l.RPD, TPM: l.TPM, TPD: l.TPD}
}

// windowView is one window's use and the limits enforced on it; a
// *Learned field says the limit is the one the vendor stated, tighter
// than any configured.
type windowView struct {
	Requests        int64 `json:"requests"`
	RequestsLimit   int64 `json:"requests_limit,omitempty"`
	RequestsLearned bool  `json:"requests_limit_learned,omitempty"`
	Tokens          int64 `json:"tokens"`
	TokensLimit     int64 `json:"tokens_limit,omitempty"`
	TokensLearned   bool  `json:"tokens_limit_learned,omitempty"`
}

// learned reports whether the enforced limit of an axis is the vendor's:
// it is set, and the configured one is not, or is looser.
func learned(enforced, configured, vendor int64) bool {
	return enforced != 0 && enforced == vendor && (configured == 0 || vendor < configured)
}

// full reports whether the window is at one of its limits.
func (w windowView) full() bool {
	return (w.RequestsLimit > 0 && w.Requests >= w.RequestsLimit) || (w.TokensLimit > 0 && w.Tokens >= w.TokensLimit)
}

// readingView is the vendor's last reading of a key's window.
type readingView struct {
	At          time.Time `json:"at"`
	Model       string    `json:"model,omitempty"`
	Window      string    `json:"window,omitempty"`
	Utilization float64   `json:"utilization"`
	ResetAt     time.Time `json:"reset_at,omitzero"`
}

// viewRoutes reads the routes' status at now.
func viewRoutes(routes []keypool.RouteStatus, now time.Time) []routeView {
	out := make([]routeView, 0, len(routes))
	for _, r := range routes {
		rv := routeView{Name: r.Name, URL: displayURL(r.URL), Keys: make([]keyView, 0, len(r.Keys))}
		if r.BenchedUntil.After(now) {
			rv.BenchedUntil = r.BenchedUntil
		}
		for _, k := range r.Keys {
			rv.Keys = append(rv.Keys, viewKey(k, now))
			if k.Account == "" || slices.ContainsFunc(rv.Accounts, func(a accountView) bool { return a.Name == k.Account }) {
				continue
			}
			if sv := viewSpend(k.AccountSpent, k.AccountBudget); sv != nil {
				rv.Accounts = append(rv.Accounts, accountView{Name: k.Account, Spend: *sv})
			}
		}
		out = append(out, rv)
	}
	return out
}

// displayURL is an upstream URL as the status shows it: without a user,
// password or query, which may hold a secret.
func displayURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}

// viewKey reads one key's stats at now.
func viewKey(k keypool.KeyStats, now time.Time) keyView {
	kv := keyView{ID: k.ID, Paid: k.Paid, Account: k.Account, State: "serving", Sent: k.Sent, Conversations: k.Conversations, Models: []modelView{},
		Spend: viewSpend(k.Spent, k.Budget)}
	if len(k.Answers) > 0 {
		kv.Answers = map[string]int64{}
		for kind, n := range k.Answers {
			kv.Answers[kind.String()] = n
		}
	}
	kv.Bench = viewBench(k.Bench, 0, now)
	for _, m := range k.Models {
		e, c, l := m.Limits, m.Configured, m.Learned
		mv := modelView{
			Model: m.Model,
			Bench: viewBench(m.Bench, m.Level, now),
			Minute: windowView{Requests: m.Usage.MinuteRequests, RequestsLimit: e.RPM, RequestsLearned: learned(e.RPM, c.RPM, l.RPM),
				Tokens: m.Usage.MinuteTokens, TokensLimit: e.TPM, TokensLearned: learned(e.TPM, c.TPM, l.TPM)},
			Day: windowView{Requests: m.Usage.DayRequests, RequestsLimit: e.RPD, RequestsLearned: learned(e.RPD, c.RPD, l.RPD),
				Tokens: m.Usage.DayTokens, TokensLimit: e.TPD, TokensLearned: learned(e.TPD, c.TPD, l.TPD)},
			Configured: viewLimits(c), Learned: viewLimits(l), Enforced: viewLimits(e),
		}
		wholeKey := kv.BenchModel == "" && !kv.Bench.Until.IsZero()
		if !wholeKey && mv.Bench.Until.After(kv.Bench.Until) {
			kv.Bench, kv.BenchModel = mv.Bench, m.Model
		}
		switch {
		case mv.Day.full():
			kv.Full = "day"
		case mv.Minute.full() && kv.Full == "":
			kv.Full = "minute"
		}
		kv.Models = append(kv.Models, mv)
	}
	// The cap counts every model together: at its limit, no model of the
	// key is served, though none is full on its own.
	if kv.Cap = viewCap(k.Cap, k.CapLimits); kv.Cap != nil {
		switch {
		case kv.Cap.Day.full():
			kv.Full = "day"
		case kv.Cap.Minute.full() && kv.Full == "":
			kv.Full = "minute"
		}
	}
	if kv.Full != "day" {
		// A spent budget passes the key over until the next day or month.
		p := kv.Spend.spentPeriod()
		if ap := viewSpend(k.AccountSpent, k.AccountBudget).spentPeriod(); p == "" || ap == "month" {
			p = ap
		}
		if p != "" {
			kv.Full = "budget-" + p
		}
	}
	if !k.LastAt.IsZero() {
		kv.Last = &readingView{At: k.LastAt, Model: k.Last.Model, Window: string(k.Last.Window),
			Utilization: k.Last.Utilization}
		if !k.Last.ResetAt.IsZero() {
			kv.Last.ResetAt = k.Last.ResetAt
		}
		// The pool sends a key nothing its vendor said it cannot take.
		if kv.Full == "" && k.Last.Utilization >= 1 && k.Last.ResetAt.After(now) {
			kv.Full, kv.FullUntil = "vendor", k.Last.ResetAt
		}
	}
	switch {
	case k.Disabled != nil:
		kv.State, kv.Disabled = "disabled", &disabledView{By: k.Disabled.By, At: k.Disabled.At}
	case !kv.Bench.Until.IsZero():
		kv.State = "benched"
	case kv.Full != "":
		kv.State = "full"
	}
	return kv
}

// viewBench reads a bench at now: zero unless it holds past now.
func viewBench(b keypool.Bench, level int, now time.Time) benchView {
	if !b.Until.After(now) {
		return benchView{}
	}
	return benchView{Kind: kindName(b.Kind), Reason: benchReason(b.Kind), Until: b.Until, Level: level}
}

// benchReason says in words what benched a key.
func benchReason(k keypool.Kind) string {
	switch k {
	case keypool.KindRate:
		return "throttled by the vendor"
	case keypool.KindQuota:
		return "quota or balance spent"
	case keypool.KindAuth:
		return "revoked or not authorized"
	case keypool.KindTransient:
		return "vendor errors"
	}
	return k.String()
}

// viewStore reads what a state directory holds at now, a route per
// provider (a proxy's route names its pool's provider), keys by ID, then
// accounts as "account NAME". The store keeps no counters of requests
// sent, nor limits; and a key of an account keeps state of its own only
// when it has some apart from its account's windows (a bench, spend).
func viewStore(ctx context.Context, store *keypool.BadgerStore, now time.Time) ([]routeView, error) {
	type stored struct {
		provider, keyID string
		account         bool // keyID is an account's (AccountID)
	}
	var keys []stored
	disabled := map[string]map[string]keypool.Disabled{} // by provider
	for provider, keyID := range store.Keys() {
		_, account := strings.CutPrefix(keyID, keypool.AccountID(""))
		keys = append(keys, stored{provider, keyID, account})
		if _, ok := disabled[provider]; !ok {
			d, err := store.Disabled(ctx, provider)
			if err != nil {
				return nil, err
			}
			disabled[provider] = d
		}
	}
	slices.SortFunc(keys, func(a, b stored) int {
		return cmp.Or(strings.Compare(a.provider, b.provider), compareBool(a.account, b.account), strings.Compare(a.keyID, b.keyID))
	})
	var routes []routeView
	for _, sk := range keys {
		ks, err := store.State(ctx, sk.provider, sk.keyID, now)
		if err != nil {
			return nil, err
		}
		ks.ID = storedName(sk.keyID)
		if d, ok := disabled[sk.provider][sk.keyID]; ok {
			d.By = storedName(d.By)
			ks.Disabled = &d
		}
		slices.SortFunc(ks.Models, func(a, b keypool.ModelStats) int { return strings.Compare(a.Model, b.Model) })
		kv := viewKey(ks, now)
		if n := len(routes); n > 0 && routes[n-1].Name == sk.provider {
			routes[n-1].Keys = append(routes[n-1].Keys, kv)
			continue
		}
		routes = append(routes, routeView{Name: sk.provider, Keys: []keyView{kv}})
	}
	return routes, nil
}

// compareBool orders false before true.
func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// storedName is how the status shows an ID a store keeps state under: a
// key's ID, or "account NAME" for an account's (the store keeps it under
// AccountID, which starts with a NUL); any other control character is
// quoted, never written out.
func storedName(id string) string {
	if name, ok := strings.CutPrefix(id, keypool.AccountID("")); ok {
		id = "account " + name
	}
	if strings.ContainsFunc(id, unicode.IsControl) {
		return strconv.QuoteToGraphic(id)
	}
	return id
}

// stateWords says a key's state in words at now: "serving", "full this
// minute", "benched: revoked or not authorized; back in 4 h 12 min, 18:47".
func stateWords(k keyView, now time.Time) string {
	switch k.State {
	case "disabled":
		d := k.Disabled
		switch {
		case d == nil:
			return "disabled"
		case d.At.IsZero():
			return "disabled by " + d.By
		}
		return "disabled by " + d.By + " " + since(d.At, now)
	case "benched":
		s := "benched (" + k.Bench.Kind.String() + ")"
		if k.BenchModel != "" {
			s += " for " + k.BenchModel
		}
		return s + ", " + backIn(k.Bench.Until, now)
	case "full":
		switch k.Full {
		case "day":
			return "full today"
		case "vendor":
			return "full at the vendor, " + backIn(k.FullUntil, now)
		case "budget-day":
			return "budget spent for today"
		case "budget-month":
			return "budget spent for this month"
		}
		return "full this minute"
	}
	return k.State
}

// backIn says when a bench ends, relative to now and on the clock:
// "back in 4 h 12 min, 18:47"; a day or more away, the clock names the
// day: "back in 2 d 3 h, Tue 09:00".
func backIn(until, now time.Time) string {
	return "back in " + span(until.Sub(now)) + ", " + clockOf(until, now)
}

// since says when something happened, relative to now and on the clock:
// "since 14:03, 3 min ago".
func since(at, now time.Time) string {
	return "since " + clockOf(at, now) + ", " + span(now.Sub(at)) + " ago"
}

// clockOf reads t on the local clock, with its weekday when it is not
// today's or is a day or more from now.
func clockOf(t, now time.Time) string {
	if d := t.Sub(now); t.Local().YearDay() != now.Local().YearDay() || d >= 24*time.Hour || d <= -24*time.Hour {
		return t.Local().Format("Mon 15:04")
	}
	return t.Local().Format("15:04")
}

// span says a duration in words, to the two largest units: "42 s",
// "3 min 20 s", "4 h 12 min", "2 d 3 h".
func span(d time.Duration) string {
	d = max(d, 0).Round(time.Second)
	days, hours := int64(d/(24*time.Hour)), int64(d/time.Hour)%24
	mins, secs := int64(d/time.Minute)%60, int64(d/time.Second)%60
	switch {
	case days > 0:
		return fmt.Sprintf("%d d %d h", days, hours)
	case hours > 0:
		return fmt.Sprintf("%d h %d min", hours, mins)
	case mins >= 10:
		return fmt.Sprintf("%d min", mins)
	case mins > 0:
		return fmt.Sprintf("%d min %d s", mins, secs)
	}
	return fmt.Sprintf("%d s", secs)
}
