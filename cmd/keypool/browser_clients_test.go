package main

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
)

// The status page shows the operator each client token: its limits, its
// spend against its budget, and what it used today and this month, by tag
// beneath; at a phone's width the table scrolls in its own box.
func TestBrowserClients(t *testing.T) {
	ctx := browser(t)
	dir := screenshotDir(t)
	clock := newTestClock(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
	addr, _, _, _ := clientsProxy(t, clock)
	for range 3 {
		assert.Equal(t, 200, clientSend(t, addr, clientTokens["capped"], "gpt-4o-mini", "").status)
	}
	assert.Equal(t, 200, clientSend(t, addr, clientTokens["spender"], "gpt-4o-mini", "").status)
	for _, tag := range []string{"nightly", "nightly", "ci"} {
		assert.Equal(t, 200, clientSend(t, addr, clientTokens["tagger"], "gpt-4o-mini", tag).status)
	}

	base := "http://" + addr
	logInAs(t, ctx, base, operatorToken, chromedp.WaitVisible(chromedp.CSS(`#clients tr[data-client="capped"]`)))
	text := func(sel string) string {
		return strings.ReplaceAll(read(t, ctx, chromedp.Text(chromedp.CSS(sel))), "\u00a0", " ")
	}
	assert.Equal(t, 7, countOf(t, ctx, `#clients tr[data-client]:not(.client-tag)`), "a row for each client, proxy_tokens[0] among them")
	assert.Contains(t, text(`#clients tr[data-client="expired"]`), "expired 2026-03-01 00:00 UTC")
	assert.Regexp(t, `capped\s*5 rpm\s*—\s*—\s*3 req · \d+ tok · \$0\.\d+\s*3 req`, text(`#clients tr[data-client="capped"]`))
	assert.Regexp(t, `spender\s*—\s*\$0\.\d+ / \$0\.45`, text(`#clients tr[data-client="spender"]:not(.client-tag)`), "the day's spend against its budget")
	assert.Equal(t, 1, countOf(t, ctx, `#clients tr[data-client="spender"] .bar .fill`), "a bar for the budgeted day")
	assert.Contains(t, text(`#clients tr[data-client="narrow"]`), "models: gpt-4o-mini")
	assert.Contains(t, text(`#clients tr[data-client="narrow"]`), "routes: beta")
	assert.Regexp(t, `tag nightly\s*2 req`, text(`#clients tr[data-tag="nightly"]`))
	assert.Regexp(t, `tag ci\s*1 req`, text(`#clients tr[data-tag="ci"]`))
	assert.NotContains(t, text(`.key[data-key="a1"]`), "requests this minute", "a key without limits counts no minute, and shows no 0 for it")
	html := read(t, ctx, chromedp.OuterHTML(chromedp.CSS("html")))
	for name, token := range clientTokens {
		assert.NotContains(t, html, token, "no client's token on the page (%s)", name)
	}
	assert.LessOrEqual(t, pageOverflow(t, ctx), 0)
	shoot(t, ctx, dir, "clients-1280x800.png")

	inTab(t, ctx, "a phone's width",
		chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulateScale(2)),
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS(`#clients tr[data-client="capped"]`)),
	)
	assert.LessOrEqual(t, pageOverflow(t, ctx), 0, "the page fits a phone's width: the table scrolls in its box")
	shoot(t, ctx, dir, "clients-390x844.png")
}
