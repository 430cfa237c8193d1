package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/bulkhead-ai/bulkhead/edge/auth"
	"github.com/bulkhead-ai/bulkhead/models/builtin"
	"github.com/bulkhead-ai/bulkhead/models/testkit"
	"github.com/bulkhead-ai/bulkhead/queue"
)

// devServer is `bulkhead dev` in this process with the built-in model.
type devServer struct {
	addr, dir string
	key       *auth.DevKey
	node      *node
}

func startDev(t *testing.T, args ...string) *devServer {
	t.Helper()
	dir := t.TempDir()
	addr := freeAddr(t)
	dev := startNode(t, append([]string{"dev", "--data-dir", dir, "--listen", addr}, args...)...)
	testkit.Poll(t, 2*time.Minute, testkit.Cond("dev to serve", func() bool { return strings.Contains(dev.stdout.String(), "serving") }))
	key, err := auth.LoadOrCreateDevKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	return &devServer{addr: addr, dir: dir, key: key, node: dev}
}

func (d *devServer) token(t *testing.T, tenant string) string {
	t.Helper()
	tok, err := d.key.Mint(tenant, []string{auth.ScopeRun}, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// floodTarget is dev as TestFloodFairness's target: its edge, and its NATS
// (the URL its banner gives) as the operator.
func (d *devServer) floodTarget(t *testing.T) floodTarget {
	t.Helper()
	m := regexp.MustCompile(`NATS at (nats://[^)]+)\)`).FindStringSubmatch(d.node.stdout.String())
	if m == nil {
		t.Fatalf("no NATS URL in dev's banner %q", d.node.stdout.String())
	}
	natsAuth, err := queue.LoadOrCreateAuth(filepath.Join(d.dir, "nats-creds"))
	if err != nil {
		t.Fatal(err)
	}
	js := jetStreamAt(t, m[1], natsAuth.Credentials(queue.RoleOperator).Options()...)
	return floodTarget{url: "http://" + d.addr, token: func(tenant string) string { return d.token(t, tenant) }, js: js}
}

func (d *devServer) client(t *testing.T, tenant string) openai.Client {
	t.Helper()
	return openai.NewClient(option.WithBaseURL("http://"+d.addr+"/v1/"), option.WithAPIKey(d.token(t, tenant)), option.WithMaxRetries(0))
}

// sumBy reads the series of metric from dev's /metrics, summed per value
// of label.
func (d *devServer) sumBy(t *testing.T, metric, label string) map[string]float64 {
	t.Helper()
	res, err := http.Get("http://" + d.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	out := map[string]float64{}
	re := regexp.MustCompile(label + `="([^"]+)"`)
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, metric+"{") {
			continue
		}
		m := re.FindStringSubmatch(line)
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if m == nil || err != nil {
			t.Fatalf("metrics line %q", line)
		}
		out[m[1]] += v
	}
	return out
}

// conversations runs n conversations of turns turns each, one turn of
// every conversation after the other, through OpenAI's Go SDK with no
// field of ours, and returns the cached share of the prompt tokens of
// turns 2 and later, and each conversation's messages. session, when set,
// names each conversation in x-session-affinity.
func conversations(t *testing.T, c openai.Client, n, turns int, session func(i int) string) (float64, [][]openai.ChatCompletionMessageParamUnion) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	history := make([][]openai.ChatCompletionMessageParamUnion, n)
	var prompt, cached int64
	for turn := range turns {
		for i := range n {
			history[i] = append(history[i], openai.UserMessage(fmt.Sprintf("Conversation %d, turn %d: tell me what the little %s did next in the garden.", i, turn, animals[i%len(animals)])))
			var opts []option.RequestOption
			if session != nil {
				opts = append(opts, option.WithHeader("x-session-affinity", session(i)))
			}
			res, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
				Model: builtin.Name, Messages: history[i], MaxTokens: openai.Int(12), Temperature: openai.Float(0),
			}, opts...)
			if err != nil {
				t.Fatalf("conversation %d turn %d: %v", i, turn, err)
			}
			history[i] = append(history[i], openai.AssistantMessage(res.Choices[0].Message.Content))
			if turn > 0 {
				prompt += res.Usage.PromptTokens
				cached += res.Usage.PromptTokensDetails.CachedTokens
			}
		}
	}
	return float64(cached) / float64(prompt), history
}

var animals = []string{"cat", "dog", "bird", "fox", "frog", "bear", "duck", "mouse"}

// TestRoutingConversations is issue 21's routing "done when" on `dev`:
// 8 conversations of 6 turns through OpenAI's Go SDK, no extra field.
// With 4 workers the cached share of turns 2+ is at least 0.9x what one
// worker gets with x-session-affinity and 0.5x without it, the jobs spread
// over at least 3 workers, and tenant B sending tenant A's conversation,
// with A's session id too, gets no cached token.
func TestRoutingConversations(t *testing.T) {
	const n, turns = 8, 6
	session := func(i int) string { return fmt.Sprintf("chat-%d", i) }
	one := startDev(t)
	base, _ := conversations(t, one.client(t, "acme"), n, turns, session)
	four := startDev(t, "--workers", "4")
	testkit.Poll(t, time.Minute, testkit.Cond("the edge's router to know the 4 workers", func() bool {
		return four.sumBy(t, "bulkhead_edge_routing_workers", "model")[builtin.Name] == 4
	}))
	withAffinity, history := conversations(t, four.client(t, "acme"), n, turns, session)
	spread := four.sumBy(t, "bulkhead_worker_jobs_total", "worker")
	decisions := four.sumBy(t, "bulkhead_edge_routing_decisions_total", "kind")
	without, _ := conversations(t, four.client(t, "globex"), n, turns, nil)
	t.Logf("cached share of turns 2-%d: one worker %.3f; four workers with x-session-affinity %.3f (%.2fx), without %.3f (%.2fx); with affinity, jobs by worker %v, decisions %v; all decisions %v",
		turns, base, withAffinity, withAffinity/base, without, without/base, spread, decisions, four.sumBy(t, "bulkhead_edge_routing_decisions_total", "kind"))
	if base < 0.5 {
		t.Fatalf("one worker cached only %.3f of turns 2+: the prefix cache is not on by default", base)
	}
	if withAffinity < 0.9*base {
		t.Errorf("four workers with affinity cached %.3f, under 0.9x one worker's %.3f", withAffinity, base)
	}
	if without < 0.5*base {
		t.Errorf("four workers without affinity cached %.3f, under 0.5x one worker's %.3f", without, base)
	}
	if busy := len(spread); busy < 3 {
		t.Errorf("jobs ran on %d workers (%v), want at least 3", busy, spread)
	}
	// Another tenant sends acme's whole conversation 0, with its session id.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	intruder := four.client(t, "intruder")
	res, err := intruder.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: builtin.Name, Messages: history[0][:len(history[0])-1], MaxTokens: openai.Int(4),
	}, option.WithHeader("x-session-affinity", session(0)))
	if err != nil {
		t.Fatal(err)
	}
	if c := res.Usage.PromptTokensDetails.CachedTokens; c != 0 || res.Usage.PromptTokens < 64 {
		t.Errorf("another tenant sending acme's conversation (%d prompt tokens) with its session id got %d cached, want 0", res.Usage.PromptTokens, c)
	}
}
