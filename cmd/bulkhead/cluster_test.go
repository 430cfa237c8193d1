package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/deploy/local"
	"github.com/bulkhead-ai/bulkhead/edge/auth"
	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
	"github.com/bulkhead-ai/bulkhead/models/testkit"
	"github.com/bulkhead-ai/bulkhead/models/testkit/redistest"
	"github.com/bulkhead-ai/bulkhead/queue"
)

// buildBinary compiles bulkhead once per test run into dir.
func buildBinary(t *testing.T, dir string, tags ...string) string {
	t.Helper()
	bin := filepath.Join(dir, "bulkhead")
	args := []string{"build", "-o", bin}
	if len(tags) > 0 {
		bin += "-" + strings.Join(tags, "-")
		args = []string{"build", "-o", bin, "-tags", strings.Join(tags, ",")}
	}
	cmd := exec.Command("go", append(args, ".")...)
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go build: %v", err)
	}
	return bin
}

// process is a process the test started through deploy/local, the one
// harness for every multi-process test: its output goes to a log file that
// the test reads, and it is stopped (SIGTERM, then SIGKILL) when the test
// ends.
type process struct {
	lc   *local.Cluster
	proc *local.Proc
}

// output is what the process printed so far.
func (p *process) output() string { return p.lc.Output(p.proc.Name) }

// exited is closed once the process has exited.
func (p *process) exited() <-chan struct{} {
	done, _ := p.lc.Exited(p.proc.Name)
	return done
}

// stop sends sig and waits for the process to exit.
func (p *process) stop(sig syscall.Signal) {
	p.proc.Signal(sig)
	<-p.exited()
}

// start runs bin with args as a separate OS process, in a deploy/local
// cluster of its own (a directory for its log and nothing else running).
func start(t *testing.T, name, bin string, args ...string) *process {
	t.Helper()
	return startProc(t, emptyCluster(t, bin), local.Proc{Name: name, Args: append([]string{bin}, args...)})
}

// emptyCluster is a deploy/local cluster with nothing running, stopped when
// the test ends.
func emptyCluster(t *testing.T, bin string) *local.Cluster {
	t.Helper()
	lc, err := local.New(local.Config{Dir: t.TempDir(), Bin: bin, Bare: true, NoAuth: true, Workers: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	stopWhenDone(t, lc)
	return lc
}

// startIn runs bin with args as one more process of lc.
func startIn(t *testing.T, lc *local.Cluster, name, bin string, args ...string) *process {
	t.Helper()
	return startProc(t, lc, local.Proc{Name: name, Args: append([]string{bin}, args...)})
}

// startProc runs p as one more process of lc.
func startProc(t *testing.T, lc *local.Cluster, p local.Proc) *process {
	t.Helper()
	proc, err := lc.Start(p)
	if err != nil {
		t.Fatal(err)
	}
	return &process{lc: lc, proc: proc}
}

// stopWhenDone stops lc's processes when the test ends, and then prints
// their output if it failed.
func stopWhenDone(t *testing.T, lc *local.Cluster) {
	t.Cleanup(func() {
		if err := lc.Down(); err != nil {
			t.Logf("stopping the processes: %v", err)
		}
		if t.Failed() {
			for _, p := range lc.State.Procs {
				t.Logf("--- %s output:\n%s", p.Name, lc.Output(p.Name))
			}
		}
	})
}

func freeAddr(t *testing.T) string {
	t.Helper()
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", port)
}

// cluster is deploy/local's Bare cluster: one NATS server, a redis-server
// and worker processes (two unified ones by default), with edges and other
// nodes started on demand.
type cluster struct {
	lc                     *local.Cluster
	bin, natsURL, redisURL string
	model                  string
	// workerBin and workerArgs start the workers: bin, or a fault build
	// holding every stream at a token (startHeldCluster).
	workerBin  string
	workerArgs []string
	key        *auth.DevKey
	workers    []*process
	nats       *process
	redis      *process
	creds      string // NATS's --auth-dir: one seed file per role
}

// natsCreds is the --nats-creds flag of a node of role (none when NATS
// takes connections without credentials).
func (c *cluster) natsCreds(role string) []string { return c.lc.Creds(role) }

const clusterModel = "@cf/tinyllamas/stories260k"

func startCluster(t *testing.T) *cluster {
	t.Helper()
	return startClusterRoles(t, "unified", "unified")
}

// startClusterRoles is startCluster with one worker process per role given
// (unified, prefill or decode).
func startClusterRoles(t *testing.T, roles ...string) *cluster {
	t.Helper()
	return startClusterWith(t, false, roles...)
}

// startSecureCluster is startClusterRoles with NATS requiring role
// credentials (--auth-dir) and each node given its role's (--nats-creds).
func startSecureCluster(t *testing.T, roles ...string) *cluster {
	t.Helper()
	return startClusterWith(t, true, roles...)
}

func startClusterWith(t *testing.T, secure bool, roles ...string) *cluster {
	t.Helper()
	return startClusterOpts(t, secure, 0, roles...)
}

// holdTokens is where startHeldCluster's workers hold every stream: past
// what any test that expects a completion asks for.
const holdTokens = 200

// startHeldCluster is startClusterWith with workers built with -tags
// faults, holding every stream after token holdTokens until its job ends:
// a test that faults a long generation (cancels, kills, times it out) waits
// for tokens it can count, not for a generation slower than the engine.
func startHeldCluster(t *testing.T, secure bool, roles ...string) *cluster {
	t.Helper()
	return startClusterOpts(t, secure, holdTokens, roles...)
}

func startClusterOpts(t *testing.T, secure bool, holdAt int, roles ...string) *cluster {
	t.Helper()
	return startClusterNATS(t, secure, holdAt, nil, roles...)
}

// startClusterNATS is startClusterOpts with extra flags for `bulkhead nats`.
func startClusterNATS(t *testing.T, secure bool, holdAt int, natsExtra []string, roles ...string) *cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("multi-process cluster test skipped in -short mode")
	}
	dir := t.TempDir()
	c := &cluster{bin: buildBinary(t, dir), model: refdatatest.Path(t, "models/stories260K.gguf")}
	c.workerBin = c.bin
	if holdAt > 0 {
		c.workerBin = buildBinary(t, dir, "faults")
		c.workerArgs = []string{"--fault-hold-at", strconv.Itoa(holdAt)}
	}
	lc, err := local.Up(context.Background(), local.Config{Dir: filepath.Join(dir, "cluster"), Bin: c.bin,
		Model: clusterModel + "=" + c.model, Workers: roles, WorkerBin: c.workerBin,
		WorkerArgs: append([]string{"--kv-poison"}, c.workerArgs...), NATSArgs: natsExtra, Bare: true, NoAuth: !secure})
	if err != nil {
		t.Fatal(err)
	}
	stopWhenDone(t, lc)
	c.lc, c.natsURL, c.redisURL, c.creds = lc, lc.State.NATS, lc.State.Redis, lc.State.Creds
	if c.key, err = auth.LoadOrCreateDevKey(lc.State.KeyDir); err != nil {
		t.Fatal(err)
	}
	for _, p := range lc.State.Procs {
		switch proc := (&process{lc: lc, proc: p}); p.Role {
		case local.RoleNATS:
			c.nats = proc
		case local.RoleRedis:
			c.redis = proc
		default:
			c.workers = append(c.workers, proc)
		}
	}
	return c
}

// start runs bin with args as one more process of the cluster.
func (c *cluster) start(t *testing.T, name, bin string, args ...string) *process {
	t.Helper()
	return startIn(t, c.lc, name, bin, args...)
}

// edge starts an edge process with extra flags and returns its base URL once
// it answers.
func (c *cluster) edge(t *testing.T, args ...string) string {
	url, _ := c.edgeProcess(t, args...)
	return url
}

func (c *cluster) edgeProcess(t *testing.T, args ...string) (string, *process) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := c.lc.Edge(ctx, args...)
	if err != nil {
		t.Fatal(err)
	}
	return "http://" + p.Addr, &process{lc: c.lc, proc: p}
}

func (c *cluster) token(t *testing.T, tenant string) string {
	t.Helper()
	tok, err := c.key.Mint(tenant, []string{"ai:run", "ai:read"}, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// post sends a JSON body and returns the status and the body.
func post(t *testing.T, token, url, body string) (int, []byte) {
	t.Helper()
	resp := send(t, token, url, body)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// openStream posts a streaming request's JSON body and returns the response
// once its status is 200; its body is closed when the test ends.
func openStream(t *testing.T, token, url, body string) *http.Response {
	t.Helper()
	resp := send(t, token, url, body)
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("stream: status %d: %s", resp.StatusCode, b)
	}
	return resp
}

// send posts a JSON body with token and returns the response.
func send(t *testing.T, token, url, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestClusterOfProcesses runs edge, NATS and two workers as separate OS
// processes on loopback with a real redis-server and gets completions through
// them, native and OpenAI, streaming and not.
func TestClusterOfProcesses(t *testing.T) {
	c := startCluster(t)
	edgeURL, edgeProc := c.edgeProcess(t)
	tok := c.token(t, "acme")
	const want = ", there was a little girl named Lily. She loved to play outside in the park."

	t.Run("native", func(t *testing.T) {
		var wg sync.WaitGroup
		for i := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				status, body := post(t, tok, edgeURL+"/ai/run/"+clusterModel, `{"prompt":"Once upon a time","raw":true,"max_tokens":20,"temperature":0}`)
				var got struct {
					Result struct {
						Response string `json:"response"`
						Usage    struct {
							PromptTokens, CompletionTokens int
						} `json:"usage"`
					} `json:"result"`
					Success bool `json:"success"`
				}
				if err := json.Unmarshal(body, &got); err != nil || status != 200 || !got.Success {
					t.Errorf("request %d: status %d, %s", i, status, body)
					return
				}
				if !strings.HasPrefix(want, got.Result.Response) || got.Result.Response == "" {
					t.Errorf("request %d: response %q, want the greedy story %q", i, got.Result.Response, want)
				}
			}()
		}
		wg.Wait()
	})
	t.Run("native stream", func(t *testing.T) {
		status, body := post(t, tok, edgeURL+"/ai/run/"+clusterModel, `{"prompt":"Once upon a time","raw":true,"max_tokens":20,"temperature":0,"stream":true}`)
		if status != 200 {
			t.Fatalf("status %d: %s", status, body)
		}
		var text strings.Builder
		done := false
		sc := bufio.NewScanner(bytes.NewReader(body))
		for sc.Scan() {
			line, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			if line == "[DONE]" {
				done = true
				break
			}
			var ev struct {
				Response string `json:"response"`
			}
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				t.Fatalf("bad event %q: %v", line, err)
			}
			text.WriteString(ev.Response)
		}
		if !done || !strings.HasPrefix(want, text.String()) || text.Len() == 0 {
			t.Fatalf("stream text %q (done %v), want a prefix of %q", text.String(), done, want)
		}
	})
	t.Run("openai", func(t *testing.T) {
		status, body := post(t, tok, edgeURL+"/v1/completions", `{"model":"`+clusterModel+`","prompt":"Once upon a time","max_tokens":20,"temperature":0}`)
		if status != 200 || !strings.Contains(string(body), `"text_completion"`) || !strings.Contains(string(body), "little girl") {
			t.Fatalf("status %d: %s", status, body)
		}
		status, body = post(t, tok, edgeURL+"/v1/chat/completions", `{"model":"`+clusterModel+`","messages":[{"role":"user","content":"Hi"}],"max_tokens":8,"stream":true,"stream_options":{"include_usage":true}}`)
		if status != 200 || !strings.Contains(string(body), "chat.completion.chunk") || !strings.HasSuffix(strings.TrimSpace(string(body)), "data: [DONE]") {
			t.Fatalf("status %d: %s", status, body)
		}
	})
	t.Run("async survives an edge restart", func(t *testing.T) {
		status, body := post(t, tok, edgeURL+"/ai/run/"+clusterModel+"?queueRequest=true",
			`{"requests":[{"prompt":"Once upon a time","raw":true,"max_tokens":20},{"prompt":"Lily wanted to","raw":true,"max_tokens":8}]}`)
		var queued struct {
			Result struct {
				Status    string `json:"status"`
				RequestID string `json:"request_id"`
			} `json:"result"`
		}
		if err := json.Unmarshal(body, &queued); err != nil || status != 200 || queued.Result.Status != "queued" {
			t.Fatalf("queueRequest: %d %s", status, body)
		}
		// The edge that took the request goes away; another one answers the poll.
		edgeProc.stop(syscall.SIGTERM)
		other := c.edge(t)
		var last []byte
		testkit.Poll(t, 30*time.Second, testkit.Cond("the async results", func() bool {
			_, last = post(t, tok, other+"/ai/run/"+clusterModel, `{"request_id":"`+queued.Result.RequestID+`"}`)
			return strings.Contains(string(last), `"status":"done"`)
		}))
		if !strings.Contains(string(last), "little girl") || strings.Count(string(last), `"success":true`) < 3 {
			t.Fatalf("async results %s", last)
		}
		// Another tenant cannot read them.
		if status, body := post(t, c.token(t, "mallory"), other+"/ai/run/"+clusterModel, `{"request_id":"`+queued.Result.RequestID+`"}`); status != 404 {
			t.Fatalf("another tenant's poll: %d %s", status, body)
		}
	})
}

// TestClusterErrors reproduces the edge's error rows against the running
// system: real edge, NATS, workers and redis-server processes.
func TestClusterErrors(t *testing.T) {
	// Held at token 200: the "timeout" row's long generation outlives its
	// 150 ms deadline however fast the engine is.
	c := startHeldCluster(t, false, "unified", "unified")
	// A second model on its own worker that takes one sequence at a time and
	// queues one more, each held after its first token (a faults build's
	// --fault-engine-hold-at) until its request ends: busy however fast the
	// engine is.
	const busyModel = "@cf/tinyllamas/busy"
	c.start(t, "worker-busy", c.workerBin, append([]string{"worker", "--nats", c.natsURL, "--model", busyModel + "=" + c.model,
		"--threads", "1", "--max-batch", "1", "--engine-queue", "1", "--fault-engine-hold-at", "1"}, c.natsCreds(queue.RoleWorker)...)...)
	open := c.edge(t, "--model", busyModel+"="+c.model)
	limited := c.edge(t, "--quota-rpm", "3", "--quota-daily-neurons", "0.5", "--request-timeout", "150ms")
	run := "/ai/run/" + clusterModel

	type row struct {
		name, token, url, body string
		status, code           int
		message                string
	}
	readOnly, err := c.key.Mint("acme", []string{"ai:read"}, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	acme := c.token(t, "acme")
	long := strings.Repeat("Once upon a time there was a dog. ", 400)
	rows := []row{
		{"no token", "", open + run, `{"prompt":"hi"}`, 401, 10000, ""},
		{"forged token", acme[:len(acme)-4] + "AAAA", open + run, `{"prompt":"hi"}`, 401, 10000, ""},
		{"missing scope", readOnly, open + run, `{"prompt":"hi"}`, 403, 9109, ""},
		{"account mismatch", acme, open + "/client/v4/accounts/other/ai/run/" + clusterModel, `{"prompt":"hi"}`, 403, 9109, ""},
		{"unknown model", acme, open + "/ai/run/@cf/nope/nothing", `{"prompt":"hi"}`, 400, 5007, "@cf/nope/nothing"},
		{"malformed JSON", acme, open + run, `{"prompt":`, 400, 5004, ""},
		{"wrong type", acme, open + run, `{"prompt":"hi","max_tokens":"many"}`, 400, 5004, "max_tokens"},
		{"prompt too long", acme, open + run, `{"prompt":"` + long + `","raw":true}`, 413, 3006, "context window is 2048 tokens"},
		{"timeout", c.token(t, "slow"), limited + run, `{"prompt":"Once upon a time","raw":true,"max_tokens":2000,"temperature":1,"seed":3}`, 408, 3007, ""},
	}
	verify := func(t *testing.T, status int, body []byte, r row) {
		t.Helper()
		var got struct {
			Success bool `json:"success"`
			Errors  []struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"errors"`
		}
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatalf("status %d, body %s: %v", status, body, err)
		}
		if status != r.status || got.Success || len(got.Errors) != 1 || got.Errors[0].Code != r.code ||
			!strings.Contains(got.Errors[0].Message, r.message) || got.Errors[0].Message == "" {
			t.Fatalf("status %d, body %s; want %d with code %d mentioning %q", status, body, r.status, r.code, r.message)
		}
	}
	check := func(t *testing.T, r row) {
		t.Helper()
		status, body := post(t, r.token, r.url, r.body)
		verify(t, status, body, r)
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) { check(t, r) })
	}

	t.Run("rate limited", func(t *testing.T) {
		tok := c.token(t, "rate")
		for i := range 3 {
			if status, body := post(t, tok, limited+run, `{"prompt":"hi","max_tokens":1}`); status != 200 {
				t.Fatalf("request %d within the limit: %d %s", i, status, body)
			}
		}
		check(t, row{token: tok, url: limited + run, body: `{"prompt":"hi","max_tokens":1}`, status: 429, code: 3037})
	})
	t.Run("daily neurons exhausted", func(t *testing.T) {
		tok := c.token(t, "budget")
		for i := range 2 { // each costs about 0.38 neurons of the 0.5 budget
			if status, body := post(t, tok, limited+run, `{"prompt":"Once upon a time","raw":true,"max_tokens":20}`); status != 200 {
				t.Fatalf("request %d within the budget: %d %s", i, status, body)
			}
		}
		check(t, row{token: tok, url: limited + run, body: `{"prompt":"hi","max_tokens":1}`, status: 429, code: 3036})
	})
	t.Run("capacity exceeded with rejectIfBusy", func(t *testing.T) {
		// Four requests that may not wait arrive at a worker whose one
		// batch slot and one queue place hold their sequences: the two
		// beyond them are refused 429 (3040) at once, one streams its first
		// token and is held, one waits in the engine's queue; then the
		// client leaves, which lets both go.
		type answer struct {
			status int
			body   []byte
		}
		ctx, leave := context.WithCancel(context.Background())
		defer leave()
		answers := make(chan answer, 4)
		for range 4 {
			go func() {
				req, _ := http.NewRequestWithContext(ctx, "POST", open+"/ai/run/"+busyModel+"?rejectIfBusy=true",
					strings.NewReader(`{"prompt":"Once upon a time","raw":true,"max_tokens":200,"stream":true}`))
				req.Header.Set("Authorization", "Bearer "+acme)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					answers <- answer{status: -1, body: []byte(err.Error())}
					return
				}
				defer resp.Body.Close()
				if resp.StatusCode == 200 { // the held stream: its first token is out
					answers <- answer{status: 200}
					_, _ = io.Copy(io.Discard, resp.Body)
					return
				}
				b, _ := io.ReadAll(resp.Body)
				answers <- answer{resp.StatusCode, b}
			}()
		}
		refused, held := 0, 0
		for refused < 2 || held < 1 {
			a := <-answers
			switch a.status {
			case 200:
				held++
			case 429:
				verify(t, a.status, a.body, row{status: 429, code: 3040})
				refused++
			default:
				t.Fatalf("status %d: %s (after %d refused, %d held)", a.status, a.body, refused, held)
			}
			if refused > 2 || held > 1 {
				t.Fatalf("%d refused and %d streaming of four rejectIfBusy requests to a worker with room for two; want 2 and 1 (and one queued)", refused, held)
			}
		}
		leave()
		if a := <-answers; a.status != -1 {
			t.Errorf("the queued request answered %d (%s) before the client left; want it still waiting", a.status, a.body)
		}
	})
	t.Run("redis down fails closed", func(t *testing.T) {
		c.redis.stop(syscall.SIGTERM)
		check(t, row{token: c.token(t, "late"), url: limited + run, body: `{"prompt":"hi","max_tokens":1}`, status: 503, code: 3043})
		// The edge without quotas does not need Redis and keeps serving.
		if status, body := post(t, acme, open+run, `{"prompt":"hi","max_tokens":2}`); status != 200 {
			t.Fatalf("edge without quotas: %d %s", status, body)
		}
	})
}

// TestCanaryAgainstCluster runs `bulkhead canary` against the multi-process
// cluster with NaN-poisoned worker pools: no foreign markers, no response that
// differs from its quiet reference, every over-long prompt refused.
func TestCanaryAgainstCluster(t *testing.T) {
	c := startCluster(t)
	edgeURL := c.edge(t)
	stdout, stderr, code := bulkhead(t, "canary", "--edge", edgeURL, "--key-dir", filepath.Dir(c.key.JWKSPath()),
		"--tenants", "4", "--requests", "40", "--concurrency", "6", "--oversize-fraction", "0.2", "--max-tokens", "16", "--json")
	if code != 0 {
		t.Fatalf("canary exit %d\n%s\n%s", code, stdout, stderr)
	}
	var rep struct {
		Tenants []struct {
			Checked  int `json:"responses_checked"`
			Oversize int `json:"oversize_sent"`
		} `json:"tenants"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	checked, oversize := 0, 0
	for _, tr := range rep.Tenants {
		checked += tr.Checked
		oversize += tr.Oversize
	}
	if len(rep.Tenants) != 4 || checked != 32 || oversize != 8 {
		t.Fatalf("report %s: want 4 tenants, 32 responses checked and 8 over-long prompts", stdout)
	}
}
