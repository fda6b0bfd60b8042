package vendorsim_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/keypool-go/keypool/internal/vendorsim"
)

// FuzzServeHTTP sends the sim arbitrary methods, paths, keys and bodies: it
// must never panic, and every JSON answer must be valid JSON.
func FuzzServeHTTP(f *testing.F) {
	f.Add(uint8(0), "POST", "/v1/chat/completions", "k", `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`)
	f.Add(uint8(1), "POST", "/v1/messages", "k", `{"max_tokens":3,"stream":true}`)
	f.Add(uint8(2), "POST", "/v1beta/models/x:streamGenerateContent?alt=sse", "k", `{"generationConfig":{"maxOutputTokens":2}}`)
	f.Add(uint8(2), "POST", "/v1beta/models/:generateContent", "k", `{}`)
	f.Add(uint8(0), "GET", "/", "", ``)
	f.Add(uint8(1), "POST", "/v1/messages", "nope", `{"max_tokens":"x"}`)
	f.Add(uint8(0), "POST", "/chat/completions", "k", `{"max_tokens":99999999999999999999}`)
	dialects := []vendorsim.Dialect{vendorsim.OpenAI, vendorsim.Anthropic, vendorsim.Gemini, vendorsim.OpenAICompatible}
	sims := make([]*vendorsim.Server, len(dialects))
	for i, d := range dialects {
		s, err := vendorsim.New(vendorsim.Config{
			Dialect: d,
			Clock:   func() time.Time { return t0 },
			Keys: []vendorsim.Key{{
				Secret: "k", Limits: vendorsim.Limits{RPM: 1000, TPM: 1 << 30},
				Subscription: &vendorsim.Subscription{FiveHour: 1000},
			}},
		})
		if err != nil {
			f.Fatal(err)
		}
		sims[i] = s
	}
	f.Fuzz(func(t *testing.T, dialect uint8, method, target, key, body string) {
		s := sims[int(dialect)%len(sims)]
		if !strings.HasPrefix(target, "/") {
			target = "/" + target
		}
		req, err := http.NewRequest(method, "http://sim"+target, strings.NewReader(body))
		if err != nil {
			return // not a request a client could send
		}
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		if rec.Code < 200 || rec.Code > 599 {
			t.Fatalf("status %d", rec.Code)
		}
		if rec.Header().Get("Content-Type") == "application/json" && !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("invalid JSON answer: %q", rec.Body.String())
		}
	})
}
