package handoff

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/bulkhead-ai/bulkhead/queue"
)

// TestMain fails the run if goroutines outlive the tests: senders, fetches,
// subscriptions, connections and servers must all be gone.
func TestMain(m *testing.M) {
	before := liveGoroutines()
	code := m.Run()
	if code == 0 {
		if err := waitGoroutines(before, 10*time.Second); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

func waitGoroutines(want int, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		n := liveGoroutines()
		if n <= want {
			return nil
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			return fmt.Errorf("goroutine leak: %d running, %d before the tests\n%s", n, want, buf)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// liveGoroutines counts goroutines, leaving out the fuzzing engine's signal
// watcher, which lives as long as the process.
func liveGoroutines() int {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.HasPrefix(g, "goroutine ") && !strings.Contains(g, "os/signal.signal_recv") {
			count++
		}
	}
	return count
}

// startNATS runs an embedded NATS server on a random port for the test.
func startNATS(t testing.TB) string {
	t.Helper()
	srv, err := queue.StartServer(queue.ServerConfig{Port: -1, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return srv.ClientURL()
}

// connect opens a client connection closed at cleanup.
func connect(t testing.TB, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// smolLayout is smollm2-135m's KV page: 30 layers, 3 KV heads of 64, 16
// tokens per page.
var smolLayout = Layout{Layers: 30, KVHeads: 3, HeadDim: 64, PageSize: 16, DType: DTypeF16}

// tinyLayout keeps table tests readable.
var tinyLayout = Layout{Layers: 2, KVHeads: 1, HeadDim: 4, PageSize: 4, DType: DTypeF16}

// fixture is a prompt and the random pages a prefill of it would export.
type fixture struct {
	src   Source
	pages [][]byte
}

func newFixture(t testing.TB, seed uint64, l Layout, tokens int) fixture {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	prompt := make([]int32, tokens)
	for i := range prompt {
		prompt[i] = rng.Int32N(49152)
	}
	pages := make([][]byte, l.pageCount(tokens))
	for i := range pages {
		p := make([]byte, l.PageBytes(l.writtenIn(i, tokens)))
		for j := range p {
			p[j] = byte(rng.Uint32())
		}
		pages[i] = p
	}
	return fixture{
		src: Source{
			RequestID: "req-1", Tenant: "tenant-a", Model: "@cf/test/smollm2",
			WeightsDigest: "sha256:abc", Prompt: prompt, FirstToken: 42, Layout: l,
		},
		pages: pages,
	}
}

func (f fixture) manifest(t testing.TB) *Manifest {
	t.Helper()
	m, err := NewManifest(f.src, f.pages)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func (f fixture) expect() Expect {
	return Expect{
		RequestID: f.src.RequestID, Tenant: f.src.Tenant, Model: f.src.Model,
		WeightsDigest: f.src.WeightsDigest, PromptTokens: f.src.Prompt, Layout: f.src.Layout,
	}
}
