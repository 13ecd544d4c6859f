package gateway_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/internal/browser"
	"github.com/manifold-mcp/manifold/internal/testwait"
)

// TestOperatorUsesTheAdminPage: in a real browser, an operator signs in to the admin page of
// a running gateway with the admin key, approves a held tool call (which then runs), and
// accepts a changed tool definition (which then is served again). The page is captured;
// with MANIFOLD_SCREENSHOT set, to that file too (the README's picture).
func TestOperatorUsesTheAdminPage(t *testing.T) {
	yaml := adminYAML("") + `listen: 127.0.0.1:0
policy:
  approval: {timeout: 1m}
  rules:
    - {name: echo-needs-approval, effect: approve, match: {upstreams: [a], tools: [echo]}}
upstreams:` + upstreamYAML("a", "beta", "") + rugpullYAML("r", "", "    pinning: withhold\n")
	tg := startGateway(t, yaml, nil)
	defer tg.close()
	adm := startAdmin(t, tg)
	ctx := ctxT(t)
	cs := connect(t, tg.url, nil)
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "r__rug_pull"}); err != nil {
		t.Fatal(err)
	}
	if !testwait.Within(10*time.Second, func() bool { _, listed := toolDescriptions(t, cs)["r__fetch"]; return !listed }) {
		t.Fatal("the changed tool is still listed")
	}
	done := callAsync(ctx, cs, "a__echo", map[string]any{"text": "deploy <b>now</b>"})
	held := adm.waitHeld(1)[0]

	page := browser.New(t)
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(page, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	approve := `button[data-approve="` + held.ID + `"]`
	accept := `button[data-accept="r/fetch"]`
	do("sign in",
		chromedp.Navigate(adm.url),
		chromedp.WaitVisible(chromedp.ID("key")),
		chromedp.SendKeys(chromedp.ID("key"), adminKey),
		chromedp.Click(chromedp.ID("signin-submit")),
		chromedp.WaitVisible(chromedp.CSS(approve)),
		chromedp.WaitVisible(chromedp.CSS(accept)),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-upstream="r"]`)),
	)
	shot := filepath.Join(t.TempDir(), "admin.png")
	if p := os.Getenv("MANIFOLD_SCREENSHOT"); p != "" {
		shot = p
	}
	if err := browser.Screenshot(page, shot); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", shot)

	do("approve", chromedp.Click(chromedp.CSS(approve)), chromedp.WaitNotPresent(chromedp.CSS(approve)))
	if res := <-done; res.IsError || resultText(res) != "beta:deploy <b>now</b>" {
		t.Errorf("the call approved on the page: %v %q", res.IsError, resultText(res))
	}
	do("accept", chromedp.Click(chromedp.CSS(accept)), chromedp.WaitNotPresent(chromedp.CSS(accept)))
	if !testwait.Within(10*time.Second, func() bool { return strings.Contains(toolDescriptions(t, cs)["r__fetch"], "id_rsa") }) {
		t.Error("the change accepted on the page is not served")
	}
	pwned, err := chromedp.Run(page, chromedp.Evaluate[bool](`window.alerted === true || document.querySelectorAll("script").length !== 1`))
	if err != nil || pwned {
		t.Errorf("upstream text ran or made elements on the page: %v %v", pwned, err)
	}
	if errs := browser.Errors(page); len(errs) > 0 {
		t.Errorf("the page logged errors: %q", errs)
	}
}
