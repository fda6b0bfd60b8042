package main

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"

	"github.com/keypool-go/keypool"
)

// The mistakes keypool itself finds. The command reads the file — its
// shape, durations, sizes, environment variables and key files — and leaves
// every rule of keys, limits, accounts and routes to keypool.New and
// keypool.NewFallback, which build the proxy: it asks them of each part of
// an upstream alone, beside a stand-in, so that each mistake names its
// field, and of the keys together. The reason is theirs; the command only
// says where.

// standIn is a key keypool.New takes, beside which one option or one part
// of a key is judged alone.
var standIn = keypool.Key{Secret: "keypool-check-stand-in", ID: "keypool-check-stand-in"}

// judge returns nil when keypool.New takes keys with opts, else its reason,
// without the prefixes that name the pool, the option and the key.
func judge(keys []keypool.Key, opts ...keypool.Option) error {
	p, err := keypool.New("check", keys, opts...)
	if err != nil {
		return innermost(err)
	}
	_ = p.Close()
	return nil
}

// innermost returns the error err wraps, through every single wrap:
// "keypool: check: WithLimits: negative limit…" gives "negative limit…".
func innermost(err error) error {
	for {
		var next error
		switch e := err.(type) {
		case interface{ Unwrap() error }:
			next = e.Unwrap()
		case interface{ Unwrap() []error }:
			if list := e.Unwrap(); len(list) == 1 {
				next = list[0]
			}
		}
		if next == nil {
			return err
		}
		err = next
	}
}

// judgeOption notes in m the mistake keypool.New finds in the option o of
// field, alone, and reports whether there was none.
func judgeOption(field string, o keypool.Option, m *mistakes) bool {
	if err := judge([]keypool.Key{standIn}, o); err != nil {
		m.add(&configError{field, err})
		return false
	}
	return true
}

// axis is one field of a limits.
type axis struct {
	name  string
	value int64
	only  keypool.Limits // the limits of this axis alone
}

func (l limits) axes() []axis {
	return []axis{
		{"rpm", l.RPM, keypool.Limits{RPM: l.RPM}},
		{"rpd", l.RPD, keypool.Limits{RPD: l.RPD}},
		{"tpm", l.TPM, keypool.Limits{TPM: l.TPM}},
		{"tpd", l.TPD, keypool.Limits{TPD: l.TPD}},
		{"in_flight", l.InFlight, keypool.Limits{InFlight: l.InFlight}},
	}
}

// judgeLimits notes in m the mistake keypool.New finds in each axis of l,
// given alone as the option opt makes, at field.rpm and so on, and reports
// whether there was none.
func judgeLimits(field string, l limits, opt func(keypool.Limits) keypool.Option, m *mistakes) bool {
	fine := true
	for _, a := range l.axes() {
		if a.value != 0 {
			if err := judge([]keypool.Key{standIn}, opt(a.only)); err != nil {
				m.add(limitMistake(field+"."+a.name, a.value, err))
				fine = false
			}
		}
	}
	return fine
}

// limitMistake says what keypool.New found wrong with a limit of value v at
// field: "-1 is negative", or its reason.
func limitMistake(field string, v int64, reason error) error {
	if v < 0 {
		return fieldErr(field, "%d is negative", v)
	}
	return &configError{field, reason}
}

// judgeEntry notes in m the mistakes keypool.New finds in what a key entry
// gives each of its keys — its id, limits, account and budget, each alone,
// then together — and reports whether there was none.
func judgeEntry(k keyRef, entry string, m *mistakes) bool {
	before := len(*m)
	part := func(field string, key keypool.Key) {
		if key.Secret == "" {
			key.Secret = standIn.Secret
		}
		if key.ID == "" {
			key.ID = standIn.ID
		}
		if err := judge([]keypool.Key{key}); err != nil {
			m.add(&configError{field, err})
		}
	}
	if k.ID != "" {
		part(entry+".id", keypool.Key{ID: k.ID})
	}
	for _, a := range k.Limits.axes() {
		if a.value != 0 {
			if err := judge([]keypool.Key{{Secret: standIn.Secret, ID: standIn.ID, Limits: a.only}}); err != nil {
				m.add(limitMistake(entry+".limits."+a.name, a.value, err))
			}
		}
	}
	if k.Account != "" {
		part(entry+".account", keypool.Key{Account: k.Account})
	}
	if k.Priority < 0 {
		m.addf(entry+".priority", "%d is negative", k.Priority)
	}
	judgeKeyBudget(entry, k.Budget, m)
	if len(*m) > before {
		return false
	}
	if err := judge([]keypool.Key{{Secret: standIn.Secret, ID: standIn.ID, Limits: k.Limits.pool(), Account: k.Account, Budget: k.Budget.pool()}}); err != nil {
		if k.Account != "" && k.Limits != (limits{InFlight: k.Limits.InFlight}) {
			m.addf(entry+".limits", "a key of an account has no limits of its own: set the account's in account_limits.%s", k.Account)
		} else {
			m.add(&configError{entry, err})
		}
		return false
	}
	return true
}

// judgeKeys asks keypool.New of a route's keys together, with the route's
// options, and returns those it takes. When it refuses them, it asks of
// each key alone — its secret, and the ID it was given by where it came
// from — and then of the rest together, noting each mistake in m.
func judgeKeys(keys []sourcedKey, opts []keypool.Option, m *mistakes) []sourcedKey {
	if judge(poolKeys(keys), opts...) == nil {
		return keys
	}
	var fine []sourcedKey
	for _, k := range keys {
		if err := judge([]keypool.Key{{Secret: k.Secret, ID: standIn.ID}}); err != nil {
			m.add(located(k, err))
			continue
		}
		if !k.idSet { // an ID the entry names is judged with the entry
			if err := judge([]keypool.Key{{Secret: standIn.Secret, ID: k.ID}}); err != nil {
				m.add(located(k, fmt.Errorf("its ID %q: %w", k.ID, err)))
				continue
			}
		}
		fine = append(fine, k)
	}
	return judgeTogether(fine, opts, m)
}

func poolKeys(keys []sourcedKey) []keypool.Key {
	out := make([]keypool.Key, 0, len(keys))
	for _, k := range keys {
		out = append(out, k.Key)
	}
	return out
}

// located is a mistake of key k, at its source: a key file's mistake says
// the line, a variable's its name.
func located(k sourcedKey, err error) error {
	if k.where != "" {
		err = fmt.Errorf("%s: %w", k.where, err)
	}
	return &configError{k.source, err}
}

// judgeTogether asks keypool.New of a route's keys together, with the
// route's options, each key having been taken alone. For each pair of keys
// it refuses — two keys of one secret, or of one ID, in any mix of
// entries, files and variables — it notes a mistake at the later key that
// names the earlier, and sets the later aside, until New takes the rest,
// which it returns. A refusal that names no pair is noted at the first
// key's entry, and the keys are set aside.
func judgeTogether(keys []sourcedKey, opts []keypool.Option, m *mistakes) []sourcedKey {
	for found := 0; len(keys) > 0 && found < maxMistakes; found++ {
		err := judge(poolKeys(keys), opts...)
		if err == nil {
			return keys
		}
		a, b, ok := clashingKeys(err)
		if !ok || a >= b || b >= len(keys) {
			m.add(&configError{keys[0].entry, err})
			return nil
		}
		m.add(clash(keys[a], keys[b], err))
		keys = slices.Delete(keys, b, b+1)
	}
	return keys
}

// sameKeys matches keypool.New's refusal of two keys of one secret or one
// ID: "keys 3 and 7 have the same secret".
var sameKeys = regexp.MustCompile(`^keys (\d+) and (\d+) have the same `)

// clashingKeys returns the indices of the two keys keypool.New's error err
// names, earlier first. New says which keys only in its text (it has no
// typed error for this yet), so this is the one place that reads it.
func clashingKeys(err error) (a, b int, ok bool) {
	match := sameKeys.FindStringSubmatch(err.Error())
	if match == nil {
		return 0, 0, false
	}
	a, errA := strconv.Atoi(match[1])
	b, errB := strconv.Atoi(match[2])
	return a, b, errA == nil && errB == nil
}

// clash is the mistake of key b beside the earlier key a: the same secret,
// the same ID, or New's reason.
func clash(a, b sourcedKey, reason error) error {
	switch {
	case a.Secret == b.Secret:
		return located(b, fmt.Errorf("the same secret as %s", a.name()))
	case a.ID == b.ID && b.idSet:
		return fieldErr(b.entry+".id", "%q is also the ID of %s", b.ID, a.name())
	case a.ID == b.ID:
		return located(b, fmt.Errorf("its ID %q is also the ID of %s: give one an id", b.ID, a.name()))
	}
	return located(b, fmt.Errorf("refused beside %s: %w", a.name(), reason))
}

// standInURL is a URL keypool.NewFallback takes.
var standInURL = &url.URL{Scheme: "https", Host: "stand-in.invalid"}

// judgeRoutes asks keypool.NewFallback of each route's URL and name, alone
// and then beside the routes before it, and notes each mistake in m at the
// field of the route, fields[i]. A route whose URL could not be read is
// left out: its mistake is noted.
func judgeRoutes(routes []routeSettings, fields []string, m *mistakes) {
	pool, err := keypool.New("check", []keypool.Key{standIn})
	if err != nil {
		m.add(&configError{"upstreams", err})
		return
	}
	defer pool.Close()
	var fine []keypool.Route
	var fineAt []int
	for i, r := range routes {
		if r.url == nil {
			continue
		}
		route := keypool.Route{Name: r.name, Pool: pool, URL: r.url}
		if _, err := keypool.NewFallback([]keypool.Route{route}); err != nil {
			m.addf(fields[i]+".url", "%q is not an http or https URL", r.url.Redacted())
			route.URL = standInURL // to judge its name beside the others
		}
		if _, err := keypool.NewFallback(append(slices.Clip(fine), route)); err != nil {
			other := slices.IndexFunc(fine, func(f keypool.Route) bool {
				_, err := keypool.NewFallback([]keypool.Route{f, route})
				return err != nil
			})
			if other < 0 {
				m.add(&configError{fields[i], innermost(err)})
			} else {
				m.addf(fields[i]+".name", "%q also names %s: give each upstream a name of its own", r.name, fields[fineAt[other]])
			}
			continue
		}
		if route.URL != standInURL {
			fine, fineAt = append(fine, route), append(fineAt, i)
		}
	}
}
