package vendorsim_test

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/keypool-go/keypool/internal/vendorsim"
)

// A test starts a sim with three OpenAI keys, one of them revoked, on a clock
// it drives, and reads the sim's counters afterwards.
func ExampleStart() {
	now := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	sim := vendorsim.Start(vendorsim.Config{
		Dialect: vendorsim.OpenAI,
		Clock:   func() time.Time { return now },
		Keys: []vendorsim.Key{
			{Secret: "sk-free-1", ID: "free-1", Limits: vendorsim.Limits{RPM: 2, TPM: 10_000}},
			{Secret: "sk-free-2", ID: "free-2", Limits: vendorsim.Limits{RPM: 2}},
			{Secret: "sk-revoked", ID: "revoked", Revoked: true},
		},
	})
	defer sim.Close()

	post := func(key string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, sim.URL()+"/v1/chat/completions",
			strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		return resp
	}
	for range 3 {
		resp := post("sk-free-1")
		fmt.Printf("%d remaining=%s retry-after=%q\n",
			resp.StatusCode, resp.Header.Get("X-Ratelimit-Remaining-Requests"), resp.Header.Get("Retry-After"))
	}
	fmt.Println(post("sk-revoked").StatusCode)

	st, _ := sim.StatsOf("free-1")
	fmt.Printf("free-1: served %d, 429s %d, at most %d in a minute\n",
		st.Served, st.RateLimited, sim.MaxInWindow("free-1", time.Minute))
	fmt.Printf("total: %d requests, %d unauthorized\n", sim.Totals().Requests, sim.Totals().Unauthorized)
	// Output:
	// 200 remaining=1 retry-after=""
	// 200 remaining=0 retry-after=""
	// 429 remaining=0 retry-after="60"
	// 401
	// free-1: served 2, 429s 1, at most 2 in a minute
	// total: 4 requests, 1 unauthorized
}

// Two keys of one organisation share its 2 requests a minute: the third
// request is a 429 whichever key sends it, and every answer states the
// organisation's window. SetLimits raises the limit while the sim runs.
func ExampleStart_accounts() {
	now := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	sim := vendorsim.Start(vendorsim.Config{
		Clock:    func() time.Time { return now },
		Accounts: map[string]vendorsim.Limits{"org-1": {RPM: 2}},
		Keys: []vendorsim.Key{
			{Secret: "sk-a", ID: "a", Account: "org-1"},
			{Secret: "sk-b", ID: "b", Account: "org-1"},
		},
	})
	defer sim.Close()

	post := func(key string) {
		req, _ := http.NewRequest(http.MethodPost, sim.URL()+"/v1/chat/completions",
			strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Printf("%s: %d limit=%s remaining=%s\n", key, resp.StatusCode,
			resp.Header.Get("X-Ratelimit-Limit-Requests"), resp.Header.Get("X-Ratelimit-Remaining-Requests"))
	}
	post("sk-a")
	post("sk-b")
	post("sk-a")
	if err := sim.SetLimits("org-1", vendorsim.Limits{RPM: 3}); err != nil {
		panic(err)
	}
	post("sk-b")

	org, _ := sim.AccountStatsOf("org-1")
	fmt.Printf("%s %v: served %d, 429s %d, at most %d in a minute\n",
		org.Name, org.Keys, org.Served, org.RateLimited, sim.MaxInWindow("org-1", time.Minute))
	// Output:
	// sk-a: 200 limit=2 remaining=1
	// sk-b: 200 limit=2 remaining=0
	// sk-a: 429 limit=2 remaining=0
	// sk-b: 200 limit=3 remaining=0
	// org-1 [a b]: served 3, 429s 1, at most 3 in a minute
}
