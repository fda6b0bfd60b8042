package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool/internal/vendorsim"
)

// chromium returns the path of a Chromium to drive: $KEYPOOL_CHROMIUM, or
// the first of the usual names on PATH. Without one, the test skips on a
// developer's machine and fails in CI (where $CI is set), which .ci/run
// installs it for.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("KEYPOOL_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no Chromium on PATH, and CI runs the browser test: install chromium (.ci/run does) or set KEYPOOL_CHROMIUM")
	}
	t.Skip("no Chromium on PATH: install chromium (Debian: apt-get install chromium) or set KEYPOOL_CHROMIUM to run the status page's browser test")
	return ""
}

// screenshotDir is where the browser test saves its screenshots:
// $KEYPOOL_SCREENSHOTS, made if needed, else the test's temporary
// directory.
func screenshotDir(t *testing.T) string {
	if dir := os.Getenv("KEYPOOL_SCREENSHOTS"); dir != "" {
		require.NoError(t, os.MkdirAll(dir, 0o755))
		return dir
	}
	return t.TempDir()
}

// browser starts a headless Chromium with a fresh profile and returns a
// context for its first tab. A Chromium that crashes as it starts (seen
// on a loaded machine) is started once more.
func browser(t *testing.T) context.Context {
	t.Helper()
	ctx, err := startBrowser(t)
	if err != nil {
		t.Logf("starting Chromium again: %v", err)
		ctx, err = startBrowser(t)
	}
	require.NoError(t, err, "starting %s", chromium(t))
	return ctx
}

// startBrowser starts a headless Chromium, stopped when t ends.
func startBrowser(t *testing.T) (context.Context, error) {
	path := chromium(t)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 800),
	)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	return ctx, chromedp.Do(ctx)
}

// inTab runs steps in the tab with a deadline.
func inTab(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	require.NoError(t, chromedp.Do(tctx, steps...), what)
}

// read runs one action that reads a value, with a deadline.
func read[T any](t *testing.T, ctx context.Context, a chromedp.Action[T]) T {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(tctx, a)
	require.NoError(t, err)
	return v
}

// shoot saves a screenshot of the whole page as name in dir.
func shoot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	png := read(t, ctx, chromedp.FullScreenshot(100))
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, png, 0o644))
	t.Logf("screenshot: %s", path)
}

func TestStatusPageInBrowser(t *testing.T) {
	ctx := browser(t)
	dir := screenshotDir(t)

	sim := vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, Keys: []vendorsim.Key{
		{Secret: "sk-browser-one", ID: "one", Limits: vendorsim.Limits{RPM: 30}},
		{Secret: "sk-browser-two", ID: "two", Limits: vendorsim.Limits{RPM: 30}},
		{Secret: "sk-browser-gone", ID: "gone", Revoked: true},
		{Secret: "sk-browser-paid", ID: "paid"},
		{Secret: "sk-browser-acct-1", ID: "acct-1"},
		{Secret: "sk-browser-acct-2", ID: "acct-2"},
	}})
	t.Cleanup(sim.Close)
	base, _ := startProxy(t, fmt.Sprintf(`
proxy_tokens: [%q]
state: %s
upstreams:
  - name: openai
    url: %s
    limits: {rpm: 8, rpd: 200}
    prices: {gpt-4o-mini: {input: 150, output: 600}}
    keys:
      - {id: one, secret: sk-browser-one}
      - {id: two, secret: sk-browser-two, limits: {rpm: 40}, budget: {per_day: 2, per_month: 40}}  # over the vendor's 30
      - {id: gone, secret: sk-browser-gone}
      - {id: paid, secret: sk-browser-paid, paid: true}
  - name: backup
    url: %s
    keys:
      - {id: spare, secret: sk-browser-one}
  - name: shared
    url: %s
    account_limits: {org-a: {rpm: 5}}
    prices: {gpt-4o-mini: {input: 150, output: 600}}
    account_budgets: {org-a: {per_month: 100}}
    keys:
      - {id: acct-1, secret: sk-browser-acct-1, account: org-a}
      - {id: acct-2, secret: sk-browser-acct-2, account: org-a}
`, proxyToken, t.TempDir(), sim.URL(), sim.URL(), sim.URL()))
	send := func(n int) {
		for range n {
			resp, err := chat(t, base, false)
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	send(12) // "gone" is benched at its first 401; "one" fills its minute

	// The page asks for the token once.
	inTab(t, ctx, "the login form",
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(chromedp.ID("login")),
		chromedp.SendKeys(chromedp.ID("token"), "not-the-token"),
		chromedp.Submit(chromedp.CSS("#login form")),
		chromedp.WaitVisible(chromedp.ID("login-failed")),
		chromedp.SendKeys(chromedp.ID("token"), proxyToken),
		chromedp.Submit(chromedp.CSS("#login form")),
		chromedp.WaitVisible(chromedp.CSS(`.key[data-key="gone"]`)),
	)
	assert.Empty(t, read(t, ctx, chromedp.Evaluate[string]("document.cookie")), "the session cookie is HttpOnly: the page's script cannot read it")

	// A benched key shows its reason and the time left, in words.
	text := func(sel string) string {
		return strings.ReplaceAll(read(t, ctx, chromedp.Text(chromedp.CSS(sel))), "\u00a0", " ")
	}
	gone := text(`.key[data-key="gone"]`)
	assert.Contains(t, gone, "benched")
	assert.Contains(t, gone, "revoked or not authorized (auth)")
	assert.Regexp(t, `back in 1[12] h \d+ min, (\w{3} )?\d\d:\d\d`, gone)
	// Use shows as bars against the enforced limits.
	one := text(`.key[data-key="one"]`)
	assert.Regexp(t, `requests this minute\s*\d+ / 8`, one)
	assert.Regexp(t, `requests today\s*\d+ / 200`, one)
	assert.Regexp(t, `Vendor said (just now|\d+ s ago): \d+% of its window used \(gpt-4o-mini\); it resets \d\d:\d\d`, one, "the vendor's last reading")
	bars := read(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll('.key[data-key="one"] .bar .fill').length`))
	assert.Equal(t, 2, bars, "a bar for the minute's and the day's requests")
	assert.Equal(t, 3, read(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll('section.route').length`)), "every route")
	// The limits: configured, learned from the vendor, enforced; a bar
	// says when its limit is the vendor's.
	assert.NotContains(t, one, "learned from the vendor", "one's configured 8 a minute is tighter than the vendor's 30")
	assert.Regexp(t, `configured\s*8 req/min, 200 req/day\s*learned\s*30 req/min\s*enforced\s*8 req/min, 200 req/day`, one)
	two := text(`.key[data-key="two"]`)
	assert.Regexp(t, `requests this minute · learned from the vendor\s*\d+ / 30`, two)
	assert.Regexp(t, `requests today\s*\d+ / 200`, two)
	assert.Regexp(t, `configured\s*40 req/min, 200 req/day\s*learned\s*30 req/min\s*enforced\s*30 req/min, 200 req/day`, two)
	// A key of an account says so.
	for _, id := range []string{"acct-1", "acct-2"} {
		assert.Contains(t, text(`.key[data-key="`+id+`"] .account`), "account org-a", id)
	}
	assert.Zero(t, read(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll('.key[data-key="one"] .account').length`)), "a key of no account")
	// Spend: bars against a key's budget and an account's; a key without
	// a budget counts none.
	spend := text(`.key[data-key="two"] .spend`)
	assert.Regexp(t, `spent today\s*\$0\.\d+ / \$2\.00\s*spent this month\s*\$0\.\d+ / \$40\.00`, spend)
	assert.Equal(t, 2, read(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll('.key[data-key="two"] .spend .bar .fill').length`)), "a bar for the day's and the month's spend")
	assert.Zero(t, read(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll('.key[data-key="one"] .spend').length`)), "a key without a budget")
	assert.Regexp(t, `account org-a · what its keys spent together\s*spent today\s*\$0\.00 · no budget set\s*spent this month\s*\$0\.00 / \$100\.00`,
		text(`section[data-route="shared"] .account-spend[data-account="org-a"]`))
	assert.Zero(t, read(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll('.key[data-key="spare"] .spend').length`)), "no spend on a route without prices")
	events := text("#events")
	assert.Contains(t, events, "gone benched (auth: revoked or not authorized)")
	html := read(t, ctx, chromedp.OuterHTML(chromedp.CSS("html")))
	assert.NotContains(t, html, "sk-browser", "no secret on the page")
	assert.NotContains(t, html, proxyToken, "no token on the page")
	assert.NotContains(t, html, "0001-01-01")
	assert.False(t, read(t, ctx, chromedp.Evaluate[bool](`!document.getElementById("store-banner").hidden`)), "no banner while the store works")

	shoot(t, ctx, dir, "status-1280x800.png")

	// Live: new requests show without a reload.
	inTab(t, ctx, "marking the page", chromedp.Evaluate[chromedp.Void]("window.notReloaded = true"))
	before := read(t, ctx, chromedp.Text(chromedp.CSS(`.key[data-key="two"] .counts`)))
	send(2)
	_ = read(t, ctx, chromedp.Poll[bool](fmt.Sprintf(
		`document.querySelector('.key[data-key="two"] .counts').textContent !== %q`, before),
		chromedp.WithPollingTimeout(10*time.Second), chromedp.WithPollingInterval(100*time.Millisecond)))
	assert.True(t, read(t, ctx, chromedp.Evaluate[bool]("window.notReloaded === true")), "updated in place, not reloaded")

	// A conversation shows on the key it stays on, and on no other.
	for range 2 {
		require.Equal(t, http.StatusOK, converse(t, base, "a conversation of the browser test"))
	}
	_ = read(t, ctx, chromedp.Poll[bool](`[...document.querySelectorAll('.counts')].some(e => e.textContent.includes('1 conversation stays here'))`,
		chromedp.WithPollingTimeout(10*time.Second), chromedp.WithPollingInterval(100*time.Millisecond)))
	assert.Equal(t, 1, read(t, ctx, chromedp.Evaluate[int](`[...document.querySelectorAll('.counts')].filter(e => e.textContent.includes('conversation')).length`)),
		"one key holds the conversation")
	shoot(t, ctx, dir, "status-conversation-1280x800.png")

	// The unbench button lifts the bench.
	inTab(t, ctx, "unbench",
		chromedp.Click(chromedp.CSS(`.key[data-key="gone"] button.unbench`)),
		chromedp.WaitVisible(chromedp.CSS(`.key[data-key="gone"].state-serving`)),
	)
	events = text("#events")
	assert.Contains(t, events, "gone unbenched by proxy_tokens[0] (status page)")

	// A phone's width: one column, nothing wider than the screen.
	for i := 0; i < 8; i++ { // until "gone" is benched again, for the picture
		if st, _ := sim.StatsOf("gone"); st.Unauthorized >= 2 {
			break
		}
		send(1)
	}
	inTab(t, ctx, "a phone's width",
		chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulateScale(2)),
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS(`.key[data-key="gone"].state-benched`)),
	)
	overflow := read(t, ctx, chromedp.Evaluate[int]("document.documentElement.scrollWidth - document.documentElement.clientWidth"))
	assert.LessOrEqual(t, overflow, 0, "the page fits a phone's width")
	shoot(t, ctx, dir, "status-phone-390.png")

	// Logging out ends the session.
	inTab(t, ctx, "log out",
		chromedp.Click(chromedp.CSS("#logout button")),
		chromedp.WaitVisible(chromedp.ID("login")),
	)
	resp, err := http.Get(base + "/status")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	assert.False(t, strings.Contains(read(t, ctx, chromedp.Text(chromedp.CSS("body"))), "sk-browser"))
}

func TestStatusPageShowsAFailingStore(t *testing.T) {
	ctx := browser(t)
	dir := screenshotDir(t)
	base, _, store, _ := failingStoreProxy(t)
	store.fail(errors.New("state directory /var/lib/keypool is not writable: read-only file system"))
	logInAs(t, ctx, base, proxyToken, chromedp.WaitVisible(chromedp.ID("store-banner")))
	banner := strings.ReplaceAll(read(t, ctx, chromedp.Text(chromedp.ID("store-banner"))), "\u00a0", " ")
	assert.Regexp(t, `^The state store is failing( since \d\d:\d\d:\d\d)?: state directory /var/lib/keypool is not writable: read-only file system\. The proxy serves on`, banner)
	assert.Equal(t, "alert", read(t, ctx, chromedp.Evaluate[string](`document.getElementById("store-banner").getAttribute("role")`)))
	shoot(t, ctx, dir, "status-store-failing.png")

	store.fail(nil)
	inTab(t, ctx, "the banner goes when the store works again",
		chromedp.WaitNotVisible(chromedp.ID("store-banner")))
}

func TestStatusPageShowsASpentBudget(t *testing.T) {
	ctx := browser(t)
	dir := screenshotDir(t)
	clock := newTestClock(time.Date(2026, 3, 10, 23, 0, 0, 0, time.UTC))
	sim := spendSim(t, clock.now)
	addr := serveAt(t, spendConfig(sim, t.TempDir()), clock)
	spendUntilRefused(t, addr)
	inTab(t, ctx, "log in",
		chromedp.Navigate("http://"+addr+"/"),
		chromedp.WaitVisible(chromedp.ID("login")),
		chromedp.SendKeys(chromedp.ID("token"), proxyToken),
		chromedp.Submit(chromedp.CSS("#login form")),
		chromedp.WaitVisible(chromedp.CSS(`.key[data-key="paid"]`)),
	)
	paid := strings.ReplaceAll(read(t, ctx, chromedp.Text(chromedp.CSS(`.key[data-key="paid"]`))), "\u00a0", " ")
	assert.Contains(t, paid, "its budget for today is spent: it takes requests again tomorrow")
	assert.Regexp(t, `spent today\s*\$0\.45 / \$0\.45\s*spent this month\s*\$0\.45 / \$10\.00`, paid)
	assert.True(t, read(t, ctx, chromedp.Evaluate[bool](`document.querySelector('.key[data-key="paid"]').classList.contains("state-full")`)), "the key shows full")
	assert.Equal(t, 1, read(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll('.key[data-key="paid"] .spend .at-limit').length`)), "the day's bar at its limit, the month's not")
	shoot(t, ctx, dir, "status-budget-spent.png")
}
