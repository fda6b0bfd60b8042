// Command openai-sdk sends one chat request with the official OpenAI Go SDK
// through a pool of keys, and prints the answer and what each key did.
// Copy this file into your own module: it uses keypool's public API only.
//
//	OPENAI_KEYS=sk-one,sk-two go run ./examples/openai-sdk
//
// The SDK reads OPENAI_BASE_URL, so the same program talks to any
// OpenAI-compatible vendor (Groq, OpenRouter, Together, a local server).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/keypool-go/keypool"
)

func main() {
	if err := run(context.Background(), os.Stdout, os.Getenv("OPENAI_KEYS")); err != nil {
		log.Fatal(err)
	}
}

// run sends one chat request with the comma-separated keys and writes what
// happened to out.
func run(ctx context.Context, out io.Writer, secrets string) error {
	var keys []keypool.Key
	for s := range strings.SplitSeq(secrets, ",") {
		if s = strings.TrimSpace(s); s != "" {
			keys = append(keys, keypool.Key{Secret: s})
		}
	}
	if len(keys) == 0 {
		return errors.New("set OPENAI_KEYS to your keys, separated by commas")
	}
	pool, err := keypool.New("openai", keys)
	if err != nil {
		return err
	}
	defer pool.Close()

	client := openai.NewClient(
		option.WithHTTPClient(&http.Client{Transport: pool.Transport(nil)}),
		option.WithAPIKey("placeholder"), // the pool puts a real key on each request
		option.WithMaxRetries(0),         // the pool already moves a failing request to another key
	)
	completion, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:    "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello.")},
	})
	if err != nil {
		// A *keypool.NoAvailableKeyError says when a key is back.
		var na *keypool.NoAvailableKeyError
		if errors.As(err, &na) {
			return fmt.Errorf("every key is benched or full until %s: %w", na.RetryAt.Local().Format("15:04:05"), err)
		}
		return err
	}
	fmt.Fprintln(out, completion.Choices[0].Message.Content)
	for _, st := range pool.Stats() {
		fmt.Fprintf(out, "key %s: sent %d, answers %v\n", st.ID, st.Sent, st.Answers)
	}
	return nil
}
