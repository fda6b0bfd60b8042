package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The status page shows a disabled key as disabled, with who did it and
// since when, in its card and in the table, counts it in the summary, and
// its Enable button puts it back.
func TestBrowserDisabledKey(t *testing.T) {
	ctx := browser(t)
	dir := screenshotDir(t)
	clock := newTestClock(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
	base := twoKeyProxy(t, clock, nil)
	sendOK(t, base, 2)
	status, body := sendWith(t, http.MethodPost, base+"/keys/openai/a/disable", nil,
		http.Header{"Authorization": {"Bearer " + proxyToken}})
	require.Equal(t, http.StatusOK, status, body)
	clock.set(time.Date(2026, 3, 10, 12, 3, 0, 0, time.UTC))

	logInAt(t, ctx, base, `.key[data-key="a"]`)
	text := func(sel string) string {
		return strings.ReplaceAll(read(t, ctx, chromedp.Text(chromedp.CSS(sel))), "\u00a0", " ")
	}
	assert.Equal(t, "disabled", text(`.key[data-key="a"] .key-head .badge`))
	assert.Regexp(t, `disabled by proxy_tokens\[0\] · since \d\d:00:00`, text(`.key[data-key="a"] .state-line`))
	assert.Contains(t, text("#summary"), "1 serving, 0 benched, 0 full, 1 disabled")
	assert.Equal(t, 1, countOf(t, ctx, `.key[data-key="a"] button.enable`))
	assert.Zero(t, countOf(t, ctx, `.key[data-key="a"] button.unbench`))
	assert.Contains(t, text("#events"), "a disabled by proxy_tokens[0]")
	assert.LessOrEqual(t, pageOverflow(t, ctx), 0)
	shoot(t, ctx, dir, "disabled-1280x800.png")

	inTab(t, ctx, "the table",
		chromedp.Click(chromedp.CSS(`section[data-route="openai"] .view-toggle [data-view="table"]`)),
		chromedp.WaitVisible(chromedp.CSS(`.key-table tr[data-key="a"]`)))
	assert.Contains(t, text(`.key-table tr[data-key="a"]`), "disabled by proxy_tokens[0]")
	assert.Equal(t, "a", read(t, ctx, chromedp.Evaluate[string](`document.querySelector('.key-table tbody tr').dataset.key`)),
		"a disabled key sorts first by state")
	inTab(t, ctx, "enable",
		chromedp.Click(chromedp.CSS(`.key-table tr[data-key="a"] button.enable`)),
		chromedp.WaitVisible(chromedp.CSS(`.key-table tr[data-key="a"].state-serving`)))
	assert.Contains(t, text("#events"), "a enabled by proxy_tokens[0] (status page)")
	assert.Contains(t, text("#summary"), "2 serving")
}
