package keypool_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/keypool-go/keypool"
)

// vendor says which key it served. When throttle is set, it first answers
// 429 with a Retry-After of 20 s to the key "sk-free-1", once.
func vendor(throttle bool) *httptest.Server {
	throttled := !throttle
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		if key == "sk-free-1" && !throttled {
			throttled = true
			w.Header().Set("Retry-After", "20")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		fmt.Fprintf(w, "served by %s", key)
	}))
}

func ExampleNew() {
	srv := vendor(false)
	defer srv.Close()

	keys := []keypool.Key{
		{Secret: "sk-free-1", ID: "free-1"},
		{Secret: "sk-free-2", ID: "free-2"},
		{Secret: "sk-paid", ID: "paid", Paid: true},
	}
	pool, err := keypool.New("openai", keys, keypool.WithLimits(keypool.Limits{RPM: 60}))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	client := &http.Client{Transport: pool.Transport(nil)}

	for range 3 {
		resp, err := client.Get(srv.URL)
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, string(body))
	}
	// Output:
	// 200 served by sk-free-1
	// 200 served by sk-free-2
	// 200 served by sk-free-1
}

// A key that answers 429 is benched for the wait the vendor asked for, and
// the request goes to the next key; the caller sees one answer.
func ExampleOnEvict() {
	srv := vendor(true)
	defer srv.Close()

	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	keys := []keypool.Key{{Secret: "sk-free-1", ID: "free-1"}, {Secret: "sk-free-2", ID: "free-2"}}
	pool, _ := keypool.New("openai", keys,
		keypool.WithClock(func() time.Time { return now }),
		keypool.OnEvict(func(e keypool.Eviction) {
			fmt.Printf("benched %s: %s for %s\n", e.KeyID, e.Kind, e.For)
		}))
	defer pool.Close()
	client := &http.Client{Transport: pool.Transport(nil)}

	resp, _ := client.Get(srv.URL)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, string(body))
	// Output:
	// benched free-1: rate for 20s
	// 200 served by sk-free-2
}

// When every key is benched, the error says when the soonest comes back.
func ExampleNoAvailableKeyError() {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	pool, _ := keypool.New("gemini", []keypool.Key{{Secret: "s1", ID: "k1"}, {Secret: "s2", ID: "k2"}},
		keypool.WithClock(func() time.Time { return now }))
	defer pool.Close()

	err := pool.Do(context.Background(), "gemini-2.5-flash", func(ctx context.Context, k keypool.Key) error {
		return &keypool.ProviderError{Kind: keypool.KindQuota, Window: keypool.WindowDaily,
			ResetAt: now.Add(9 * time.Hour)}
	})
	var na *keypool.NoAvailableKeyError
	if errors.As(err, &na) {
		fmt.Println("next key at", na.RetryAt.Format(time.Kitchen))
	}
	// Output:
	// next key at 9:00PM
}
