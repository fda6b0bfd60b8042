package vendorsim_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/keypool-go/keypool/internal/vendorsim"
)

// BenchmarkServeHTTP measures one accepted, non-streamed answer per dialect,
// without the network, so that the sim's own cost is known next to what it
// is used to measure; "+cache" with the prompt cache on, each request
// reading the last one's prompt.
func BenchmarkServeHTTP(b *testing.B) {
	for _, c := range []struct {
		d     vendorsim.Dialect
		cache *vendorsim.PromptCache
	}{
		{vendorsim.OpenAI, nil},
		{vendorsim.Anthropic, nil},
		{vendorsim.Gemini, nil},
		{vendorsim.OpenAI, &vendorsim.PromptCache{}},
	} {
		d, name := c.d, string(c.d)
		if c.cache != nil {
			name += "+cache"
		}
		b.Run(name, func(b *testing.B) {
			now := t0
			s, err := vendorsim.New(vendorsim.Config{
				Dialect:     d,
				Clock:       func() time.Time { now = now.Add(time.Millisecond); return now },
				History:     1000,
				Keys:        []vendorsim.Key{{Secret: "k", Limits: vendorsim.Limits{RPM: 1 << 20, TPM: 1 << 40}}},
				PromptCache: c.cache,
			})
			if err != nil {
				b.Fatal(err)
			}
			path := map[vendorsim.Dialect]string{
				vendorsim.OpenAI:    "/v1/chat/completions",
				vendorsim.Anthropic: "/v1/messages",
				vendorsim.Gemini:    "/v1beta/models/gemini-2.0-flash:generateContent",
			}[d]
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(chatBody))
				req.Header.Set("Authorization", "Bearer k")
				rec := httptest.NewRecorder()
				s.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatalf("status %d: %s", rec.Code, rec.Body)
				}
			}
		})
	}
}
