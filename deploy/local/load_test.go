//go:build cluster

package local

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/edge/auth"
)

// outcome is how one request ended, as its client saw it.
type outcome int

const (
	completed outcome = iota // the whole answer: [DONE] after the text, or a 200 result
	clearErr                 // a refusal or an error event with a code from the error table
	lost                     // anything else: a cut connection, a stream without its end
)

// result is one request's end.
type result struct {
	id     string // X-Request-Id
	out    outcome
	code   int // the error table's code, for clearErr
	detail string
}

// counts sums results, for the line each fault test prints.
type counts struct {
	sent, completed, failed, lost, billedTwice int
	codes                                      map[int]int
}

func tally(rs []result) counts {
	c := counts{sent: len(rs), codes: map[int]int{}}
	for _, r := range rs {
		switch r.out {
		case completed:
			c.completed++
		case clearErr:
			c.failed++
			c.codes[r.code]++
		default:
			c.lost++
		}
	}
	return c
}

func (c counts) String() string {
	return fmt.Sprintf("requests sent %d, completed %d, failed with a clear error %d %v, lost: %d, billed twice: %d",
		c.sent, c.completed, c.failed, c.codes, c.lost, c.billedTwice)
}

// client is a tenant of its own (its billing is its alone) sending through
// the cluster's edges.
type client struct {
	t      *testing.T
	c      *Cluster
	tenant string
	token  string
	http   *http.Client
}

func newClient(t *testing.T, c *Cluster, tenant string) *client {
	t.Helper()
	key, err := auth.LoadOrCreateDevKey(c.State.KeyDir)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := key.Mint(tenant, []string{auth.ScopeRun, auth.ScopeRead, auth.ScopeBillingRead}, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &client{t: t, c: c, tenant: tenant, token: tok, http: &http.Client{Timeout: 90 * time.Second}}
}

func (cl *client) edge(i int) string {
	edges := cl.c.State.ByRole(RoleEdge)
	return cl.c.EdgeURL(edges[i%len(edges)])
}

func (cl *client) do(ctx context.Context, method, url, body string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+cl.token)
	req.Header.Set("Content-Type", "application/json")
	return cl.http.Do(req)
}

// stream sends one streaming native request through edge i and reads it to
// its end.
func (cl *client) stream(ctx context.Context, i, maxTokens int) result {
	body := fmt.Sprintf(`{"prompt":"Once upon a time","raw":true,"stream":true,"max_tokens":%d}`, maxTokens)
	resp, err := cl.do(ctx, "POST", cl.edge(i)+"/ai/run/"+cl.c.State.Model, body)
	if err != nil {
		return result{out: lost, detail: err.Error()}
	}
	defer resp.Body.Close()
	r := result{id: resp.Header.Get("X-Request-Id")}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return refusal(r, resp.StatusCode, b)
	}
	return readStream(r, resp.Body)
}

// refusal classifies a non-200 answer: clear when it is the native error
// envelope with a code.
func refusal(r result, status int, b []byte) result {
	var env struct {
		Errors []struct {
			Code int `json:"code"`
		} `json:"errors"`
	}
	if json.Unmarshal(b, &env) == nil && len(env.Errors) == 1 && env.Errors[0].Code != 0 {
		r.out, r.code = clearErr, env.Errors[0].Code
		return r
	}
	r.out, r.detail = lost, fmt.Sprintf("status %d: %s", status, b)
	return r
}

// readStream reads SSE events: [DONE] after data is completed, an error
// event with a code is a clear error, anything else is lost.
func readStream(r result, body io.Reader) result {
	sc := bufio.NewScanner(body)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data := strings.TrimPrefix(line, "data: ")
			if event == "error" {
				var e struct {
					Errors []struct {
						Code int `json:"code"`
					} `json:"errors"`
				}
				if json.Unmarshal([]byte(data), &e) == nil && len(e.Errors) == 1 && e.Errors[0].Code != 0 {
					r.out, r.code = clearErr, e.Errors[0].Code
					return r
				}
				r.out, r.detail = lost, "error event without a code: "+data
				return r
			}
			if data == "[DONE]" {
				r.out = completed
				return r
			}
		}
	}
	r.out, r.detail = lost, fmt.Sprintf("stream ended without [DONE] or an error event (%v)", sc.Err())
	return r
}

// load sends n streaming requests, conc at a time, alternating edges, and
// returns their results once all ended. started, if not nil, gets a value
// when the first request has been answered in full (the load is flowing).
func (cl *client) load(ctx context.Context, n, conc, maxTokens int) []result {
	out := make([]result, n)
	next := make(chan int)
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			for i := range next {
				out[i] = cl.stream(ctx, i, maxTokens)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}

// checkNoneLost fails the test for each lost request, naming it.
func checkNoneLost(t *testing.T, rs []result) {
	t.Helper()
	for _, r := range rs {
		if r.out == lost {
			t.Errorf("request %s lost: %s", r.id, r.detail)
		}
	}
}

// billing waits until billing has counted every request that reached a
// worker (at least want, stable for a moment) and returns how many request
// ids it counted more than once; it fails the test for a completed request
// that was not billed.
func (cl *client) billing(rs []result, want int) int {
	cl.t.Helper()
	var ids map[string]int
	var total int64
	deadline := time.Now().Add(60 * time.Second)
	stable := 0
	for {
		var err error
		total, ids, err = cl.ledger()
		switch {
		case err != nil:
			stable = 0
		case int(total) >= want && allBilled(rs, ids):
			// Not the count alone: a request that failed after it decoded is
			// billed for what it used, so the count can reach want while a
			// completed request's usage is still on its way.
			stable++
		}
		if stable >= 3 {
			break
		}
		if time.Now().After(deadline) {
			cl.t.Fatalf("billing counted %d requests of tenant %s, want at least %d and every completed one (%v)%s",
				total, cl.tenant, want, err, cl.unbilled(rs, ids))
		}
		time.Sleep(300 * time.Millisecond)
	}
	twice := int(total) - len(ids)
	for _, n := range ids {
		twice += n - 1
	}
	for _, r := range rs {
		if r.out == completed && !billed(ids, r.id) {
			cl.t.Errorf("completed request %s was not billed", r.id)
		}
	}
	return twice
}

// unbilled describes the completed requests of rs missing from ids, with
// what the cluster's logs say about each, so that a failure in CI says
// where the usage event went.
func (cl *client) unbilled(rs []result, ids map[string]int) string {
	var b strings.Builder
	for _, r := range rs {
		if r.out != completed || billed(ids, r.id) {
			continue
		}
		fmt.Fprintf(&b, "\ncompleted, not billed: %s", r.id)
		for _, p := range cl.c.State.Procs {
			data, err := os.ReadFile(p.Log)
			if err != nil {
				continue
			}
			for line := range strings.Lines(string(data)) {
				if strings.Contains(line, r.id) {
					fmt.Fprintf(&b, "\n  %s: %s", p.Name, strings.TrimSpace(line))
				}
			}
		}
	}
	return b.String()
}

// allBilled reports whether every completed request of rs is in the ledger.
func allBilled(rs []result, ids map[string]int) bool {
	for _, r := range rs {
		if r.out == completed && !billed(ids, r.id) {
			return false
		}
	}
	return true
}

// billed reports whether request id, or a job of the async batch id (its
// jobs are id-0, id-1, ...), is in the ledger.
func billed(ids map[string]int, id string) bool {
	if ids[id] > 0 {
		return true
	}
	for k := range ids {
		if strings.HasPrefix(k, id+"-") {
			return true
		}
	}
	return false
}

// ledger reads the tenant's usage totals and every billed request id
// through an edge's usage API.
func (cl *client) ledger() (int64, map[string]int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	base := cl.edge(1) + "/client/v4/accounts/" + cl.tenant + "/ai/usage"
	var totals struct {
		Result struct {
			Totals struct {
				Requests int64 `json:"requests"`
			} `json:"totals"`
		} `json:"result"`
	}
	if err := cl.getJSON(ctx, base+"?granularity=hour", &totals); err != nil {
		return 0, nil, err
	}
	ids := map[string]int{}
	cursor := ""
	for {
		var page struct {
			Result struct {
				Requests []struct {
					ID string `json:"id"`
				} `json:"requests"`
				Cursor string `json:"cursor"`
			} `json:"result"`
		}
		if err := cl.getJSON(ctx, base+"/requests?limit=200&cursor="+cursor, &page); err != nil {
			return 0, nil, err
		}
		for _, r := range page.Result.Requests {
			ids[r.ID]++
		}
		if cursor = page.Result.Cursor; cursor == "" {
			return totals.Result.Totals.Requests, ids, nil
		}
	}
}

func (cl *client) getJSON(ctx context.Context, url string, v any) error {
	resp, err := cl.do(ctx, "GET", url, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return json.Unmarshal(b, v)
}

// metric reads the sum of a worker's series name whose labels hold every
// part of match (e.g. `state="used"`).
func metric(ctx context.Context, p *Proc, name, match string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+p.Addr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var sum float64
	found := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !(strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ")) || !strings.Contains(line, match) {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err == nil {
			sum += v
			found = true
		}
	}
	if !found {
		return 0, fmt.Errorf("%s has no %s{%s}", p.Name, name, match)
	}
	return sum, nil
}
