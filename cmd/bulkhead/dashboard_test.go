package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/bulkhead-ai/bulkhead/models/testkit"
)

// chromium finds Debian's chromium; the test is skipped, saying so, only
// when it is not installed (make test installs it).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("chromium is not installed, so the dashboard's browser test cannot run: apt-get install -y chromium (make test does this)")
	return ""
}

// screenshotDir is where the dashboard screenshots go: $BULKHEAD_SCREENSHOTS
// (make screenshots sets it to docs/), else the test's artifact directory.
func screenshotDir(t *testing.T) string {
	if d := os.Getenv("BULKHEAD_SCREENSHOTS"); d != "" {
		return d
	}
	return t.ArtifactDir()
}

// shown is what the dashboard displays, read from the page.
type shown struct {
	State, From, To, Granularity, Account string
	Requests, Prompt, Cached, Completion  string
	Neurons, Today, Remaining             string
	Outcomes                              map[string]string
	Rows                                  []string
	Keys                                  map[string]string // key -> neurons, from the keys table
	Hash, HTML                            string
	ChartEmpty, RecentEmpty, Canvas       bool
	Error                                 string
}

const readPage = `(() => {
  const v = (id) => document.getElementById(id).dataset.value;
  const d = document.getElementById("dash");
  const out = {};
  document.querySelectorAll("#outcomes li").forEach((li) => { out[li.dataset.outcome] = li.dataset.value; });
  return {
    State: d.dataset.state || "", From: d.dataset.from || "", To: d.dataset.to || "", Granularity: d.dataset.granularity || "",
    Account: document.getElementById("account").textContent,
    Requests: v("requests-total"), Prompt: v("prompt-tokens"), Cached: v("cached-tokens"), Completion: v("completion-tokens"),
    Neurons: v("neurons-total"), Today: v("neurons-today"), Remaining: v("neurons-remaining"),
    Outcomes: out,
    Rows: Array.from(document.querySelectorAll("#recent tr")).map((tr) => tr.dataset.requestId),
    Keys: Object.fromEntries(Array.from(document.querySelectorAll("#keys tr")).map((tr) => [tr.dataset.key, tr.dataset.value])),
    Hash: location.hash, HTML: document.documentElement.outerHTML,
    ChartEmpty: !document.getElementById("chart-empty").hidden,
    RecentEmpty: !document.getElementById("recent-empty").hidden,
    Canvas: !!document.querySelector("#chart canvas"),
    Error: document.getElementById("error").hidden ? "" : document.getElementById("error").textContent,
  };
})()`

// TestDashboardInBrowser sends real requests through edge, NATS, workers,
// billing and redis-server processes, opens the dashboard in headless
// Chromium with the tenant's token in the URL fragment, and checks that the
// numbers it shows are the usage API's; another tenant's token shows none of
// them; a token without billing:read is told so. It writes screenshots at
// 1280 and 390 pixels wide.
func TestDashboardInBrowser(t *testing.T) {
	chrome := chromium(t)
	// Held at token 200: the stream the client leaves is still running.
	c := startHeldCluster(t, false, "unified")
	const second = "@cf/tinyllamas/stories260k-chat"
	start(t, "worker-both", c.workerBin, append([]string{"worker", "--nats", c.natsURL, "--model", clusterModel + "=" + c.model,
		"--model", second + "=" + c.model, "--threads", "1"}, c.workerArgs...)...)
	edgeURL := c.edge(t, "edge", "--model", second+"="+c.model, "--quota-daily-neurons", "40")
	start(t, "billing", c.bin, "billing", "--nats", c.natsURL, "--redis", "redis://"+c.redis.Addr()+"/0")

	run := c.token(t, "acme")
	mint := func(tenant string, scopes ...string) string {
		tok, err := c.key.Mint(tenant, scopes, nil, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	acme, mallory := mint("acme", "billing:read"), mint("mallory", "billing:read", "ai:run")

	// Some requests come with two of acme's API keys (the key claim).
	keyed := func(key string) string {
		tok, err := c.key.MintKey("acme", key, []string{"ai:run"}, nil, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	ci, prod := keyed("ci"), keyed("prod")
	sent := 0
	for i := range 14 {
		model := []string{clusterModel, second}[i%3/2]
		body := fmt.Sprintf(`{"prompt":"Once upon a time","raw":true,"max_tokens":%d,"temperature":1,"seed":%d}`, 8+5*i, i)
		tok := run
		switch {
		case i < 4:
			tok = ci
		case i < 7:
			tok = prod
		}
		if status, b := post(t, tok, edgeURL+"/ai/run/"+model, body); status != 200 {
			t.Fatalf("request %d: %d %s", i, status, b)
		}
		sent++
	}
	// One stream the client leaves after a few tokens.
	req, _ := http.NewRequest("POST", edgeURL+"/ai/run/"+clusterModel, strings.NewReader(`{"prompt":"Once upon a time","raw":true,"max_tokens":1500,"temperature":1,"seed":5,"stream":true}`))
	req.Header.Set("Authorization", "Bearer "+run)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	for n := 0; n < 12 && sc.Scan(); {
		if strings.HasPrefix(sc.Text(), "data: ") {
			n++
		}
	}
	resp.Body.Close()
	sent++
	var rep usageReport
	testkit.Poll(t, 60*time.Second, testkit.Cond("billing to count every request", func() bool {
		getUsage(t, edgeURL, "/ai/usage", acme, &rep)
		return rep.Totals.Requests == int64(sent)
	}))

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(chrome), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.Flag("hide-scrollbars", true),
		chromedp.WindowSize(1280, 900))
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()

	open := func(t *testing.T, token string, width, height int64) shown {
		t.Helper()
		err := chromedp.Do(bctx,
			chromedp.EmulateViewport(width, height),
			chromedp.Navigate("about:blank"), // a fresh document: the app reads the fragment once, on load
			chromedp.Navigate(edgeURL+"/dashboard#token="+url.QueryEscape(token)),
			chromedp.WaitReady(`#dash[data-state="ready"], #dash[data-state="error"]`),
			chromedp.Sleep(300*time.Millisecond), // the chart's first paint
		)
		if err != nil {
			t.Fatalf("browser: %v", err)
		}
		s, err := chromedp.Run(bctx, chromedp.Evaluate[shown](readPage))
		if err != nil {
			t.Fatalf("reading the page: %v", err)
		}
		return s
	}
	screenshot := func(t *testing.T, name string) {
		t.Helper()
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		dir := screenshotDir(t)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot %s (%d bytes)", path, len(png))
	}

	t.Run("shows the API's numbers", func(t *testing.T) {
		s := open(t, acme, 1280, 900)
		if s.State != "ready" || s.Error != "" {
			t.Fatalf("dashboard state %q, error %q", s.State, s.Error)
		}
		if s.Hash != "" {
			t.Errorf("the token stayed in the address bar: %q", s.Hash)
		}
		var api struct {
			usageReport
		}
		q := "/ai/usage?granularity=" + s.Granularity + "&from=" + s.From + "&to=" + s.To
		if status := getUsage(t, edgeURL, q, acme, &api); status != 200 {
			t.Fatalf("API %s: %d", q, status)
		}
		tot := api.Totals
		for _, x := range []struct{ name, got, want string }{
			{"account", s.Account, "acme"},
			{"requests", s.Requests, fmt.Sprint(tot.Requests)},
			{"prompt tokens", s.Prompt, fmt.Sprint(tot.PromptTokens)},
			{"cached tokens", s.Cached, fmt.Sprint(tot.CachedTokens)},
			{"completion tokens", s.Completion, fmt.Sprint(tot.CompletionTokens)},
			{"neurons", s.Neurons, jsNumber(tot.Neurons)},
			{"neurons today", s.Today, jsNumber(api.Today.Neurons)},
			{"remaining today", s.Remaining, jsNumber(*api.Today.Remaining)},
			{"completed", s.Outcomes["stop"], fmt.Sprint(tot.Outcomes["stop"])},
			{"max tokens", s.Outcomes["length"], fmt.Sprint(tot.Outcomes["length"])},
			{"cancelled", s.Outcomes["cancelled"], fmt.Sprint(tot.Outcomes["cancelled"])},
		} {
			if x.got != x.want {
				t.Errorf("%s: dashboard shows %q, the API says %q", x.name, x.got, x.want)
			}
		}
		if tot.Requests != int64(sent) || tot.Outcomes["cancelled"] != 1 {
			t.Errorf("API totals %+v, want %d requests, one cancelled", tot, sent)
		}
		// The keys table is the API's spend by key over the same range.
		var byKey struct {
			Groups []struct {
				Name    string  `json:"name"`
				Neurons float64 `json:"neurons"`
			} `json:"groups"`
		}
		getUsage(t, edgeURL, q+"&group_by=key", acme, &byKey)
		if len(byKey.Groups) != 3 || len(s.Keys) != 3 {
			t.Errorf("keys: API %+v, dashboard %v; want ci, prod and no key", byKey.Groups, s.Keys)
		}
		for _, g := range byKey.Groups {
			if s.Keys[g.Name] != jsNumber(g.Neurons) {
				t.Errorf("key %q: dashboard shows %q neurons, the API says %v", g.Name, s.Keys[g.Name], g.Neurons)
			}
		}
		var recent struct {
			Requests []struct {
				ID string `json:"id"`
			} `json:"requests"`
		}
		getUsage(t, edgeURL, "/ai/usage/requests?limit=20", acme, &recent)
		var ids []string
		for _, r := range recent.Requests {
			ids = append(ids, r.ID)
		}
		if strings.Join(s.Rows, ",") != strings.Join(ids, ",") || len(ids) != sent {
			t.Errorf("recent rows %v, the API's %v", s.Rows, ids)
		}
		if s.ChartEmpty || !s.Canvas {
			t.Errorf("no chart drawn (empty state %v, canvas %v)", s.ChartEmpty, s.Canvas)
		}
		screenshot(t, "dashboard-1280.png")

		s = open(t, acme, 390, 844)
		if s.State != "ready" || s.Requests != fmt.Sprint(tot.Requests) || !s.Canvas {
			t.Errorf("at 390 px: state %q, requests %q, chart %v", s.State, s.Requests, s.Canvas)
		}
		screenshot(t, "dashboard-390.png")
	})
	t.Run("another tenant sees none of it", func(t *testing.T) {
		s := open(t, mallory, 1280, 900)
		if s.State != "ready" || s.Account != "mallory" || s.Requests != "0" || s.Neurons != "0" || s.Today != "0" ||
			!s.ChartEmpty || !s.RecentEmpty || len(s.Rows) != 0 {
			t.Fatalf("mallory's dashboard: %+v", s)
		}
		var recent struct {
			Requests []struct {
				ID string `json:"id"`
			} `json:"requests"`
		}
		getUsage(t, edgeURL, "/ai/usage/requests?limit=50", acme, &recent)
		for _, r := range recent.Requests {
			if strings.Contains(s.HTML, r.ID) {
				t.Fatalf("mallory's page holds acme's request %s", r.ID)
			}
		}
		screenshot(t, "dashboard-empty-1280.png")
	})
	t.Run("a token without billing:read is told so", func(t *testing.T) {
		s := open(t, run, 1280, 900)
		if s.State != "error" || !strings.Contains(s.Error, "billing:read") {
			t.Fatalf("state %q, error %q", s.State, s.Error)
		}
	})
}

// jsNumber renders v as JavaScript's String(number) does for the values
// these tests meet.
func jsNumber(v float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.6f", v), "0"), ".")
}
