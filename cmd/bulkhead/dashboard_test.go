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
	"regexp"
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
	KeyRows                               map[string]keyRow
	Alerts                                []string // "key threshold", newest first
	RowKeys                               []string // each recent request's key
	Filter, RecentCount, KeysNote         string
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
    KeyRows: Object.fromEntries(Array.from(document.querySelectorAll("#keys tr")).map((tr) => {
      const today = tr.querySelector("td.budget");
      return [tr.dataset.key, {
        Today: today.textContent, TodayValue: today.dataset.value || "", TodayBudget: today.dataset.budget || "",
        Kind: (tr.querySelector("td.kind") || {}).textContent || "", Alert: tr.dataset.alert,
        Badge: tr.querySelector("td.alert").textContent, On: tr.classList.contains("on"),
      }];
    })),
    Alerts: Array.from(document.querySelectorAll("#alerts li")).map((li) => li.dataset.key + " " + li.dataset.threshold),
    RowKeys: Array.from(document.querySelectorAll("#recent tr")).map((tr) => tr.dataset.key),
    Filter: document.getElementById("key-filter").value, RecentCount: document.getElementById("recent-count").textContent,
    KeysNote: document.getElementById("keys-note").hidden ? "" : document.getElementById("keys-note").textContent,
    Hash: location.hash, HTML: document.documentElement.outerHTML,
    ChartEmpty: !document.getElementById("chart-empty").hidden,
    RecentEmpty: !document.getElementById("recent-empty").hidden,
    Canvas: !!document.querySelector("#chart canvas"),
    Error: document.getElementById("error").hidden ? "" : document.getElementById("error").textContent,
  };
})()`

// keyRow is one row of the dashboard's keys table.
type keyRow struct {
	Today, TodayValue, TodayBudget string // today's cell: its text, spend and budget
	Kind, Alert, Badge             string // hard or soft; the alert level ("100", "ok", "" for no policy) and its badge
	On                             bool   // highlighted by the key filter
}

// keyGroup is one key's spend over a range (the usage API's group_by=key).
type keyGroup struct {
	Name     string  `json:"name"`
	Requests int64   `json:"requests"`
	Neurons  float64 `json:"neurons"`
}

type keyGroups struct {
	Groups []keyGroup `json:"groups"`
}

func (g keyGroups) of(key string) keyGroup {
	for _, x := range g.Groups {
		if x.Name == key {
			return x
		}
	}
	return keyGroup{}
}

// keyState is one key of GET /ai/usage/keys: today's spend against its
// daily budget.
type keyState struct {
	Key string `json:"key"`
	Day struct {
		Neurons float64  `json:"neurons"`
		Budget  *float64 `json:"budget"`
		Share   *float64 `json:"share"`
		Alert   int      `json:"alert"`
	} `json:"day"`
}

type keyPolicies struct {
	Keys   []keyState `json:"keys"`
	Alerts []struct {
		Key       string `json:"key"`
		Threshold int    `json:"threshold"`
	} `json:"alerts"`
}

func (k keyPolicies) of(key string) keyState {
	for _, x := range k.Keys {
		if x.Key == key {
			return x
		}
	}
	return keyState{}
}

// TestDashboardInBrowser sends real requests through edge, NATS, workers,
// billing and redis-server processes, opens the dashboard in headless
// Chromium with the tenant's token in the URL fragment, and checks that the
// numbers it shows are the usage API's; the keys table shows two API keys'
// spend, ci's over its soft daily budget with the 100% alert and prod's hard
// budget "ok", the recent alerts, and the key filter narrows the recent
// requests to a key's (with the keys call failing, the spend by key still
// shows); another tenant's token shows none of them; a token without
// billing:read is told so. It writes screenshots at 1280 and 390 pixels
// wide, and of the keys card.
func TestDashboardInBrowser(t *testing.T) {
	chrome := chromium(t)
	// Held at token 200: the stream the client leaves is still running.
	c := startHeldCluster(t, false, "unified")
	const second = "@cf/tinyllamas/stories260k-chat"
	c.start(t, "worker-both", c.workerBin, append([]string{"worker", "--nats", c.natsURL, "--model", clusterModel + "=" + c.model,
		"--model", second + "=" + c.model, "--threads", "1"}, c.workerArgs...)...)
	edgeURL := c.edge(t, "--model", second+"="+c.model, "--quota-daily-neurons", "40")
	c.start(t, "billing", c.bin, "billing", "--nats", c.natsURL, "--redis", c.redisURL)

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
	// prod has a hard budget it stays well within; ci gets a soft daily
	// budget of what its first three requests cost, so its fourth passes
	// it and raises the 100% alert (soft: it is not refused).
	admin := mint("acme", "billing:write")
	keysURL := edgeURL + "/ai/usage/keys/"
	if status, b := put(t, admin, keysURL+"prod", `{"daily_neurons":20,"monthly_neurons":200}`); status != 200 {
		t.Fatalf("setting prod's policy: %d %s", status, b)
	}
	sent := 0
	for i := range 14 {
		if i == 3 {
			var byKey keyGroups
			testkit.Poll(t, 60*time.Second, testkit.Cond("billing to count ci's first three requests", func() bool {
				getUsage(t, edgeURL, "/ai/usage?group_by=key", acme, &byKey)
				return byKey.of("ci").Requests == 3
			}))
			policy := fmt.Sprintf(`{"daily_neurons":%.6f,"soft":true}`, byKey.of("ci").Neurons)
			if status, b := put(t, admin, keysURL+"ci", policy); status != 200 {
				t.Fatalf("setting ci's policy: %d %s", status, b)
			}
		}
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
	// Two OpenAI requests tagged with metadata, for the tag filter.
	for i := range 2 {
		body := fmt.Sprintf(`{"model":%q,"prompt":"Once upon a time","max_tokens":6,"seed":%d,"metadata":{"app":"search"}}`, clusterModel, i)
		if status, b := post(t, run, edgeURL+"/v1/completions", body); status != 200 {
			t.Fatalf("tagged request %d: %d %s", i, status, b)
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
	var keys keyPolicies
	testkit.Poll(t, 60*time.Second, testkit.Cond("billing to raise ci's 100% alert", func() bool {
		getUsage(t, edgeURL, "/ai/usage/keys", acme, &keys)
		return keys.of("ci").Day.Alert == 100
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
		writeScreenshot(t, name, png)
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
	t.Run("keys against their budgets, alerts, the key filter", func(t *testing.T) {
		s := open(t, acme, 1280, 900)
		if s.State != "ready" || s.Error != "" {
			t.Fatalf("dashboard state %q, error %q", s.State, s.Error)
		}
		var api keyPolicies
		if status := getUsage(t, edgeURL, "/ai/usage/keys", acme, &api); status != 200 {
			t.Fatalf("GET /ai/usage/keys: %d", status)
		}
		over := api.of("ci").Day
		if over.Budget == nil || over.Share == nil || *over.Share < 1 || over.Alert != 100 {
			t.Fatalf("the API: ci's day %+v, want over its budget with the 100%% alert", over)
		}
		// ci: today's spend against its budget, as "spend / budget (share)".
		ciRow, prodRow, noKeyRow := s.KeyRows["ci"], s.KeyRows["prod"], s.KeyRows[""]
		m := regexp.MustCompile(`^([\d.,]+) / ([\d.,]+) \((\d[\d,]*)%\)`).FindStringSubmatch(ciRow.Today)
		if m == nil || ciRow.TodayValue != jsNumber(over.Neurons) || ciRow.TodayBudget != jsNumber(*over.Budget) ||
			strings.ReplaceAll(m[3], ",", "") != fmt.Sprintf("%.0f", 100**over.Share) {
			t.Errorf("ci today: dashboard %+v; the API: %v of %v (share %v)", ciRow, over.Neurons, *over.Budget, *over.Share)
		}
		for _, x := range []struct {
			key        string
			row        keyRow
			alert, txt string
		}{
			{"ci", ciRow, "100", "100% alert"},
			{"prod", prodRow, "ok", "ok"},
			{"no key", noKeyRow, "", "–"},
		} {
			if x.row.Alert != x.alert || x.row.Badge != x.txt {
				t.Errorf("%s: alert %q, badge %q; want %q, %q", x.key, x.row.Alert, x.row.Badge, x.alert, x.txt)
			}
		}
		if ciRow.Kind != "Soft" || prodRow.Kind != "Hard" || noKeyRow.Today != "no budget" ||
			!strings.Contains(prodRow.Today, " / 20 (") {
			t.Errorf("ci %+v, prod %+v, no key %+v: want soft, hard with a budget of 20, no budget", ciRow, prodRow, noKeyRow)
		}
		var want []string
		for _, a := range api.Alerts {
			want = append(want, fmt.Sprintf("%s %d", a.Key, a.Threshold))
		}
		if strings.Join(s.Alerts, ",") != strings.Join(want, ",") || len(want) != 3 || want[0] != "ci 100" {
			t.Errorf("alerts: dashboard %v, the API %v; want ci's 100, 80 and 50", s.Alerts, want)
		}

		// The key filter narrows the recent requests to the key's and marks
		// its row.
		var recent struct {
			Requests []struct {
				ID  string `json:"id"`
				Key string `json:"key"`
			} `json:"requests"`
		}
		getUsage(t, edgeURL, "/ai/usage/requests?limit=20", acme, &recent)
		filter := func(t *testing.T, key string) shown {
			t.Helper()
			js := fmt.Sprintf(`(() => { const s = document.getElementById("key-filter"); s.value = %q; s.dispatchEvent(new Event("change")); return s.value; })()`, key)
			if v, err := chromedp.Run(bctx, chromedp.Evaluate[string](js)); err != nil || v != key {
				t.Fatalf("choosing key %q: %q, %v", key, v, err)
			}
			s, err := chromedp.Run(bctx, chromedp.Evaluate[shown](readPage))
			if err != nil {
				t.Fatalf("reading the page: %v", err)
			}
			return s
		}
		s = filter(t, "ci")
		var ids []string
		for _, r := range recent.Requests {
			if r.Key == "ci" {
				ids = append(ids, r.ID)
			}
		}
		if strings.Join(s.Rows, ",") != strings.Join(ids, ",") || len(ids) != 4 || !strings.HasPrefix(s.RecentCount, "4 of ") {
			t.Errorf("filtered to ci: rows %v (keys %v, %q), the API's ci requests %v", s.Rows, s.RowKeys, s.RecentCount, ids)
		}
		if !s.KeyRows["ci"].On || s.KeyRows["prod"].On || s.KeyRows[""].On {
			t.Errorf("filtered to ci, highlighted: ci %v, prod %v, no key %v", s.KeyRows["ci"].On, s.KeyRows["prod"].On, s.KeyRows[""].On)
		}
		png, err := chromedp.Run(bctx, chromedp.Screenshot(chromedp.ID("keys-card")))
		if err != nil {
			t.Fatal(err)
		}
		writeScreenshot(t, "dashboard-keys-1280.png", png)
		if s = filter(t, ""); len(s.Rows) != len(recent.Requests) || s.KeyRows["ci"].On {
			t.Errorf("filter cleared: %d rows, want %d; ci still highlighted %v", len(s.Rows), len(recent.Requests), s.KeyRows["ci"].On)
		}

		// The tag filter narrows them to the requests with that metadata.
		var tagged struct {
			Requests []struct {
				ID       string            `json:"id"`
				Metadata map[string]string `json:"metadata"`
			} `json:"requests"`
		}
		getUsage(t, edgeURL, "/ai/usage/requests?limit=20", acme, &tagged)
		var tagIDs []string
		for _, r := range tagged.Requests {
			if r.Metadata["app"] == "search" {
				tagIDs = append(tagIDs, r.ID)
			}
		}
		pick := `(() => { const s = document.getElementById("tag-filter"); s.value = "app=search"; s.dispatchEvent(new Event("change")); return s.value; })()`
		if v, err := chromedp.Run(bctx, chromedp.Evaluate[string](pick)); err != nil || v != "app=search" {
			t.Fatalf("choosing tag app=search: %q, %v", v, err)
		}
		if s, err = chromedp.Run(bctx, chromedp.Evaluate[shown](readPage)); err != nil {
			t.Fatalf("reading the page: %v", err)
		}
		if strings.Join(s.Rows, ",") != strings.Join(tagIDs, ",") || len(tagIDs) != 2 || !strings.HasPrefix(s.RecentCount, "2 of ") {
			t.Errorf("filtered to app=search: rows %v (%q), the API's tagged requests %v", s.Rows, s.RecentCount, tagIDs)
		}
		clear := `(() => { const s = document.getElementById("tag-filter"); s.value = ""; s.dispatchEvent(new Event("change")); return s.value; })()`
		if _, err := chromedp.Run(bctx, chromedp.Evaluate[string](clear)); err != nil {
			t.Fatal(err)
		}

		// When the keys call fails (refused here as for a token without the
		// scope), the spend by key still shows, and says what is missing.
		before := s.Keys
		refuse := `(() => {
  const f = window.fetch;
  window.fetch = (u, o) => String(u).startsWith("/ai/usage/keys") ? Promise.resolve(new Response(
    JSON.stringify({ success: false, errors: [{ code: 10000, message: "missing scope" }] }),
    { status: 403, headers: { "Content-Type": "application/json" } })) : f(u, o);
  document.getElementById("refresh").click();
  return true;
})()`
		_, err = chromedp.Run(bctx, chromedp.Evaluate[bool](refuse))
		if err == nil {
			err = chromedp.Do(bctx, chromedp.WaitReady(`#dash[data-state="ready"], #dash[data-state="error"]`))
		}
		if err != nil {
			t.Fatalf("refusing the keys call: %v", err)
		}
		if s, err = chromedp.Run(bctx, chromedp.Evaluate[shown](readPage)); err != nil {
			t.Fatalf("reading the page: %v", err)
		}
		if s.State != "ready" || s.Error != "" || fmt.Sprint(s.Keys) != fmt.Sprint(before) || s.KeyRows["ci"].Today != "–" ||
			s.KeyRows["ci"].Alert != "" || len(s.Alerts) != 0 || !strings.Contains(s.KeysNote, "missing scope") {
			t.Errorf("without the keys call: state %q, error %q, keys %v (before %v), ci %+v, alerts %v, note %q",
				s.State, s.Error, s.Keys, before, s.KeyRows["ci"], s.Alerts, s.KeysNote)
		}
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

// writeScreenshot writes png as name in screenshotDir.
func writeScreenshot(t *testing.T, name string, png []byte) {
	t.Helper()
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

// jsNumber renders v as JavaScript's String(number) does for the values
// these tests meet.
func jsNumber(v float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.6f", v), "0"), ".")
}
