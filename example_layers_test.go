package keypool_test

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/keypool-go/keypool"
	"github.com/keypool-go/keypool/internal/vendorsim"
)

// A vendor SDK takes the pooled client through its HTTP-client option. The
// pool puts its own key on every request, so the SDK's key is a placeholder;
// the SDK's own retries are off, since the pool already moves a failing
// request to another key.
func Example_openAISDK() {
	sim := vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, OutputTokens: 3, Keys: []vendorsim.Key{
		{Secret: "sk-revoked", ID: "revoked", Revoked: true},
		{Secret: "sk-good", ID: "good"},
	}})
	defer sim.Close()

	pool, _ := keypool.New("openai", []keypool.Key{{Secret: "sk-revoked", ID: "revoked"}, {Secret: "sk-good", ID: "good"}})
	defer pool.Close()
	client := openai.NewClient(
		option.WithBaseURL(sim.URL()+"/v1"),
		option.WithAPIKey("placeholder"),
		option.WithHTTPClient(&http.Client{Transport: pool.Transport(nil)}),
		option.WithMaxRetries(0),
	)
	completion, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:    "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello.")},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(completion.Choices[0].Message.Content)
	for _, st := range pool.Stats() {
		fmt.Println(st.ID, "answers:", st.Answers)
	}
	// Output:
	// sim sim sim
	// revoked answers: map[auth:1]
	// good answers: map[none:1]
}

// otelhttp goes around the pool's transport: its client span is the parent
// of one keypool.attempt span per key tried.
func Example_otelhttp() {
	sim := vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, Keys: []vendorsim.Key{
		{Secret: "sk-revoked", ID: "revoked", Revoked: true},
		{Secret: "sk-good", ID: "good"},
	}})
	defer sim.Close()

	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	pool, _ := keypool.New("openai", []keypool.Key{{Secret: "sk-revoked", ID: "revoked"}, {Secret: "sk-good", ID: "good"}},
		keypool.WithTracerProvider(tp))
	defer pool.Close()
	client := &http.Client{Transport: otelhttp.NewTransport(pool.Transport(nil), otelhttp.WithTracerProvider(tp))}

	resp, err := client.Post(sim.URL()+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	var lines []string
	for _, s := range spans.Ended() {
		parent := "root"
		if s.Parent().IsValid() {
			parent = "child"
		}
		line := fmt.Sprintf("%s (%s)", s.Name(), parent)
		for _, kv := range s.Attributes() {
			if kv.Key == "keypool.key.id" {
				line += " key " + kv.Value.AsString()
			}
		}
		lines = append(lines, line)
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// HTTP POST (root)
	// keypool.attempt (child) key good
	// keypool.attempt (child) key revoked
}
