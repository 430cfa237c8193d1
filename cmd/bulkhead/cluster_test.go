package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/edge/auth"
	"github.com/bulkhead-ai/bulkhead/edge/quota/redistest"
)

// buildBinary compiles bulkhead once per test run into dir.
func buildBinary(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "bulkhead")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go build: %v", err)
	}
	return bin
}

// process is a bulkhead subprocess whose output is kept for failure reports.
type process struct {
	name string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// start runs bin with args as a separate OS process, stopped (SIGTERM, then
// kill) when the test ends.
func start(t *testing.T, name, bin string, args ...string) *process {
	t.Helper()
	p := &process{name: name, cmd: exec.Command(bin, args...), out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("--- %s output:\n%s", name, p.out.String())
		}
	})
	return p
}

// waitFor polls cond until it holds, failing after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", port)
}

// cluster is edge, NATS and two workers as separate processes, with a real
// redis-server for quotas.
type cluster struct {
	edgeURL string
	key     *auth.DevKey
	workers []*process
}

const clusterModel = "@cf/tinyllamas/stories260k"

func startCluster(t *testing.T, edgeArgs ...string) *cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("multi-process cluster test skipped in -short mode")
	}
	dir := t.TempDir()
	bin := buildBinary(t, dir)
	model := sharedPath(t, "models/stories260K.gguf")
	rs, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rs.Stop)
	key, err := auth.LoadOrCreateDevKey(filepath.Join(dir, "keys"))
	if err != nil {
		t.Fatal(err)
	}
	natsAddr := freeAddr(t)
	ns := start(t, "nats", bin, "nats", "--listen", natsAddr, "--store-dir", filepath.Join(dir, "js"))
	waitFor(t, 30*time.Second, "NATS to listen", func() bool { return strings.Contains(ns.out.String(), "listening") })
	natsURL := "nats://" + natsAddr
	c := &cluster{key: key}
	for i := range 2 {
		c.workers = append(c.workers, start(t, fmt.Sprintf("worker-%d", i), bin, "worker", "--nats", natsURL,
			"--model", clusterModel+"="+model, "--threads", "1", "--kv-poison"))
	}
	edgeAddr := freeAddr(t)
	args := append([]string{"edge", "--nats", natsURL, "--listen", edgeAddr, "--model", clusterModel + "=" + model,
		"--redis", "redis://" + rs.Addr() + "/0", "--jwks", key.JWKSPath()}, edgeArgs...)
	start(t, "edge", bin, args...)
	c.edgeURL = "http://" + edgeAddr
	tok := c.token(t, "acme")
	waitFor(t, 60*time.Second, "the edge to answer", func() bool {
		req, _ := http.NewRequest("GET", c.edgeURL+"/ai/models/search", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return c
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
func (c *cluster) post(t *testing.T, token, path, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest("POST", c.edgeURL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// TestClusterOfProcesses runs edge, NATS and two workers as separate OS
// processes on loopback with a real redis-server and gets completions through
// them, native and OpenAI, streaming and not.
func TestClusterOfProcesses(t *testing.T) {
	c := startCluster(t)
	tok := c.token(t, "acme")
	const want = ", there was a little girl named Lily. She loved to play outside in the park."

	t.Run("native", func(t *testing.T) {
		var wg sync.WaitGroup
		for i := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				status, body := c.post(t, tok, "/ai/run/"+clusterModel, `{"prompt":"Once upon a time","raw":true,"max_tokens":20,"temperature":0}`)
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
		status, body := c.post(t, tok, "/ai/run/"+clusterModel, `{"prompt":"Once upon a time","raw":true,"max_tokens":20,"temperature":0,"stream":true}`)
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
		status, body := c.post(t, tok, "/v1/completions", `{"model":"`+clusterModel+`","prompt":"Once upon a time","max_tokens":20,"temperature":0}`)
		if status != 200 || !strings.Contains(string(body), `"text_completion"`) || !strings.Contains(string(body), "little girl") {
			t.Fatalf("status %d: %s", status, body)
		}
		status, body = c.post(t, tok, "/v1/chat/completions", `{"model":"`+clusterModel+`","messages":[{"role":"user","content":"Hi"}],"max_tokens":8,"stream":true,"stream_options":{"include_usage":true}}`)
		if status != 200 || !strings.Contains(string(body), "chat.completion.chunk") || !strings.HasSuffix(strings.TrimSpace(string(body)), "data: [DONE]") {
			t.Fatalf("status %d: %s", status, body)
		}
	})
}
