package redisstore

import "strings"

// escape returns s with every byte that could break a key's layout — the
// separator ':', the hash tag's braces, '%' itself, spaces, control and
// non-ASCII bytes — written as %XX. Distinct strings stay distinct, and the
// result never holds ':', '{' or '}'.
func escape(s string) string {
	n := 0
	for i := range len(s) {
		if needsEscape(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(s) + 2*n)
	for i := range len(s) {
		c := s[i]
		if needsEscape(c) {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

func needsEscape(c byte) bool {
	return c <= ' ' || c >= 0x7f || c == ':' || c == '{' || c == '}' || c == '%'
}

// keyNames builds the names of a key's Redis keys. Every name of a pool
// carries the pool's hash tag, so that a script can touch them all on
// Redis Cluster.
type keyNames struct {
	base string // "<prefix>:{<provider>}:"
	key  string // the escaped key ID
}

func names(prefix, provider, keyID string) keyNames {
	return keyNames{base: prefix + ":{" + poolTag(provider) + "}:", key: escape(keyID)}
}

// poolTag returns the pool's hash tag, the escaped provider: "%" for "", as
// "{}" is no hash tag to Redis Cluster, which would place each key of the
// pool by its whole name. No escaped name is "%" alone.
func poolTag(provider string) string {
	if provider == "" {
		return "%"
	}
	return escape(provider)
}

// affinityName is the name of the key a conversation of a pool stays on,
// under the pool's hash tag.
func affinityName(prefix, provider, conversation string) string {
	return prefix + ":{" + poolTag(provider) + "}:a:" + escape(conversation)
}

// disabledName is the name of the hash of a pool's keys out of rotation
// (keypool.DisabledStore): a field for each key ID.
func disabledName(prefix, provider string) string {
	return prefix + ":{" + poolTag(provider) + "}:d"
}

// index is the key's index: the models it knows, its latest take, how its
// days count.
func (n keyNames) index() string { return n.base + "i:" + n.key }

// benches holds the key's benches and levels.
func (n keyNames) benches() string { return n.base + "b:" + n.key }

// minute, day and calendar are the key's windows for a model: a sliding
// minute, a sliding day, a calendar day.
func (n keyNames) minute(model string) string { return n.base + "wm:" + n.key + ":" + escape(model) }
func (n keyNames) day(model string) string    { return n.base + "wd:" + n.key + ":" + escape(model) }
func (n keyNames) calendar(model string) string {
	return n.base + "wc:" + n.key + ":" + escape(model)
}

// capMinute, capDay and capCalendar are the key's windows across its
// models.
// spend holds what the key (or account) spent in a calendar day and month.
func (n keyNames) spend() string { return n.base + "s:" + n.key }

func (n keyNames) capMinute() string   { return n.base + "cm:" + n.key }
func (n keyNames) capDay() string      { return n.base + "cd:" + n.key }
func (n keyNames) capCalendar() string { return n.base + "cc:" + n.key }

// dayOf and capDayOf return the day window of a model, and of the key's
// cap: a calendar day or a sliding one.
func (n keyNames) dayOf(model string, calendar bool) string {
	if calendar {
		return n.calendar(model)
	}
	return n.day(model)
}
func (n keyNames) capDayOf(calendar bool) string {
	if calendar {
		return n.capCalendar()
	}
	return n.capDay()
}
