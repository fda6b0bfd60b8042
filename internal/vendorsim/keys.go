package vendorsim

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"time"
)

// Key is one API key the sim knows, and how the vendor treats it.
type Key struct {
	// Secret is the credential a request must carry. Required and unique.
	Secret string
	// ID labels the key in the sim's counters; default: Secret (the sim's
	// secrets are made up, so showing them is harmless). Unique.
	ID string
	// Limits are the key's request and token windows; a zero field is no
	// limit on that axis. A key with an Account leaves them zero.
	Limits Limits
	// Account, when set, names the account (a vendor's organisation or
	// project) whose windows the key shares with every key naming the same
	// account: Config.Accounts gives their limits, the sim enforces them as
	// it does a key's, and every answer of the key states the account's
	// windows. The key's other settings (Subscription, WeeklySpent, Script,
	// faults, Latency) stay the key's own.
	Account string
	// Revoked makes every answer an authentication error (401; Gemini's 400
	// API_KEY_INVALID).
	Revoked bool
	// NoCredit makes every answer the dialect's billing error: OpenAI's 429
	// insufficient_quota, an OpenAI-compatible vendor's 402, Anthropic's 400
	// "credit balance is too low", Gemini's 429 "prepayment credits are
	// depleted".
	NoCredit bool
	// WeeklySpent, when positive, says the key's weekly window is used up and
	// lifts this long after the server starts (on its clock). Until then
	// every answer is the dialect's long-window refusal: Anthropic's 429 with
	// anthropic-ratelimit-unified-* headers naming the 7d window, OpenAI's
	// 429 usage_limit_reached with resets_in_seconds, Gemini's per-day quota
	// 429 (Gemini has no weekly window). It makes the key subscription-style
	// (see Subscription).
	WeeklySpent time.Duration
	// Subscription, when set, makes the key subscription-style: its 5-hour
	// and 7-day budgets are enforced (a full one answers as WeeklySpent
	// does, naming the window that is full), and Anthropic answers carry the
	// anthropic-ratelimit-unified-* headers on every answer, faults
	// included.
	Subscription *Subscription
	// Script lists answers sent, in order, before the key answers as
	// configured; each is consumed by one request. An Answer with Status 0
	// lets that request be answered as configured.
	Script []Answer
	// FaultBurst makes the key's first FaultBurst requests after its script
	// answer with a fault.
	FaultBurst int
	// FaultRate is the fraction (0 to 1) of the key's requests answered with
	// a fault, drawn from a generator seeded by Config.Seed and the key's
	// position, so that the n-th request of a key faults or not the same
	// way on every run.
	FaultRate float64
	// FaultStatus is the status of a fault: a 5xx, or 529. Default: 529
	// (overloaded_error) for Anthropic, 503 (UNAVAILABLE) for Gemini, 500
	// (server_error) for OpenAI.
	FaultStatus int
	// Latency delays every answer of the key by this much real time (not the
	// sim's clock); a request's cancellation or Close cuts it short.
	Latency time.Duration
}

// Limits are a key's or an account's windows, enforced as exact sliding
// windows on the sim's clock. A zero field is no limit on that axis. Token
// windows count a request's actual total tokens (prompt plus completion).
// Windows count every model alike: a request counts in its key's (or its
// account's) windows whatever model it names.
type Limits struct {
	RPM int64 // requests per minute
	RPD int64 // requests per day (24 hours)
	TPM int64 // tokens per minute
	TPD int64 // tokens per day (24 hours)
}

// negative reports whether any limit is negative.
func (l Limits) negative() bool {
	return l.RPM < 0 || l.RPD < 0 || l.TPM < 0 || l.TPD < 0
}

// Subscription is a subscription-style key's request budget per window, like
// Anthropic's Claude plans or OpenAI's Codex plans. A zero field is no limit
// on that window, which then reports a utilization of 0.
type Subscription struct {
	FiveHour int64 // requests per 5 hours
	SevenDay int64 // requests per 7 days
}

// Answer is one scripted answer, sent as is: it bypasses limits, windows and
// the accepted-request history, and counts in the counters by its status.
type Answer struct {
	// Status is the HTTP status; 0 means "no script for this request".
	Status int
	// Header holds the answer's headers; may be nil.
	Header http.Header
	// Body is the answer's body.
	Body string
}

// The sim's windows.
const (
	minute   = time.Minute
	day      = 24 * time.Hour
	fiveHour = 5 * time.Hour
	sevenDay = 7 * 24 * time.Hour
)

// keyState is one key's configuration and vendor-side state.
type keyState struct {
	cfg     Key
	id      string
	index   int
	account *accountState // the account whose windows the key shares; nil for none

	// mu guards every field below. A decision takes the account's lock
	// after it, never before.
	mu          sync.Mutex
	last        time.Time // latest time used, so window times never go back
	script      int       // next script step
	faultsLeft  int
	rng         *rand.Rand
	own         windows // the key's own windows; unused when it has an account
	five, seven *slidingWindow
	counts      Counts
	history     []entry      // accepted requests: time and total tokens
	cache       *promptCache // the key's own prompt cache; nil when off or it has an account
}

// newKeyState returns the state of key k, the index-th of the
// configuration; account is the account k names, or nil.
func newKeyState(k Key, index int, seed uint64, account *accountState) *keyState {
	// Keep copies of what the caller could change later.
	k.Script = slices.Clone(k.Script)
	for i := range k.Script {
		k.Script[i].Header = k.Script[i].Header.Clone()
	}
	if k.Subscription != nil {
		sub := *k.Subscription
		k.Subscription = &sub
	}
	ks := &keyState{
		cfg:        k,
		id:         k.ID,
		index:      index,
		account:    account,
		faultsLeft: k.FaultBurst,
		rng:        rand.New(rand.NewPCG(seed, uint64(index))),
		own:        newWindows(k.Limits),
	}
	if ks.id == "" {
		ks.id = k.Secret
	}
	if s := k.Subscription; s != nil {
		ks.five = newWindow(fiveHour, s.FiveHour)
		ks.seven = newWindow(sevenDay, s.SevenDay)
	}
	return ks
}

// windows returns the windows the key is held to: its account's, or its
// own. The caller holds the key's lock, and the account's when there is one.
func (ks *keyState) windows() *windows {
	if ks.account != nil {
		return &ks.account.win
	}
	return &ks.own
}

// promptCache returns the prompt cache the key reads and writes: its
// account's, or its own; nil when the cache is off. The caller holds the
// key's lock, and the account's when there is one.
func (ks *keyState) promptCache() *promptCache {
	if ks.account != nil {
		return ks.account.cache
	}
	return ks.cache
}

// subscription reports whether the key answers subscription-style.
func (ks *keyState) subscription() bool {
	return ks.cfg.Subscription != nil || ks.cfg.WeeklySpent > 0
}

// validateKeys checks the keys of a configuration against its accounts.
func validateKeys(keys []Key, accounts map[string]Limits) error {
	if len(keys) == 0 {
		return errors.New("vendorsim: no keys")
	}
	secrets := make(map[string]bool, len(keys))
	ids := make(map[string]bool, len(keys))
	for i, k := range keys {
		id := k.ID
		if id == "" {
			id = k.Secret
		}
		_, listed := accounts[k.Account]
		switch {
		case k.Secret == "":
			return fmt.Errorf("vendorsim: key %d has no secret", i)
		case secrets[k.Secret]:
			return fmt.Errorf("vendorsim: key %d (%s) repeats a secret", i, id)
		case ids[id]:
			return fmt.Errorf("vendorsim: key %d repeats the ID %q", i, id)
		case k.Limits.negative():
			return fmt.Errorf("vendorsim: key %s has a negative limit", id)
		case k.Account != "" && !listed:
			return fmt.Errorf("vendorsim: key %s names account %q, which Config.Accounts does not list", id, k.Account)
		case k.Account != "" && k.Limits != (Limits{}):
			return fmt.Errorf("vendorsim: key %s sets Limits and names account %q: a key of an account is held to the account's limits", id, k.Account)
		case k.Subscription != nil && (k.Subscription.FiveHour < 0 || k.Subscription.SevenDay < 0):
			return fmt.Errorf("vendorsim: key %s has a negative subscription budget", id)
		case k.WeeklySpent < 0:
			return fmt.Errorf("vendorsim: key %s has a negative WeeklySpent", id)
		case k.FaultBurst < 0:
			return fmt.Errorf("vendorsim: key %s has a negative FaultBurst", id)
		case !(k.FaultRate >= 0 && k.FaultRate <= 1):
			return fmt.Errorf("vendorsim: key %s has FaultRate %v, want 0 to 1", id, k.FaultRate)
		case k.FaultStatus != 0 && (k.FaultStatus < 500 || k.FaultStatus > 599):
			return fmt.Errorf("vendorsim: key %s has FaultStatus %d, want 5xx", id, k.FaultStatus)
		case k.Latency < 0:
			return fmt.Errorf("vendorsim: key %s has a negative Latency", id)
		}
		for j, a := range k.Script {
			if a.Status != 0 && (a.Status < 200 || a.Status > 599) {
				return fmt.Errorf("vendorsim: key %s script step %d has status %d", id, j, a.Status)
			}
		}
		secrets[k.Secret] = true
		ids[id] = true
	}
	return nil
}
