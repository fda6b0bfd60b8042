package main

import (
	"fmt"
	"net/http"
	"os"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/keypool-go/keypool/internal/vendorsim"
)

// The vendors' own Go SDKs through keypool serve, set up as the README
// says: a base URL at the proxy and the proxy token as the API key, from
// the environment variables each SDK reads, or from its options.

// sdkProxy starts the fake vendor in dialect with two keys, and the proxy
// in front of it as the upstream at url (whose host only names it), with
// auth; it returns the proxy's base URL and the fake vendor.
func sdkProxy(t *testing.T, dialect vendorsim.Dialect, auth string) (string, *vendorsim.Server) {
	t.Helper()
	sim := vendorsim.Start(vendorsim.Config{Dialect: dialect, Keys: []vendorsim.Key{
		{Secret: "sk-sdk-one", ID: "one"}, {Secret: "sk-sdk-two", ID: "two"},
	}})
	t.Cleanup(sim.Close)
	base, _ := startProxy(t, fmt.Sprintf(`proxy_tokens: [%q]
state: %s
upstreams:
  - name: vendor
    url: %s
    auth: %q
    keys: [{id: one, secret: sk-sdk-one}, {id: two, secret: sk-sdk-two}]
`, proxyToken, t.TempDir(), sim.URL(), auth))
	return base, sim
}

// served returns the requests the fake vendor's keys served, together.
func served(t *testing.T, sim *vendorsim.Server) int64 {
	t.Helper()
	var n int64
	for _, id := range []string{"one", "two"} {
		st, ok := sim.StatsOf(id)
		require.True(t, ok)
		n += st.Served
	}
	return n
}

// TestAnthropicSDKThroughProxy sends a message and a streamed message with
// github.com/anthropics/anthropic-sdk-go through the proxy: the client of
// ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY (the proxy token, sent as
// x-api-key), and one of option.WithBaseURL and option.WithAPIKey. Each
// reads the fake vendor's answer, served with a pooled key.
func TestAnthropicSDKThroughProxy(t *testing.T) {
	base, sim := sdkProxy(t, vendorsim.Anthropic, "header:x-api-key")
	t.Setenv("ANTHROPIC_BASE_URL", base)
	t.Setenv("ANTHROPIC_API_KEY", proxyToken)
	t.Setenv("ANTHROPIC_AUTH_TOKEN", "")
	params := anthropic.MessageNewParams{
		Model:     "claude-sonnet-4-5",
		MaxTokens: 64,
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello"))},
	}

	fromEnv := anthropic.NewClient()
	msg, err := fromEnv.Messages.New(t.Context(), params)
	require.NoError(t, err)
	require.NotEmpty(t, msg.Content)
	assert.NotEmpty(t, msg.Content[0].Text)
	assert.Positive(t, msg.Usage.OutputTokens)

	os.Unsetenv("ANTHROPIC_BASE_URL")
	os.Unsetenv("ANTHROPIC_API_KEY")
	withOptions := anthropic.NewClient(anthropicoption.WithBaseURL(base), anthropicoption.WithAPIKey(proxyToken))
	stream := withOptions.Messages.NewStreaming(t.Context(), params)
	var streamed anthropic.Message
	for stream.Next() {
		require.NoError(t, streamed.Accumulate(stream.Current()))
	}
	require.NoError(t, stream.Err())
	require.NotEmpty(t, streamed.Content)
	assert.NotEmpty(t, streamed.Content[0].Text)

	assert.Equal(t, int64(2), served(t, sim), "both reached the vendor with a pooled key")

	// A wrong token is the proxy's 401, which the SDK reports.
	wrong := anthropic.NewClient(anthropicoption.WithBaseURL(base), anthropicoption.WithAPIKey("not-the-token"), anthropicoption.WithMaxRetries(0))
	_, err = wrong.Messages.New(t.Context(), params)
	var apiErr *anthropic.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusUnauthorized, apiErr.StatusCode)
}

// TestGeminiSDKThroughProxy generates content, plain and streamed, with
// google.golang.org/genai through the proxy: the client of
// GOOGLE_GEMINI_BASE_URL and GEMINI_API_KEY (the proxy token, sent as
// x-goog-api-key), and one of HTTPOptions.BaseURL and APIKey. Each reads
// the fake vendor's answer, served with a pooled key.
func TestGeminiSDKThroughProxy(t *testing.T) {
	base, sim := sdkProxy(t, vendorsim.Gemini, "header:x-goog-api-key")
	t.Setenv("GOOGLE_GEMINI_BASE_URL", base)
	t.Setenv("GEMINI_API_KEY", proxyToken)
	for _, v := range []string{"GOOGLE_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION"} {
		t.Setenv(v, "")
		os.Unsetenv(v)
	}

	fromEnv, err := genai.NewClient(t.Context(), &genai.ClientConfig{Backend: genai.BackendGeminiAPI})
	require.NoError(t, err)
	answer, err := fromEnv.Models.GenerateContent(t.Context(), "gemini-2.5-flash", genai.Text("hello"), nil)
	require.NoError(t, err)
	assert.NotEmpty(t, answer.Text())
	require.NotNil(t, answer.UsageMetadata)
	assert.Positive(t, answer.UsageMetadata.CandidatesTokenCount)

	os.Unsetenv("GOOGLE_GEMINI_BASE_URL")
	os.Unsetenv("GEMINI_API_KEY")
	withOptions, err := genai.NewClient(t.Context(), &genai.ClientConfig{
		Backend: genai.BackendGeminiAPI, APIKey: proxyToken, HTTPOptions: genai.HTTPOptions{BaseURL: base},
	})
	require.NoError(t, err)
	text := ""
	for chunk, err := range withOptions.Models.GenerateContentStream(t.Context(), "gemini-2.5-flash", genai.Text("hello"), nil) {
		require.NoError(t, err)
		text += chunk.Text()
	}
	assert.NotEmpty(t, text)

	assert.Equal(t, int64(2), served(t, sim), "both reached the vendor with a pooled key")
}
