package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
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
)

// devServer is `bulkhead dev` in this process with the built-in model.
type devServer struct {
	addr string
	key  *auth.DevKey
}

func startDev(t *testing.T, args ...string) *devServer {
	t.Helper()
	dir := t.TempDir()
	addr := freeAddr(t)
	dev := startNode(t, append([]string{"dev", "--data-dir", dir, "--listen", addr, "--threads", "1"}, args...)...)
	testkit.Poll(t, 2*time.Minute, testkit.Cond("dev to serve", func() bool { return strings.Contains(dev.stdout.String(), "serving") }))
	key, err := auth.LoadOrCreateDevKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	return &devServer{addr: addr, key: key}
}

func (d *devServer) client(t *testing.T, tenant string) openai.Client {
	t.Helper()
	tok, err := d.key.Mint(tenant, []string{auth.ScopeRun}, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return openai.NewClient(option.WithBaseURL("http://"+d.addr+"/v1/"), option.WithAPIKey(tok), option.WithMaxRetries(0))
}

// jobsByWorker reads bulkhead_worker_jobs_total from dev's /metrics, summed
// per worker label.
func (d *devServer) jobsByWorker(t *testing.T) map[string]float64 {
	t.Helper()
	res, err := http.Get("http://" + d.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	out := map[string]float64{}
	label := regexp.MustCompile(`worker="([^"]+)"`)
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "bulkhead_worker_jobs_total{") {
			continue
		}
		m := label.FindStringSubmatch(line)
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
// turns 2 and later. session, when set, names each conversation in
// x-session-affinity.
func conversations(t *testing.T, c openai.Client, n, turns int, session func(i int) string) float64 {
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
	return float64(cached) / float64(prompt)
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
	base := conversations(t, one.client(t, "acme"), n, turns, session)
	four := startDev(t, "--workers", "4")
	withAffinity := conversations(t, four.client(t, "acme"), n, turns, session)
	spread := four.jobsByWorker(t)
	without := conversations(t, four.client(t, "globex"), n, turns, nil)
	t.Logf("cached share of turns 2-%d: one worker %.3f; four workers with x-session-affinity %.3f (%.2fx), without %.3f (%.2fx); jobs by worker with affinity %v",
		turns, base, withAffinity, withAffinity/base, without, without/base, spread)
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
	// Tenant B replays acme's conversation 0, with its session id.
	if other := conversations(t, four.client(t, "intruder"), 1, turns, session); other != 0 {
		t.Errorf("another tenant replaying acme's conversation with its session id got %.3f of its prompt cached, want 0", other)
	}
}
