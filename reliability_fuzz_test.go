package keypool

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// The fuzz targets of this file cover the parsers the others leave out: a
// model in a URL path, the model a fallback renames in a body, the store's
// records as Badger holds them, and a vendor's whole answer as the
// transport reads it.

func FuzzModelFromPath(f *testing.F) {
	for _, p := range []string{
		"/v1beta/models/gemini-2.0-flash:generateContent",
		"/v1beta/tunedModels/my-tuned-abc123:generateContent",
		"/v1/projects/p/locations/us-central1/publishers/google/models/gemini-1.5-pro:streamGenerateContent",
		"/v1beta/models/gemini-pro:streamGenerateContent?alt=sse",
		"/openai/deployments/gpt4o-prod/chat/completions",
		"/v1/chat/completions", "/v1beta/models/:generateContent", "/models/", "",
	} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, path string) {
		m := modelFromPath(path)
		if strings.ContainsAny(m, ":/?") {
			t.Errorf("modelFromPath(%q) = %q, want a name without ':', '/' or '?'", path, m)
		}
		if m != "" && !strings.Contains(path, "/models/"+m) && !strings.Contains(path, "/tunedModels/"+m) &&
			!strings.Contains(path, "/deployments/"+m) {
			t.Errorf("modelFromPath(%q) = %q, want the name after a marker", path, m)
		}
	})
}

func FuzzMapModel(f *testing.F) {
	for _, tt := range requestCases {
		f.Add([]byte(tt.body), tt.want.Model, "renamed")
	}
	f.Add([]byte(`{"nested":{"model":"a"},"model":"a"}`), "a", `b"quoted`)
	f.Add([]byte(`{"model":"a"`), "a", "b")
	f.Fuzz(func(t *testing.T, body []byte, from, to string) {
		out := mapModel(body, map[string]string{from: to})
		if json.Valid(body) && !json.Valid(out) {
			t.Fatalf("mapModel(%q, %q→%q) = %q, not JSON", body, from, to, out)
		}
		// Where encoding/json reads the same text, the model is renamed
		// exactly when it is the one named, and nothing else changes.
		if !utf8.Valid(body) || !utf8.ValidString(to) {
			return
		}
		var top map[string]any
		if json.Unmarshal(body, &top) != nil {
			return
		}
		model, isString := top["model"].(string)
		if !isString || model != from {
			if !bytes.Equal(out, body) {
				t.Fatalf("mapModel(%q, %q→%q) = %q, want the body unchanged", body, from, to, out)
			}
			return
		}
		var got map[string]any
		require.NoError(t, json.Unmarshal(out, &got), "mapModel(%q) = %q", body, out)
		if got["model"] != to {
			t.Fatalf("mapModel(%q, %q→%q) names model %q", body, from, to, got["model"])
		}
		delete(got, "model")
		delete(top, "model")
		if fmt.Sprint(got) != fmt.Sprint(top) {
			t.Fatalf("mapModel(%q, %q→%q) = %q, changed more than the model", body, from, to, out)
		}
	})
}

// recordSeeds returns the records of a key with windows and benches on two
// models and its cap, as the Badger store writes them.
func recordSeeds(tb testing.TB) (windowsRec, benchesRec []byte) {
	tb.Helper()
	s := newMemoryStore()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for i, model := range []string{"gpt-4o", "gpt-4o-mini"} {
		for j := range 3 {
			_, err := s.Take(tb.Context(), Claim{Provider: "p", KeyID: "k", Model: model, Tokens: 100,
				Limits: Limits{RPM: 10, RPD: 100, TPM: 1000}, Cap: Limits{RPD: 1000},
				Now: now.Add(time.Duration(i*3+j) * 7 * time.Second)})
			require.NoError(tb, err)
		}
	}
	require.NoError(tb, s.Bench(tb.Context(), Bench{Provider: "p", KeyID: "k", Model: "gpt-4o", Kind: KindQuota,
		Until: now.Add(time.Hour), Level: 2}))
	require.NoError(tb, s.Bench(tb.Context(), Bench{Provider: "p", KeyID: "k", AllModels: true, Kind: KindAuth,
		Until: now.Add(12 * time.Hour)}))
	k := s.key("p", "k")
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.encodeWindows(nil), k.encodeBenches(nil)
}

// keySnapshot is what a memKey holds, comparable across two decodings.
type keySnapshot struct {
	Bench    benchState
	Cap      windows
	Last     int64
	BenchVer uint64
	Models   map[string]modelSnapshot
}

// modelSnapshot is what a memModel holds.
type modelSnapshot struct {
	Bench benchState
	Level int
	Win   windows
	HasW  bool
}

// snapshot returns what k holds, leaving out what encoding drops: model
// entries that hold nothing.
func snapshot(k *memKey) keySnapshot {
	s := keySnapshot{Bench: k.bench, Last: k.last, BenchVer: k.benchVer, Models: map[string]modelSnapshot{}}
	if k.cap != nil {
		s.Cap = *k.cap
	}
	for name, m := range k.models {
		ms := modelSnapshot{Bench: m.bench, Level: m.level, HasW: m.win != nil}
		if m.bench.until == 0 {
			ms.Bench = benchState{} // a bench that ends at 0 is none, of any kind
		}
		if !ms.HasW && ms.Bench == (benchState{}) && ms.Level == 0 {
			continue // an entry that holds nothing is not written
		}
		if m.win != nil {
			ms.Win = *m.win
		}
		s.Models[name] = ms
	}
	return s
}

// FuzzStoreRecords reads corrupt windows and benches records as a Badger
// store loads them: a record is refused with an error or read into a state
// that writes back to the same record and that the store then serves
// without a panic.
func FuzzStoreRecords(f *testing.F) {
	w, b := recordSeeds(f)
	f.Add(w, b, int64(1772366400))
	f.Add(w[:len(w)/2], b[:len(b)/2], int64(0))
	f.Add([]byte{windowsFormat}, []byte{benchesFormat}, int64(60))
	f.Fuzz(func(t *testing.T, windowsRec, benchesRec []byte, sec int64) {
		k := &memKey{models: map[string]*memModel{}}
		errW := k.decodeWindows(windowsRec)
		errB := k.decodeBenches(benchesRec)
		if errW != nil || errB != nil {
			return
		}
		again := &memKey{models: map[string]*memModel{}}
		require.NoError(t, again.decodeWindows(k.encodeWindows(nil)), "reading back windows read from %x", windowsRec)
		require.NoError(t, again.decodeBenches(k.encodeBenches(nil)), "reading back benches read from %x", benchesRec)
		require.Equal(t, snapshot(k), snapshot(again), "state read from %x and %x, written and read again", windowsRec, benchesRec)

		s := newMemoryStore()
		s.keys.Store(keyRef{"p", "k"}, k)
		now := fuzzNow(sec)
		days := calendar{}
		if sec%2 == 0 {
			days = calendar{loc: time.UTC}
		}
		models := []string{"new"}
		for name := range k.models {
			if name != overflowModel { // no request names the shared entry
				models = append(models, name)
			}
		}
		for _, model := range models {
			take := Claim{Provider: "p", KeyID: "k", Model: model, Tokens: 10,
				Limits: Limits{RPM: 5, RPD: 50, TPM: 500, TPD: 5000}, Cap: Limits{RPM: 10, RPD: 100}, DayZone: days.loc, DayHour: days.hour, Now: now}
			g, err := s.Take(t.Context(), take)
			require.NoError(t, err)
			if g.OK {
				require.NoError(t, g.Reservation.Settle(t.Context(), 3, 0))
				require.NoError(t, g.Reservation.Release(t.Context()))
			}
		}
		st, err := s.State(t.Context(), "p", "k", now)
		require.NoError(t, err)
		for _, m := range st.Models {
			if m.Usage.MinuteRequests < 0 || m.Usage.DayRequests < 0 || m.Usage.MinuteTokens < 0 || m.Usage.DayTokens < 0 {
				t.Fatalf("state read from %x serves negative usage %+v", windowsRec, m.Usage)
			}
		}
	})
}

// FuzzRoundTrip sends a request through a pool of two keys whose first key
// answers with the fuzzed status, headers and body and whose second answers
// 200. The caller gets one answer, never an error; a failure benches the
// first key for between a second and the longest bench, and the answer the
// caller gets reaches it byte for byte.
func FuzzRoundTrip(f *testing.F) {
	for _, a := range loadRecordedAnswers(f) {
		f.Add(a.Status, asLines(a.Headers), []byte(a.Body), a.Now.Unix())
	}
	f.Add(200, "Content-Type: text/event-stream\n", []byte("data: {\"usage\":{\"total_tokens\":7}}\n\n"), int64(0))
	f.Add(429, "Retry-After: NaN\nX-Ratelimit-Reset-Requests: -1s\n", []byte(`{"error":`), int64(1))
	f.Fuzz(func(t *testing.T, status int, lines string, body []byte, sec int64) {
		status = 200 + int(uint(status)%400)
		now := fuzzNow(sec)
		header := headerLines(lines)
		var ev evictions
		var readings []Reading
		pool, err := New("fuzz", []Key{{Secret: "sk-first", ID: "first"}, {Secret: "sk-second", ID: "second"}},
			WithClock(func() time.Time { return now }), WithLimits(Limits{RPM: 100, TPM: 1 << 40}),
			OnEvict(ev.add), OnRateLimit(func(r Reading) { readings = append(readings, r) }))
		require.NoError(t, err)
		defer pool.Close()
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Header.Get("Authorization") == "Bearer sk-second" {
				return okResponse(r), nil
			}
			return &http.Response{StatusCode: status, Header: header.Clone(), Body: io.NopCloser(bytes.NewReader(body)), Request: r}, nil
		})
		req, _ := http.NewRequest(http.MethodPost, "http://vendor.test/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
		resp, err := pool.Transport(base).RoundTrip(req)
		require.NoError(t, err)
		got, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		call := "RoundTrip(" + strconv.Itoa(status) + ", " + strconv.Quote(lines) + ", " + strconv.Quote(string(body)) + ")"
		if resp.StatusCode == status && !bytes.Equal(got, body) && len(ev.all()) == 0 {
			t.Fatalf("%s passed the body %q", call, got)
		}
		for _, e := range ev.all() {
			if e.For < time.Second || e.For > 12*time.Hour || !e.Until.Equal(now.Add(e.For)) {
				t.Errorf("%s benched %s for %v until %v, want 1s..12h from %v", call, e.KeyID, e.For, e.Until, now)
			}
		}
		for _, r := range readings {
			if math.IsNaN(r.Utilization) || r.Utilization < 0 || math.IsInf(r.Utilization, 0) ||
				!r.ResetAt.IsZero() && (r.ResetAt.Before(now) || r.ResetAt.After(now.Add(maxHorizon))) {
				t.Errorf("%s read %+v at %v", call, r, now)
			}
		}
	})
}
