package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool/internal/vendorsim"
)

// logInAt opens the page at base and logs in with the proxy token, then
// waits for sel.
func logInAt(t *testing.T, ctx context.Context, base, sel string) {
	t.Helper()
	logInAs(t, ctx, base, proxyToken, chromedp.WaitVisible(chromedp.CSS(sel)))
}

// logInAs opens the page at base, logs in with token, then waits as wait
// says.
func logInAs(t *testing.T, ctx context.Context, base, token string, wait chromedp.Action[chromedp.Void]) {
	t.Helper()
	inTab(t, ctx, "log in",
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(chromedp.ID("login")),
		chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Submit(chromedp.CSS("#login form")),
		wait,
	)
}

// countOf returns how many elements the page has that match a CSS selector.
func countOf(t *testing.T, ctx context.Context, sel string) int {
	t.Helper()
	return read(t, ctx, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%q).length", sel)))
}

// pageOverflow returns by how many pixels the page's body is wider than
// the window.
func pageOverflow(t *testing.T, ctx context.Context) int {
	t.Helper()
	return read(t, ctx, chromedp.Evaluate[int]("document.documentElement.scrollWidth - document.documentElement.clientWidth"))
}

// throttled is a vendor's 429 that benches a key for 30 s.
var throttled = vendorsim.Answer{Status: http.StatusTooManyRequests,
	Header: http.Header{"Retry-After": {"30"}}, Body: `{"error":{"type":"rate_limit_error","message":"slow down"}}`}

// twoKeyProxy serves a route "openai" of two keys, a and b, on clock, with
// a token limit (so that the pool counts tokens) in front of a fake vendor
// whose key a answers first with script, and returns the proxy's URL.
func twoKeyProxy(t *testing.T, clock *testClock, script []vendorsim.Answer) string {
	t.Helper()
	sim := vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, Clock: clock.now, Keys: []vendorsim.Key{
		{Secret: "sk-two-a", ID: "a", Script: script},
		{Secret: "sk-two-b", ID: "b"},
	}})
	t.Cleanup(sim.Close)
	addr := serveAt(t, fmt.Sprintf(`
proxy_tokens: [%q]
state: %s
upstreams:
  - name: openai
    url: %s
    limits: {tpm: 1000000}
    keys:
      - {id: a, secret: sk-two-a}
      - {id: b, secret: sk-two-b}
`, proxyToken, t.TempDir(), sim.URL()), clock)
	return "http://" + addr
}

// sendOK sends n chat requests to the proxy at base, each answered 200.
func sendOK(t *testing.T, base string, n int) {
	t.Helper()
	for range n {
		resp, err := chat(t, base, false)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
}

// hourProxy serves a route of two keys on clock, a of which answers its
// second request with a 429, and sends it traffic over the last few
// minutes: 2 requests at 12:00, 1 at 12:02 (a's 429, its bench, b takes
// it over), 2 at 12:05, the minute of now. It returns the proxy's URL.
func hourProxy(t *testing.T, clock *testClock) string {
	t.Helper()
	base := twoKeyProxy(t, clock, []vendorsim.Answer{{}, throttled})
	send := func(n int) { sendOK(t, base, n) }
	day := time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC)
	clock.set(day.Add(12*time.Hour + 10*time.Second))
	send(2) // a, b
	clock.set(day.Add(12*time.Hour + 2*time.Minute + 20*time.Second))
	send(1) // a's 429 benches it; b takes it over
	clock.set(day.Add(12*time.Hour + 5*time.Minute + 30*time.Second))
	send(2)
	return base
}

// The page draws the last hour from /history: a bar for each minute with
// requests (3 minutes here), one for the minute of the 429 and of the
// bench, a bench mark on each chart of the route and on the benched key's,
// in the window's width and a phone's.
func TestBrowserCharts(t *testing.T) {
	ctx := browser(t)
	dir := screenshotDir(t)
	clock := newTestClock(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
	base := hourProxy(t, clock)
	logInAt(t, ctx, base, `.last-hour[data-route="openai"] svg.chart`)

	route := `.last-hour[data-route="openai"] `
	assert.Equal(t, 4, countOf(t, ctx, route+"figure.panel svg.chart"), "requests, 429s, benches, tokens")
	assert.Equal(t, 3, countOf(t, ctx, route+`[data-series="requests"] rect.chart-bar`), "three minutes had requests")
	assert.Equal(t, 1, countOf(t, ctx, route+`[data-series="rate"] rect.chart-bar`), "one minute had a 429")
	assert.Equal(t, 1, countOf(t, ctx, route+`[data-series="bench"] rect.chart-bar`), "one minute had a bench")
	assert.Equal(t, 3, countOf(t, ctx, route+`[data-series="tokens"] rect.chart-bar`), "every answer's tokens")
	assert.Equal(t, 4, countOf(t, ctx, route+"line.bench-mark"), "the bench marked on each chart")
	text := strings.ReplaceAll(read(t, ctx, chromedp.Text(chromedp.CSS(route+`[data-series="requests"] figcaption`))), "\u00a0", " ")
	assert.Regexp(t, `^requests\s*6$`, text, "2 + 2 (a's 429 and b's answer) + 2")
	// Each chart's scale: its top is the busiest minute.
	assert.Equal(t, "2/min", read(t, ctx, chromedp.Text(chromedp.CSS(route+`[data-series="requests"] .chart-peak`))))
	assert.Equal(t, "1/min", read(t, ctx, chromedp.Text(chromedp.CSS(route+`[data-series="rate"] .chart-peak`))))
	// The bench's line stands where 12:02:20 is: the hour's first minute
	// is 11:06, 59 minutes before the minute of now.
	x := read(t, ctx, chromedp.Evaluate[float64](`Number(document.querySelector('.last-hour line.bench-mark').getAttribute("x1"))`))
	assert.InDelta(t, 56+20.0/60, x, 0.01, "the bench at 12:02:20, in minutes from 11:06")
	// Each key's card has its own hour; a's carries its bench and its 429.
	assert.Equal(t, 1, countOf(t, ctx, `.key[data-key="a"] svg.key-chart line.bench-mark`))
	assert.Equal(t, 1, countOf(t, ctx, `.key[data-key="a"] svg.key-chart rect.chart-429`))
	assert.Zero(t, countOf(t, ctx, `.key[data-key="b"] svg.key-chart line.bench-mark`))
	card := read(t, ctx, chromedp.Text(chromedp.CSS(`.key[data-key="b"]`)))
	assert.NotContains(t, card, "requests today", "no daily limit: the pool counts no day, and shows no 0 for it")
	assert.Regexp(t, `tokens this minute\s*\d+ / 1,000,000`, card, "a limit's thousands apart")
	assert.Regexp(t, `configured\s*1,000,000 tok/min`, card)
	assert.LessOrEqual(t, pageOverflow(t, ctx), 0)
	shoot(t, ctx, dir, "charts-1280x800.png")

	inTab(t, ctx, "a phone's width",
		chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulateScale(2)),
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS(route+"svg.chart")),
	)
	assert.Equal(t, 3, countOf(t, ctx, route+`[data-series="requests"] rect.chart-bar`))
	assert.LessOrEqual(t, pageOverflow(t, ctx), 0, "the page fits a phone's width")
	shoot(t, ctx, dir, "charts-390x844.png")
}

// manyKeysProxy serves a route of twelve keys, two of them revoked and
// six with a budget, and a route of one key, and sends the first some
// requests. It returns the proxy's URL.
func manyKeysProxy(t *testing.T) string {
	t.Helper()
	var simKeys []vendorsim.Key
	var conf strings.Builder
	for i := range 12 {
		id := fmt.Sprintf("key-%02d", i+1)
		simKeys = append(simKeys, vendorsim.Key{Secret: "sk-many-" + id, ID: id, Revoked: i == 3 || i == 8})
		budget := ""
		if i < 6 {
			budget = ", budget: {per_day: 2}"
		}
		fmt.Fprintf(&conf, "      - {id: %s, secret: sk-many-%s%s}\n", id, id, budget)
	}
	simKeys = append(simKeys, vendorsim.Key{Secret: "sk-many-few", ID: "few"})
	sim := vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, Keys: simKeys})
	t.Cleanup(sim.Close)
	base, _ := startProxy(t, fmt.Sprintf(`
proxy_tokens: [%q]
state: %s
upstreams:
  - name: many
    url: %s
    limits: {rpm: 30, rpd: 1000}
    prices: {gpt-4o-mini: {input: 150, output: 600}}
    keys:
%s
  - name: few
    url: %s
    keys:
      - {id: few-1, secret: sk-many-few}
`, proxyToken, t.TempDir(), sim.URL(), conf.String(), sim.URL()))
	for range 17 {
		resp, err := chat(t, base, false)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return base
}

// A route of more than eight keys shows them as a table, one row a key,
// that sorts by a column at a click on its head and the other way at a
// second; the cards are a click away; on a phone the table scrolls in its
// own box and the page does not.
func TestBrowserKeyTable(t *testing.T) {
	ctx := browser(t)
	dir := screenshotDir(t)
	base := manyKeysProxy(t)
	logInAt(t, ctx, base, `section[data-route="many"] table.key-table`)

	assert.Equal(t, 12, countOf(t, ctx, `section[data-route="many"] table.key-table tbody tr`), "one row a key")
	assert.Zero(t, countOf(t, ctx, `section[data-route="many"] .key`), "no cards")
	assert.Equal(t, 1, countOf(t, ctx, `section[data-route="few"] .key`), "a route of few keys shows cards")
	assert.Zero(t, countOf(t, ctx, `section[data-route="few"] table`))
	row := func(id string) string {
		return strings.ReplaceAll(read(t, ctx, chromedp.Text(chromedp.CSS(`tr[data-key="`+id+`"]`))), "\u00a0", " ")
	}
	gone := row("key-04")
	assert.Contains(t, gone, "benched")
	assert.Contains(t, gone, "revoked or not authorized (auth)")
	assert.Regexp(t, `back in 1[12] h \d+ min`, gone)
	assert.Regexp(t, `\d+ / 30 req`, row("key-01"), "the minute's use against its limit")
	assert.Regexp(t, `\d+ / 1,000 req`, row("key-01"), "the day's, its thousands apart")
	assert.Regexp(t, `\$0\.\d+ / \$2\.00`, row("key-01"), "what it spent today, against its budget")
	assert.Equal(t, 12, countOf(t, ctx, `section[data-route="many"] td[data-column="hour"] svg.key-chart`), "each key's hour")

	column := func(col string) []string {
		return read(t, ctx, chromedp.Evaluate[[]string](fmt.Sprintf(
			`[...document.querySelectorAll('section[data-route="many"] tbody td[data-column=%q]')].map(td => td.textContent)`, col)))
	}
	ids := func() []string { return column("key") }
	sortBy := func(col string) {
		inTab(t, ctx, "sort by "+col, chromedp.Click(chromedp.CSS(`section[data-route="many"] th[data-column="`+col+`"] button`)))
	}
	sortBy("state")
	states := column("state")
	assert.Equal(t, []string{"benched", "benched"}, states[:2], "benched first")
	assert.Equal(t, "ascending", read(t, ctx, chromedp.Evaluate[string](`document.querySelector('section[data-route="many"] th[data-column="state"]').getAttribute("aria-sort")`)))
	sortBy("key")
	want := []string{}
	for i := range 12 {
		want = append(want, fmt.Sprintf("key-%02d free", i+1))
	}
	assert.Equal(t, want, ids(), "by key")
	sortBy("key")
	slices.Reverse(want)
	assert.Equal(t, want, ids(), "by key, the other way")
	sortBy("sent")
	sent := column("sent")
	assert.True(t, slices.IsSortedFunc(sent, func(a, b string) int { return cmp.Compare(atoi(t, a), atoi(t, b)) }), "by sent, ascending: %v", sent)
	assert.NotEqual(t, sent[0], sent[len(sent)-1], "keys sent different numbers")
	// The order holds across the page's redraws.
	before := ids()
	inTab(t, ctx, "marking the table", chromedp.Evaluate[chromedp.Void](`window.drawn = document.querySelector('section[data-route="many"] table')`))
	_ = read(t, ctx, chromedp.Poll[bool](`document.querySelector('section[data-route="many"] table') !== window.drawn`,
		chromedp.WithPollingTimeout(10*time.Second), chromedp.WithPollingInterval(100*time.Millisecond)))
	assert.Equal(t, before, ids(), "the order after a redraw")
	fits := read(t, ctx, chromedp.Evaluate[bool](`(() => { const b = document.querySelector('section[data-route="many"] .table-scroll'); return b.scrollWidth <= b.clientWidth; })()`))
	assert.True(t, fits, "at a desktop's width the table, its Unbench buttons too, needs no sideways scroll")
	shoot(t, ctx, dir, "table-1280x800.png")

	inTab(t, ctx, "the cards",
		chromedp.Click(chromedp.CSS(`section[data-route="many"] .view-toggle [data-view="cards"]`)),
		chromedp.WaitVisible(chromedp.CSS(`section[data-route="many"] .key[data-key="key-04"]`)))
	assert.Equal(t, 12, countOf(t, ctx, `section[data-route="many"] .key`))
	assert.Zero(t, countOf(t, ctx, `section[data-route="many"] table`))
	inTab(t, ctx, "the table again",
		chromedp.Click(chromedp.CSS(`section[data-route="many"] .view-toggle [data-view="table"]`)),
		chromedp.WaitVisible(chromedp.CSS(`section[data-route="many"] table.key-table`)))

	inTab(t, ctx, "a phone's width",
		chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulateScale(2)),
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS(`section[data-route="many"] table.key-table`)),
	)
	assert.LessOrEqual(t, pageOverflow(t, ctx), 0, "the page fits a phone's width")
	inner := read(t, ctx, chromedp.Evaluate[int](`(e => e.scrollWidth - e.clientWidth)(document.querySelector('section[data-route="many"] .table-scroll'))`))
	assert.Positive(t, inner, "the table scrolls inside its box")
	shoot(t, ctx, dir, "table-390x844.png")
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(strings.TrimSpace(s))
	require.NoError(t, err)
	return n
}

// The page's rough edges, each as a user met it: a key at its daily
// key_cap showed "serving", counted as serving, with no day bar; the
// requests that name no model made a block with no label; a reading of
// nothing used said "0% of a window used", and a reset already past
// showed as if to come.
func TestBrowserRoughEdges(t *testing.T) {
	ctx := browser(t)
	dir := screenshotDir(t)
	clock := newTestClock(time.Date(2026, 3, 10, 12, 0, 10, 0, time.UTC))
	sim := vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, Clock: clock.now, Keys: []vendorsim.Key{
		{Secret: "sk-edge-a", ID: "a", Script: []vendorsim.Answer{{Status: http.StatusTooManyRequests,
			Header: http.Header{"Retry-After": {"30"}}, Body: `{"error":{"type":"rate_limit_error","message":"slow down"}}`}}},
		{Secret: "sk-edge-b", ID: "b"},
	}})
	t.Cleanup(sim.Close)
	addr := serveAt(t, fmt.Sprintf(`
proxy_tokens: [%q]
state: %s
upstreams:
  - name: openai
    url: %s
    key_cap: {rpd: 3}
    keys:
      - {id: a, secret: sk-edge-a}
      - {id: b, secret: sk-edge-b}
`, proxyToken, t.TempDir(), sim.URL()), clock)
	base := "http://" + addr
	send := func(method, path, body string) {
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+proxyToken)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	chatBody := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hello"}]}`
	for range 3 { // a's 429 benches it for 30 s, b takes all three: b is at its cap
		send(http.MethodPost, "/v1/chat/completions", chatBody)
	}
	clock.set(time.Date(2026, 3, 10, 12, 2, 0, 0, time.UTC)) // a is back; its reset, 12:00:40, is past
	send(http.MethodGet, "/v1/models", "")                   // names no model: a takes it

	logInAt(t, ctx, base, `.key[data-key="b"]`)
	text := func(sel string) string {
		return strings.ReplaceAll(read(t, ctx, chromedp.Text(chromedp.CSS(sel))), "\u00a0", " ")
	}
	b := text(`.key[data-key="b"]`)
	assert.Contains(t, b, "capped: its daily cap across all models (key_cap) is used up")
	assert.Equal(t, "capped", text(`.key[data-key="b"] .key-head .badge`))
	assert.True(t, read(t, ctx, chromedp.Evaluate[bool](`document.querySelector('.key[data-key="b"]').classList.contains("state-full")`)))
	assert.Regexp(t, `all models together \(key_cap\)\s*requests today\s*3 / 3`, b, "the cap's day bar")
	assert.Equal(t, 1, countOf(t, ctx, `.key[data-key="b"] .cap-use .at-limit .bar`), "at its limit")
	assert.Contains(t, text("#summary"), "1 serving, 0 benched, 1 full", "b counts as full")

	a := text(`.key[data-key="a"]`)
	assert.Contains(t, a, "requests without a model", "the block of requests that name no model has a label")
	assert.Zero(t, read(t, ctx, chromedp.Evaluate[int](`[...document.querySelectorAll('.model')].filter(e => e.textContent.trim() === "").length`)), "no block without a label")
	assert.NotContains(t, a, "0% of", "a reading of nothing used says no percentage")
	assert.NotContains(t, a, "resets 12:00", "a past reset is not shown as to come")
	assert.NotContains(t, text("body"), "resets 12:00")
	shoot(t, ctx, dir, "rough-edges-1280x800.png")

	// In the table, too, b shows capped.
	inTab(t, ctx, "the table",
		chromedp.Click(chromedp.CSS(`section[data-route="openai"] .view-toggle [data-view="table"]`)),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-key="b"]`)))
	row := text(`tr[data-key="b"]`)
	assert.Contains(t, row, "capped")
	assert.Contains(t, row, "daily cap used up (key_cap)")
	assert.Contains(t, row, "3 / 3 req")

	inTab(t, ctx, "a phone's width, the cards",
		chromedp.Click(chromedp.CSS(`section[data-route="openai"] .view-toggle [data-view="cards"]`)),
		chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulateScale(2)),
		chromedp.WaitVisible(chromedp.CSS(`.key[data-key="b"]`)),
	)
	assert.LessOrEqual(t, pageOverflow(t, ctx), 0, "the page fits a phone's width")
	shoot(t, ctx, dir, "rough-edges-390x844.png")
}
