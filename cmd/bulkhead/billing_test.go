package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/billing/price"
	"github.com/bulkhead-ai/bulkhead/models/testkit"
)

// usageReport is the part of GET /ai/usage these tests read.
type usageReport struct {
	AccountID string `json:"account_id"`
	Totals    struct {
		Requests         int64            `json:"requests"`
		PromptTokens     int64            `json:"prompt_tokens"`
		CachedTokens     int64            `json:"cached_tokens"`
		CompletionTokens int64            `json:"completion_tokens"`
		Neurons          float64          `json:"neurons"`
		Outcomes         map[string]int64 `json:"outcomes"`
	} `json:"totals"`
	Today struct {
		Neurons   float64  `json:"neurons"`
		Remaining *float64 `json:"remaining"`
	} `json:"today"`
}

// getUsage reads url (a usage API path under edge) with token.
func getUsage(t *testing.T, edge, path, token string, out any) int {
	t.Helper()
	req, _ := http.NewRequest("GET", edge+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var env struct {
		Result json.RawMessage `json:"result"`
	}
	if resp.StatusCode == 200 && out != nil {
		if err := json.Unmarshal(b, &env); err != nil {
			t.Fatalf("%s: %v: %s", path, err, b)
		}
		if err := json.Unmarshal(env.Result, out); err != nil {
			t.Fatalf("%s: %v: %s", path, err, b)
		}
	}
	return resp.StatusCode
}

var billingStopped = regexp.MustCompile(`billing stopped.*\bcounted"?[=:](\d+).*\bduplicates"?[=:](\d+)`) // text or JSON logs

// TestBillingSurvivesKills: while clients send requests through a real edge,
// NATS, two workers and redis-server (separate processes), the billing
// process is killed (SIGKILL, or SIGTERM) and restarted again and again. At
// the end the ledger holds every request once: its rollups equal the sum of
// the usage the clients were told, no more and no less.
func TestBillingSurvivesKills(t *testing.T) {
	c := startCluster(t)
	faulty := buildBinary(t, t.TempDir(), "faults") // the only build with --fault-exit-after
	edgeURL := c.edge(t)
	redisURL := c.redisURL
	billing := func(name string) *process {
		return c.start(t, name, c.bin, "billing", "--nats", c.natsURL, "--redis", redisURL, "--ack-wait", "2s")
	}
	tok := c.token(t, "acme")
	reader, err := c.key.Mint("acme", []string{"billing:read"}, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	from := time.Now().UTC().Add(-time.Hour).Format(time.RFC3339)

	const clients, perClient = 8, 100
	var (
		mu                           sync.Mutex
		sent, prompt, compl          int64
		micro                        int64
		done                         atomic.Bool
		kills, terms, faults, starts int
	)
	var load sync.WaitGroup
	for i := range clients {
		load.Go(func() {
			for j := range perClient {
				body := fmt.Sprintf(`{"prompt":"Once upon a time","raw":true,"max_tokens":%d,"temperature":1,"seed":%d}`, 4+(i+j)%12, i*1000+j)
				status, b := post(t, tok, edgeURL+"/ai/run/"+clusterModel, body)
				var got struct {
					Result struct {
						Usage struct {
							PromptTokens     int `json:"prompt_tokens"`
							CompletionTokens int `json:"completion_tokens"`
						} `json:"usage"`
					} `json:"result"`
				}
				if status != 200 || json.Unmarshal(b, &got) != nil {
					t.Errorf("request: %d %s", status, b)
					continue
				}
				u := got.Result.Usage
				mu.Lock()
				sent++
				prompt += int64(u.PromptTokens)
				compl += int64(u.CompletionTokens)
				micro += price.Micro(price.Default(), price.Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens})
				mu.Unlock()
			}
		})
	}
	loadDone := make(chan struct{})
	go func() { load.Wait(); done.Store(true); close(loadDone) }()

	dups := 0 // events a billing process found counted already (its predecessor died before acking)
	var procs []*process
	graceful := func(out string) {
		m := billingStopped.FindStringSubmatch(out)
		if m == nil {
			t.Errorf("a billing process stopped by SIGTERM did not log its stats:\n%s", out)
			return
		}
		n, _ := strconv.Atoi(m[2])
		if got := strings.Count(out, "already counted"); got != n {
			t.Errorf("a billing process logged %d duplicates and counted %d", got, n)
		}
	}
	for round := 0; !done.Load() || round < 9; round++ {
		if round%3 == 2 {
			// Dies right after counting an event, before acking it: the
			// next process gets it again and must not count it twice.
			p := c.start(t, fmt.Sprintf("billing-%d-fault", round), faulty, "billing", "--nats", c.natsURL,
				"--redis", redisURL, "--ack-wait", "2s", "--fault-exit-after", "5")
			procs = append(procs, p)
			starts++
			select {
			case <-p.exited():
				faults++
			case <-loadDone:
				// The load may end with fewer than 5 events left for it: give
				// it a moment, then kill it like the others.
				select {
				case <-p.exited():
					faults++
				case <-time.After(3 * time.Second):
					p.proc.Signal(syscall.SIGKILL)
					<-p.exited()
					kills++
				}
			case <-time.After(60 * time.Second):
				t.Fatal("the faulty billing process did not exit")
			}
			continue
		}
		p := billing(fmt.Sprintf("billing-%d", round))
		procs = append(procs, p)
		starts++
		testkit.Poll(t, 30*time.Second, testkit.Cond("billing to start", func() bool { return strings.Contains(p.output(), "counting usage events") }))
		time.Sleep(time.Duration(150+70*(round%5)) * time.Millisecond) // let it count, then kill it mid-work
		if round%3 == 0 {
			p.proc.Signal(syscall.SIGKILL)
			kills++
		} else {
			p.proc.Signal(syscall.SIGTERM)
			terms++
		}
		<-p.exited()
		if round%3 == 1 {
			graceful(p.output())
		}
	}
	load.Wait()
	if t.Failed() {
		t.FailNow()
	}
	last := billing("billing-last")
	procs = append(procs, last)
	starts++
	var rep usageReport
	testkit.Poll(t, 90*time.Second, testkit.Cond("the ledger to hold every request", func() bool {
		getUsage(t, edgeURL, "/ai/usage?granularity=hour&from="+from, reader, &rep)
		return rep.Totals.Requests >= sent
	}))
	// Redeliveries after the last kill have had their AckWait (2s) to arrive.
	time.Sleep(3 * time.Second)
	getUsage(t, edgeURL, "/ai/usage?granularity=hour&from="+from, reader, &rep)
	last.stop(syscall.SIGTERM)
	graceful(last.output())
	for _, p := range procs {
		dups += strings.Count(p.output(), "already counted")
	}
	t.Logf("%d requests sent (one usage event each), %d counted; %d billing processes started: %d SIGKILLed, %d SIGTERMed, "+
		"%d exited between counting and acking; %d redelivered events found already counted (not counted again)",
		sent, rep.Totals.Requests, starts, kills, terms, faults, dups)
	if dups < faults {
		t.Errorf("%d processes died between counting and acking, but only %d redeliveries were seen", faults, dups)
	}
	if rep.Totals.Requests != sent || rep.Totals.PromptTokens != prompt || rep.Totals.CompletionTokens != compl ||
		price.ToMicro(rep.Totals.Neurons) != micro {
		t.Fatalf("ledger %+v; clients were told %d requests, %d prompt and %d completion tokens, %d micro-neurons",
			rep.Totals, sent, prompt, compl, micro)
	}
	if price.ToMicro(rep.Today.Neurons) != micro {
		t.Fatalf("today's neurons %v, want %v: the budget's number and the rollups disagree", rep.Today.Neurons, price.Neurons(micro))
	}
}

// TestBudgetStopsTenant: a tenant at its daily neurons is refused with 3036
// before its next request is queued, also when the neurons came from a
// stream it cancelled (billed by billing from the worker's usage event).
func TestBudgetStopsTenant(t *testing.T) {
	// Held at token 200: the stream the client leaves is still running.
	c := startHeldCluster(t, false, "unified")
	edgeURL := c.edge(t, "--quota-daily-neurons", "0.3")
	c.start(t, "billing", c.bin, "billing", "--nats", c.natsURL, "--redis", c.redisURL)
	tok := c.token(t, "spender")
	reader, err := c.key.Mint("spender", []string{"billing:read"}, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// A long stream, cancelled after a few tokens: billed for what it made.
	req, _ := http.NewRequest("POST", edgeURL+"/ai/run/"+clusterModel, strings.NewReader(`{"prompt":"Once upon a time","raw":true,"max_tokens":2000,"temperature":1,"seed":9,"stream":true}`))
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	for n := 0; n < 10 && sc.Scan(); {
		if strings.HasPrefix(sc.Text(), "data: ") {
			n++
		}
	}
	resp.Body.Close()
	var rep usageReport
	testkit.Poll(t, 30*time.Second, testkit.Cond("the cancelled stream to be billed", func() bool {
		getUsage(t, edgeURL, "/ai/usage", reader, &rep)
		return rep.Totals.Outcomes["cancelled"] == 1
	}))
	if rep.Totals.CompletionTokens < 10 || rep.Totals.CompletionTokens >= 2000 {
		t.Fatalf("cancelled stream billed for %d completion tokens; want what it produced (10 or more, under 2000)", rep.Totals.CompletionTokens)
	}
	// Spend the rest, then the next request is refused before it is queued.
	for i := 0; ; i++ {
		status, body := post(t, tok, edgeURL+"/ai/run/"+clusterModel, `{"prompt":"Once upon a time","raw":true,"max_tokens":20}`)
		if status == 429 {
			if !strings.Contains(string(body), `"code":3036`) {
				t.Fatalf("refusal %s, want code 3036", body)
			}
			break
		}
		if status != 200 || i > 50 {
			t.Fatalf("request %d: %d %s", i, status, body)
		}
	}
	getUsage(t, edgeURL, "/ai/usage", reader, &rep)
	if rep.Today.Neurons < 0.3 || rep.Today.Remaining == nil || *rep.Today.Remaining != 0 {
		t.Fatalf("today %+v: want the budget used up", rep.Today)
	}
}

// TestNoFaultFlagsShipped: the binary built without -tags faults has no
// fault-injection flag.
func TestNoFaultFlagsShipped(t *testing.T) {
	_, stderr, code := bulkhead(t, "billing", "--fault-exit-after", "1", "--redis", "redis://127.0.0.1:1/0")
	if code == 0 || !strings.Contains(stderr, "fault-exit-after") {
		t.Errorf("billing --fault-exit-after: exit %d: %s; want it refused as an unknown flag", code, stderr)
	}
	for _, flag := range []string{"fault-hold-at", "fault-engine-hold-at"} {
		_, stderr, code = bulkhead(t, "worker", "--"+flag, "1", "--model", "m=/nonexistent.gguf")
		if code != 2 || !strings.Contains(stderr, flag) {
			t.Errorf("worker --%s: exit %d: %s; want it refused as an unknown flag", flag, code, stderr)
		}
	}
}

// TestSpendByKey: two API keys of one tenant (tokens with a "key" claim)
// and a token without one, through real processes: the usage API's
// group_by=key gives each key's spend, equal to the sum of its requests'
// usage in the recent-requests list; group_by=tag the same by metadata tag;
// the CSV a row per key.
func TestSpendByKey(t *testing.T) {
	c := startClusterRoles(t, "unified")
	edgeURL := c.edge(t)
	c.start(t, "billing", c.bin, "billing", "--nats", c.natsURL, "--redis", c.redisURL)
	mint := func(key string, scopes ...string) string {
		tok, err := c.key.MintKey("acme", key, scopes, nil, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	ci, prod, plain, reader := mint("ci", "ai:run"), mint("prod", "ai:run"), mint("", "ai:run"), mint("", "billing:read")
	sent := 0
	for i, tok := range []string{ci, ci, ci, prod, prod, plain} {
		body := fmt.Sprintf(`{"model":%q,"prompt":"Once upon a time","max_tokens":%d,"temperature":1,"seed":%d,"metadata":{"app":"search","n":"%d"}}`, clusterModel, 4+3*i, i, i%2)
		if status, b := post(t, tok, edgeURL+"/v1/completions", body); status != 200 {
			t.Fatalf("request %d: %d %s", i, status, b)
		}
		sent++
	}
	type group struct {
		Name     string  `json:"name"`
		Requests int64   `json:"requests"`
		Neurons  float64 `json:"neurons"`
	}
	var byKey struct {
		GroupBy string  `json:"group_by"`
		Groups  []group `json:"groups"`
	}
	testkit.Poll(t, 60*time.Second, func() error {
		getUsage(t, edgeURL, "/ai/usage?group_by=key", reader, &byKey)
		var n int64
		for _, g := range byKey.Groups {
			n += g.Requests
		}
		if n != int64(sent) {
			return fmt.Errorf("%d of %d requests counted by key", n, sent)
		}
		return nil
	})
	var recent struct {
		Requests []struct {
			Key     string  `json:"key"`
			Neurons float64 `json:"neurons"`
		} `json:"requests"`
	}
	getUsage(t, edgeURL, "/ai/usage/requests?limit=50", reader, &recent)
	want := map[string]float64{}
	for _, r := range recent.Requests {
		want[r.Key] += r.Neurons
	}
	got := map[string]group{}
	for _, g := range byKey.Groups {
		got[g.Name] = g
	}
	if byKey.GroupBy != "key" || len(got) != 3 || got["ci"].Requests != 3 || got["prod"].Requests != 2 || got[""].Requests != 1 {
		t.Fatalf("by key %+v", byKey)
	}
	for k, w := range want {
		if d := got[k].Neurons - w; d > 1e-6 || d < -1e-6 || w <= 0 {
			t.Errorf("key %q: %v neurons by key, %v summed over its requests", k, got[k].Neurons, w)
		}
	}
	t.Logf("spend by key: ci %.6f, prod %.6f, none %.6f neurons", got["ci"].Neurons, got["prod"].Neurons, got[""].Neurons)
	var byTag struct {
		Groups []group `json:"groups"`
	}
	getUsage(t, edgeURL, "/ai/usage?group_by=tag", reader, &byTag)
	tags := map[string]int64{}
	for _, g := range byTag.Groups {
		tags[g.Name] = g.Requests
	}
	if tags["app=search"] != 6 || tags["n=0"] != 3 || tags["n=1"] != 3 {
		t.Errorf("by tag %+v", byTag.Groups)
	}
	for _, bad := range []string{"/ai/usage?group_by=key&model=" + clusterModel, "/ai/usage?group_by=user"} {
		if status := getUsage(t, edgeURL, bad, reader, nil); status != 400 {
			t.Errorf("%s: %d, want 400", bad, status)
		}
	}
	req, _ := http.NewRequest("GET", edgeURL+"/ai/usage?group_by=key", nil)
	req.Header.Set("Authorization", "Bearer "+reader)
	req.Header.Set("Accept", "text/csv")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 4 || lines[0] != "key,requests,prompt_tokens,cached_tokens,completion_tokens,neurons" ||
		!strings.Contains(string(b), "\nci,3,") || !strings.Contains(string(b), "\nprod,2,") {
		t.Errorf("CSV by key:\n%s", b)
	}
}
