package handoff

import (
	"math/rand/v2"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/testkit"
)

// TestMain fails the run if goroutines outlive the tests: senders, fetches,
// subscriptions, connections and servers must all be gone.
func TestMain(m *testing.M) { testkit.Main(m) }

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
