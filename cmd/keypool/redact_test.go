package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestRedactorString(t *testing.T) {
	r := newRedactor([]secretKey{
		{"sk-proj-AAAA1111bbbb2222wxyz", "one"},
		{"sk-proj-CCCC3333dddd4444qrst", "two"},
		{"AIza+Key/with=marks", "gem"},
		{"tiny", "t"},
		{"abc", "short"},
		{"sk-long-abc-0123456789", "long"},
	})
	tests := []struct {
		name, in, want string
	}{
		{"none", "nothing to see", "nothing to see"},
		{"whole", "key=sk-proj-AAAA1111bbbb2222wxyz&a=b", "key=[redacted:one]&a=b"},
		{"twice", "sk-proj-AAAA1111bbbb2222wxyz sk-proj-CCCC3333dddd4444qrst", "[redacted:one] [redacted:two]"},
		{"at the end", "x sk-proj-CCCC3333dddd4444qrst", "x [redacted:two]"},
		{"query escaped", "/v1?key=AIza%2BKey%2Fwith%3Dmarks", "/v1?key=[redacted:gem]"},
		{"query escaped, lower-case hex", "/v1?key=AIza%2bKey%2fwith%3dmarks", "/v1?key=[redacted:gem]"},
		{"path escaped", "/keys/AIza+Key%2Fwith=marks", "/keys/[redacted:gem]"},
		{"short secret", "abc and tiny", "[redacted:short] and [redacted:t]"},
		{"a short secret inside a long one", "k=sk-long-abc-0123456789", "k=[redacted:long]"},
		{"masked with stars, prefix and suffix", "Incorrect API key provided: sk-proj-AA****************wxyz. You can", "Incorrect API key provided: [redacted:one]. You can"},
		{"masked with dots", "key sk-proj-CC...qrst is invalid", "key [redacted:two] is invalid"},
		{"masked with an ellipsis", "key sk-pr…qrst", "key [redacted:two]"},
		{"masked, suffix only", "key ****wxyz", "key [redacted:one]"},
		{"masked, fits both", "key sk-proj-********", "key [redacted]"},
		{"masked, shows too little", "key sk-***", "key sk-***"},
		{"masked, not a secret", "wait... done", "wait... done"},
		{"masked, other key", "key sk-proj-ZZ***wxyz", "key sk-proj-ZZ***wxyz"},
		{"two stars are emphasis", "**wxyz**", "**wxyz**"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, r.String(tt.in), "String(%q)", tt.in)
		})
	}
}

func TestRedactorHeader(t *testing.T) {
	r := newRedactor([]secretKey{{"qk-SECRET-2be57a10", "q"}, {"Sk-Name-0a1b2c3d", "n"}})
	h := http.Header{
		"Location":                {"/v1/models/?key=qk-SECRET-2be57a10"},
		"Content-Location":        {"https://up.test/v1?key=qk-SECRET-2be57a10"},
		"Refresh":                 {"0; url=/x?key=qk-SECRET-2be57a10"},
		"Link":                    {"</x?key=qk-SECRET-2be57a10>; rel=preload"},
		"X-Echo":                  {"fine", "qk-SEC***7a10"},
		"Set-Cookie":              {"session=abc"},
		"Set-Cookie2":             {"session=abc"},
		"X-Sk-Name-0a1b2c3d-Seen": {"yes"},
	}
	r.header(h)
	assert.Equal(t, http.Header{
		"Location":            {"/v1/models/?key=[redacted:q]"},
		"Content-Location":    {"https://up.test/v1?key=[redacted:q]"},
		"Refresh":             {"0; url=/x?key=[redacted:q]"},
		"Link":                {"</x?key=[redacted:q]>; rel=preload"},
		"X-Echo":              {"fine", "[redacted:q]"},
		"X-[redacted:n]-Seen": {"yes"},
	}, h)
}

// BenchmarkRedactHeader measures redacting an OpenAI answer's headers with
// few and with many keys configured: the cost every forwarded answer pays.
func BenchmarkRedactHeader(b *testing.B) {
	header := http.Header{
		"Date":                           {"Sun, 30 Nov 2025 22:00:00 GMT"},
		"Content-Type":                   {"application/json"},
		"Openai-Organization":            {"user-abcdefghijklmnopqrstuvwx"},
		"Openai-Processing-Ms":           {"412"},
		"Openai-Version":                 {"2020-10-01"},
		"Strict-Transport-Security":      {"max-age=31536000; includeSubDomains; preload"},
		"X-Ratelimit-Limit-Requests":     {"10000"},
		"X-Ratelimit-Limit-Tokens":       {"30000000"},
		"X-Ratelimit-Remaining-Requests": {"9999"},
		"X-Ratelimit-Remaining-Tokens":   {"29999950"},
		"X-Ratelimit-Reset-Requests":     {"6ms"},
		"X-Ratelimit-Reset-Tokens":       {"0s"},
		"X-Request-Id":                   {"req_0123456789abcdef0123456789abcdef"},
		"Cf-Ray":                         {"8f0a1b2c3d4e5f60-AMS"},
		"Alt-Svc":                        {`h3=":443"; ma=86400`},
	}
	for _, n := range []int{4, 1000} {
		keys := make([]secretKey, n)
		for i := range keys {
			keys[i] = secretKey{fmt.Sprintf("sk-proj-%040d", i), fmt.Sprint(i)}
		}
		r := newRedactor(keys)
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			h := header.Clone()
			b.ReportAllocs()
			for b.Loop() {
				r.header(h)
			}
		})
	}
}

// FuzzRedact puts a secret, in one of its forms, into arbitrary text: the
// redacted text never holds it, and text that holds no secret and no mask
// comes back as it was.
func FuzzRedact(f *testing.F) {
	f.Add("Location: /v1?key=", "&a=b", uint8(0))
	f.Add("Incorrect API key provided: ", "...", uint8(1))
	f.Add("", "", uint8(2))
	f.Add("sk-pro", "j-AAAA", uint8(3))
	secrets := []secretKey{{"sk-proj-AAAA1111bbbb2222wxyz", "one"}, {"AIza+Key/with=marks", "two"}, {"abc", "three"}}
	r := newRedactor(secrets)
	f.Fuzz(func(t *testing.T, before, after string, which uint8) {
		k := secrets[int(which)%len(secrets)]
		forms := secretForms(k.secret)
		text := before + forms[int(which)/len(secrets)%len(forms)] + after
		out := r.String(text)
		for _, s := range secrets {
			if strings.Contains(out, s.secret) {
				t.Fatalf("String(%q) = %q, which holds %q", text, out, s.secret)
			}
		}
		plain := before + after
		if !strings.ContainsAny(plain, "*.…") && !strings.Contains(plain, "abc") && r.whole(plain) == plain && r.String(plain) != plain {
			t.Fatalf("String(%q) = %q, changed text that holds no secret", plain, r.String(plain))
		}
	})
}
