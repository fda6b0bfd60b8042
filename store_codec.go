package keypool

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/keypool-go/keypool/internal/windowspec"
)

// A key's state is kept outside memory as two records: its windows and the
// limits it learned, written behind, and its benches and levels, written
// through. Both start
// with a format byte. Numbers are varints; a sliding window keeps only its
// buckets that are not empty.

// The record formats.
const (
	windowsFormat  = 5 // 2 before learned limits, 3 before spend, 4 before exact windows: read without them
	benchesFormat  = 1
	disabledFormat = 1
)

var errShortRecord = errors.New("record ends early")

// The record keys: a prefix naming the layout and the record, then the
// provider's length as a uvarint, the provider, and the key ID. The length
// keeps every (provider, key ID) pair apart, whatever bytes the two hold.
var (
	windowsPrefix  = []byte("kp2/w/")
	benchesPrefix  = []byte("kp2/b/")
	disabledPrefix = []byte("kp2/d/") // a key out of rotation (DisabledStore)
)

func recordKey(prefix []byte, ref keyRef) []byte {
	b := make([]byte, 0, len(prefix)+binary.MaxVarintLen64+len(ref.provider)+len(ref.keyID))
	b = append(b, prefix...)
	b = appendString(b, ref.provider)
	return append(b, ref.keyID...)
}

// parseRecordKey reads a key recordKey wrote under prefix.
func parseRecordKey(prefix, k []byte) (keyRef, bool) {
	r := reader{b: k[len(prefix):]}
	provider := r.string()
	if r.err != nil {
		return keyRef{}, false
	}
	return keyRef{provider, string(r.b)}, true
}

// The layout before kp2 joined the provider and the key ID with a NUL: a
// NUL in either made two pairs one key ("acme\x00eu"/"k1" and
// "acme"/"eu\x00k1").
var (
	legacyWindowsPrefix = []byte("kp1/w/")
	legacyBenchesPrefix = []byte("kp1/b/")
)

// parseLegacyRecordKey reads a key of the kp1 layout. It refuses a key
// with more than one NUL after the prefix: more than one pair could have
// written it. With exactly one, neither name held a NUL, and the pair is
// the one that wrote it.
func parseLegacyRecordKey(prefix, k []byte) (keyRef, bool) {
	rest := k[len(prefix):]
	if bytes.Count(rest, []byte{0}) != 1 {
		return keyRef{}, false
	}
	provider, keyID, _ := bytes.Cut(rest, []byte{0})
	return keyRef{string(provider), string(keyID)}, true
}

// encodeWindows appends k's windows to b. k.mu must be held.
func (k *memKey) encodeWindows(b []byte) []byte {
	b = append(b, windowsFormat)
	b = binary.AppendVarint(b, k.last)
	for _, p := range []period{k.spend.day, k.spend.month} {
		b = binary.AppendVarint(b, p.start)
		b = binary.AppendVarint(b, p.end)
		// What requests in flight reserve is written as spent: a
		// restart finds them ended, and the vendor may have counted them.
		b = binary.AppendVarint(b, p.spent+p.held)
	}
	b = append(b, boolByte(k.cap != nil))
	if k.cap != nil {
		b = k.cap.encode(b)
	}
	n := 0
	for _, m := range k.models {
		if m.win != nil || m.learned != (Limits{}) {
			n++
		}
	}
	b = binary.AppendUvarint(b, uint64(n))
	for name, m := range k.models {
		if m.win == nil && m.learned == (Limits{}) {
			continue
		}
		b = appendString(b, name)
		b = append(b, boolByte(m.win != nil))
		if m.win != nil {
			b = m.win.encode(b)
		}
		for _, v := range []int64{m.learned.RPM, m.learned.RPD, m.learned.TPM, m.learned.TPD} {
			b = binary.AppendUvarint(b, uint64(max(v, 0)))
		}
	}
	return b
}

// decodeWindows reads windows written by encodeWindows into k. k.mu must be
// held.
func (k *memKey) decodeWindows(b []byte) error {
	r := reader{b: b}
	f := r.byte()
	if f < 2 || f > windowsFormat {
		return fmt.Errorf("windows record of format %d", f)
	}
	k.last = r.varint()
	if f >= 4 {
		for _, p := range []*period{&k.spend.day, &k.spend.month} {
			p.start, p.end, p.spent = r.varint(), r.varint(), r.varint()
			if p.spent < 0 || p.end < p.start {
				r.fail(fmt.Errorf("spend of %d from %d to %d", p.spent, p.start, p.end))
			}
		}
	}
	if r.byte() != 0 {
		k.cap = &windows{}
		k.cap.decode(&r, f)
	}
	for n := r.uvarint(); n > 0 && r.err == nil; n-- {
		m := k.recordModel(r.string())
		if f == 2 || r.byte() != 0 {
			m.win = &windows{}
			m.win.decode(&r, f)
		}
		if f == 2 {
			continue
		}
		var l [4]int64
		for i := range l {
			v := r.uvarint()
			if v > math.MaxInt64 {
				r.fail(fmt.Errorf("learned limit %d", v))
			}
			l[i] = int64(v)
		}
		m.learned = Limits{RPM: l[0], RPD: l[1], TPM: l[2], TPD: l[3]}
	}
	return r.err
}

// encodeBenches appends k's benches and levels to b, with its bench version.
// k.mu must be held.
func (k *memKey) encodeBenches(b []byte) []byte {
	b = append(b, benchesFormat)
	b = binary.AppendUvarint(b, k.benchVer)
	b = k.bench.encode(b)
	n := 0
	for _, m := range k.models {
		if m.bench.until != 0 || m.level != 0 {
			n++
		}
	}
	b = binary.AppendUvarint(b, uint64(n))
	for name, m := range k.models {
		if m.bench.until != 0 || m.level != 0 {
			b = appendString(b, name)
			b = m.bench.encode(b)
			b = binary.AppendUvarint(b, uint64(m.level))
		}
	}
	return b
}

// benchesVersion returns the bench version of a record written by
// encodeBenches.
func benchesVersion(b []byte) (uint64, error) {
	r := reader{b: b}
	if f := r.byte(); f != benchesFormat {
		return 0, fmt.Errorf("benches record of format %d", f)
	}
	v := r.uvarint()
	return v, r.err
}

// decodeBenches reads benches written by encodeBenches into k. k.mu must be
// held.
func (k *memKey) decodeBenches(b []byte) error {
	r := reader{b: b}
	if f := r.byte(); f != benchesFormat {
		return fmt.Errorf("benches record of format %d", f)
	}
	k.benchVer = r.uvarint()
	k.bench.decode(&r)
	for n := r.uvarint(); n > 0 && r.err == nil; n-- {
		m := k.recordModel(r.string())
		m.bench.decode(&r)
		m.level = int(r.uvarint())
	}
	return r.err
}

// encodeDisabled returns the record of a key out of rotation: when, in
// Unix nanoseconds, and who.
func encodeDisabled(d Disabled) []byte {
	b := []byte{disabledFormat}
	b = binary.AppendVarint(b, d.At.UnixNano())
	return appendString(b, d.By)
}

// decodeDisabled reads a record encodeDisabled wrote.
func decodeDisabled(b []byte) (Disabled, error) {
	r := reader{b: b}
	if f := r.byte(); f != disabledFormat {
		return Disabled{}, fmt.Errorf("disabled record of format %d", f)
	}
	at := r.varint()
	d := Disabled{At: time.Unix(0, at).UTC(), By: r.string()}
	if r.err == nil && len(r.b) != 0 {
		r.fail(errors.New("disabled record has bytes past its end"))
	}
	return d, r.err
}

// recordModel returns the entry a record's model name is read into. A
// name no store takes (one written before names were bounded, or a corrupt
// one) is read into an entry the key does not keep: no request could reach
// it, and the rest of the record still counts. The entry models beyond the
// bound share is kept under its own name.
func (k *memKey) recordModel(name string) *memModel {
	if name != overflowModel && windowspec.CheckModel(name) != nil {
		return &memModel{}
	}
	return k.model(name, k.last, true)
}

func (b benchState) encode(buf []byte) []byte {
	buf = binary.AppendUvarint(buf, uint64(b.kind))
	return binary.AppendVarint(buf, b.until)
}

func (b *benchState) decode(r *reader) {
	b.kind = Kind(r.uvarint())
	b.until = r.varint()
	if b.kind < KindNone || int(b.kind) >= len(kindNames) {
		r.fail(fmt.Errorf("bench of kind %d", b.kind))
	}
}

func (w *windows) encode(b []byte) []byte {
	b = w.minute.encode(b, w.minuteBuckets())
	b = w.day.encode(b, w.dayBuckets())
	for _, v := range []int64{w.cal.start, w.cal.end, w.cal.requests, w.cal.tokens} {
		b = binary.AppendVarint(b, v)
	}
	return b
}

func (w *windows) decode(r *reader, format byte) {
	w.minute.decode(r, w.minuteBuckets(), format)
	w.day.decode(r, w.dayBuckets(), format)
	for _, v := range []*int64{&w.cal.start, &w.cal.end, &w.cal.requests, &w.cal.tokens} {
		*v = r.varint()
	}
}

func (s *sliding) encode(b []byte, bk buckets) []byte {
	b = append(b, boolByte(s.exact))
	b = binary.AppendVarint(b, s.head)
	n := 0
	for i := range bk.requests {
		if bk.requests[i] != 0 || bk.tokens[i] != 0 {
			n++
		}
	}
	b = binary.AppendUvarint(b, uint64(n))
	for i := range bk.requests {
		if bk.requests[i] != 0 || bk.tokens[i] != 0 {
			b = append(b, byte(i))
			b = binary.AppendUvarint(b, uint64(bk.requests[i]))
			b = binary.AppendUvarint(b, uint64(bk.tokens[i]))
		}
	}
	return b
}

func (s *sliding) decode(r *reader, bk buckets, format byte) {
	exact := format >= 5 && r.byte() != 0
	*s = sliding{head: r.varint(), exact: exact}
	clear(bk.requests)
	clear(bk.tokens)
	if s.head < 0 {
		r.fail(fmt.Errorf("window at bucket %d", s.head))
		return
	}
	last := -1 // encode writes the buckets in order, each once
	for n := r.uvarint(); n > 0 && r.err == nil; n-- {
		i := int(r.byte())
		req, tok := r.uvarint(), r.uvarint()
		if i >= len(bk.requests) || i <= last || req > math.MaxUint32 || tok > math.MaxUint32 {
			r.fail(fmt.Errorf("bucket %d of %d requests and %d tokens", i, req, tok))
			return
		}
		last = i
		bk.requests[i], bk.tokens[i] = uint32(req), uint32(tok)
		s.sumReq += int64(req)
		s.sumTok += int64(tok)
	}
	if s.exact {
		// A slot holds a time, not a count: the sums count entries, as
		// prune will at the next take.
		s.sumReq = 0
		for i := range bk.requests {
			if bk.requests[i] != 0 {
				s.sumReq++
			}
		}
	}
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// reader reads a record; the first failure sticks and later reads return
// zeros.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

func (r *reader) byte() byte {
	if r.err != nil || len(r.b) == 0 {
		r.fail(errShortRecord)
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if r.err != nil || n <= 0 {
		r.fail(errShortRecord)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	v, n := binary.Varint(r.b)
	if r.err != nil || n <= 0 {
		r.fail(errShortRecord)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) string() string {
	n := r.uvarint()
	if r.err != nil || n > uint64(len(r.b)) {
		r.fail(errShortRecord)
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}
