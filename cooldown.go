package keypool

// Kind is the kind of outcome an answer is, and so how long it benches a key.
type Kind int

// The kinds of outcome.
const (
	// KindNone is a success, a bad request, an unknown model, a context that
	// is too long, or a network error before any answer: no bench, no
	// failover.
	KindNone Kind = iota
	// KindRate is a throttle: the key is benched until the short window
	// resets.
	KindRate
	// KindQuota is a spent window or balance: a daily, 5-hour, weekly or
	// monthly quota, or a billing condition.
	KindQuota
	// KindAuth is a revoked or unauthorized key.
	KindAuth
	// KindTransient is the vendor's bad moment (5xx, 529), not the key's.
	KindTransient
)

var kindNames = [...]string{"none", "rate", "quota", "auth", "transient"}

// String returns the kind's name: "none", "rate", "quota", "auth" or
// "transient".
func (k Kind) String() string {
	if k >= 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "unknown"
}
