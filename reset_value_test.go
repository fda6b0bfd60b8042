package keypool

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// now is the instant the synthetic cases are read at.
var now = time.Date(2025, 3, 4, 10, 11, 12, 0, time.UTC)

func TestParseWait(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     time.Duration
		ok       bool
	}{
		{"seconds", "7", 7 * time.Second, true},
		{"fractional seconds", "1.5", 1500 * time.Millisecond, true},
		{"many fractional digits", "33011.382867097855", 33011382867098, true},
		{"zero", "0", 0, true},
		{"spaces", " 7 ", 7 * time.Second, true},
		{"go duration seconds", "1s", time.Second, true},
		{"go duration minutes", "6m0s", 6 * time.Minute, true},
		{"go duration milliseconds", "20ms", 20 * time.Millisecond, true},
		{"go duration fractional", "2m59.56s", 2*time.Minute + 59560*time.Millisecond, true},
		{"go duration days of hours", "114h18m0s", 114*time.Hour + 18*time.Minute, true},
		{"go duration beyond the cap", "9999h", maxHorizon, true},
		{"rfc 3339 ahead", "2025-03-04T10:12:12Z", time.Minute, true},
		{"rfc 3339 with offset", "2025-03-04T11:12:12+01:00", time.Minute, true},
		{"rfc 3339 past", "2025-03-04T10:00:00Z", 0, true},
		{"rfc 3339 a second past", now.Add(-time.Second).Format(time.RFC3339), 0, true},
		{"rfc 3339 with a fraction", "2025-03-04T10:11:12.5Z", 500 * time.Millisecond, true},
		{"rfc 3339 a second within the cap", now.Add(maxHorizon - time.Second).Format(time.RFC3339), maxHorizon - time.Second, true},
		{"rfc 3339 a second beyond the cap", now.Add(maxHorizon + time.Second).Format(time.RFC3339), maxHorizon, true},
		{"http-date rfc 1123", "Tue, 04 Mar 2025 10:11:19 GMT", 7 * time.Second, true},
		{"http-date rfc 850", "Tuesday, 04-Mar-25 10:11:19 GMT", 7 * time.Second, true},
		{"http-date ansi c", "Tue Mar  4 10:11:19 2025", 7 * time.Second, true},
		{"http-date past", "Tue, 04 Mar 2025 09:00:00 GMT", 0, true},
		{"epoch seconds", strconv.FormatInt(now.Unix()+60, 10), time.Minute, true},
		{"epoch seconds fractional", strconv.FormatInt(now.Unix()+60, 10) + ".5", 60500 * time.Millisecond, true},
		{"epoch seconds past", strconv.FormatInt(now.Unix()-60, 10), 0, true},
		{"epoch milliseconds", strconv.FormatInt(now.UnixMilli()+1500, 10), 1500 * time.Millisecond, true},
		{"epoch milliseconds far", "99999999999999999", maxHorizon, true},
		{"epoch seconds far", "9999999999", maxHorizon, true},
		{"epoch seconds a second within the cap", strconv.FormatInt(now.Add(maxHorizon-time.Second).Unix(), 10), maxHorizon - time.Second, true},
		{"countdown beyond the cap", "100000000", maxHorizon, true},
		{"huge number", "1e300", maxHorizon, true},
		{"empty", "", 0, false},
		{"negative", "-5", 0, false},
		{"negative duration", "-5s", 0, false},
		{"nan", "NaN", 0, false},
		{"infinity", "+Inf", 0, false},
		{"infinity word", "Inf", 0, false},
		{"garbage", "soon", 0, false},
		{"garbage date", "2025-13-45T99:99:99Z", 0, false},
		{"garbage http-date", "Tue, 99 Foo 2025 10:11:19 GMT", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := parseWait(tc.in, now)
			assert.Equal(t, tc.ok, ok, "parseWait(%q) ok = %v, want %v", tc.in, ok, tc.ok)
			assert.Equal(t, tc.want, got, "parseWait(%q) = %v, want %v", tc.in, got, tc.want)
		})
	}
}

func TestParseMillis(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     time.Duration
		ok       bool
	}{
		{"whole", "1500", 1500 * time.Millisecond, true},
		{"fractional", "0.5", 500 * time.Microsecond, true},
		{"beyond the cap", "1e20", maxHorizon, true},
		{"negative", "-1", 0, false},
		{"duration is not millis", "20ms", 0, false},
		{"empty", "", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := parseMillis(tc.in)
			assert.Equal(t, tc.ok, ok, "parseMillis(%q) ok = %v, want %v", tc.in, ok, tc.ok)
			assert.Equal(t, tc.want, got, "parseMillis(%q) = %v, want %v", tc.in, got, tc.want)
		})
	}
}

// FuzzSimpleDuration holds simpleDuration to time.ParseDuration wherever it
// reads a duration.
func FuzzSimpleDuration(f *testing.F) {
	for _, seed := range []string{"6ms", "0s", "30m", "2h", "12ns", "7us", "9223372036s", "999999999999h", "6m0s", "1.5s", "5µs", "ms", "10x"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		n, digits := leadingWhole(v)
		got, ok := simpleDuration(v, n, digits)
		if !ok {
			return
		}
		want, err := time.ParseDuration(v)
		if err != nil || got != want {
			t.Fatalf("simpleDuration(%q) = %v, want %v (%v) as time.ParseDuration reads it", v, got, want, err)
		}
	})
}

// FuzzRFC3339UTC holds rfc3339UTC to time.Parse wherever it reads a time.
func FuzzRFC3339UTC(f *testing.F) {
	for _, seed := range []string{"2025-04-30T13:32:11Z", "2024-02-29T00:00:00Z", "2023-02-29T00:00:00Z", "0000-01-01T00:00:00Z",
		"0000-03-01T00:00:00Z", "9999-12-31T23:59:59Z", "1969-12-31T23:59:59Z", "2025-04-31T00:00:00Z", "2025-04-30T24:00:00Z",
		"2025-04-30T13:32:60Z", "2025-04-30T13:32:11+01:00", "2025-04-30t13:32:11z", "2025-13-01T00:00:00Z"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		got, ok := rfc3339UTC(v)
		if !ok {
			return
		}
		want, err := time.Parse(time.RFC3339, v)
		if err != nil || got != want.Unix() || want.Nanosecond() != 0 {
			t.Fatalf("rfc3339UTC(%q) = %d, want %d (%v) as time.Parse reads it", v, got, want.Unix(), err)
		}
	})
}

func TestRFC3339UTC(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Time
		ok   bool
	}{
		{"2025-04-30T13:32:11Z", time.Date(2025, 4, 30, 13, 32, 11, 0, time.UTC), true},
		{"2024-02-29T23:59:59Z", time.Date(2024, 2, 29, 23, 59, 59, 0, time.UTC), true},
		{"2000-02-29T00:00:00Z", time.Date(2000, 2, 29, 0, 0, 0, 0, time.UTC), true},
		{"0000-02-29T00:00:00Z", time.Date(0, 2, 29, 0, 0, 0, 0, time.UTC), true},
		{"0000-01-01T00:00:00Z", time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC), true},
		{"1969-12-31T23:59:59Z", time.Date(1969, 12, 31, 23, 59, 59, 0, time.UTC), true},
		{"9999-12-31T23:59:59Z", time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC), true},
		{"1900-02-29T00:00:00Z", time.Time{}, false},
		{"2025-04-31T00:00:00Z", time.Time{}, false},
		{"2025-00-01T00:00:00Z", time.Time{}, false},
		{"2025-04-30T24:00:00Z", time.Time{}, false},
		{"2025-04-30T13:60:00Z", time.Time{}, false},
		{"2025-04-30T13:32:60Z", time.Time{}, false},
		{"2025-04-30T13:32:11+00:00", time.Time{}, false},
		{"2025-04-30T13:32:11.5Z", time.Time{}, false},
		{"2025-04-30 13:32:11Z", time.Time{}, false},
		{"2025-4-30T13:32:11Z", time.Time{}, false},
	} {
		got, ok := rfc3339UTC(tc.in)
		if ok != tc.ok || ok && got != tc.want.Unix() {
			t.Errorf("rfc3339UTC(%q) = %d, %v, want %d, %v", tc.in, got, ok, tc.want.Unix(), tc.ok)
		}
	}
}

// FuzzParseWhole holds parseWhole, which reads eight digits at a time, to
// refParseWhole, which read one at a time.
func FuzzParseWhole(f *testing.F) {
	for _, seed := range []string{"", "0", "7", "1234567", "12345678", "123456789", "1000000000000", "999999999999999",
		"1234567890123456", "1234567/", "/2345678", "12345678:", "1234:678", "123456789012345", "0000000000"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		got, ok := parseWhole(v)
		if want, wantOK := refParseWhole(v); got != want || ok != wantOK {
			t.Fatalf("parseWhole(%q) = %d, %v, want %d, %v as refParseWhole reads it", v, got, ok, want, wantOK)
		}
	})
}

// FuzzParseNumber holds parseNumber, which reads a short decimal number
// itself, to refParseNumber, which left it to strconv.ParseFloat.
func FuzzParseNumber(f *testing.F) {
	for _, seed := range []string{"0.72", "1.0", "0.1", "0.3", "1.5", "33011.382867097855", "123456.789012345", "1234567.89012345",
		"9.99999999999999", "0.000000000000001", ".5", "5.", "1.2.3", "1e3", "-1.5", "+1.5", "1_0.5", "0x1p3", "NaN", ""} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		got, ok := parseNumber(v)
		if want, wantOK := refParseNumber(v); got != want || ok != wantOK {
			t.Fatalf("parseNumber(%q) = %v, %v, want %v, %v as refParseNumber reads it", v, got, ok, want, wantOK)
		}
	})
}
