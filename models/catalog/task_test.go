package catalog

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
	"github.com/bulkhead-ai/bulkhead/models/synth"
)

// TestTaskFromFile: a model's task follows from its file when the entry
// names none (an encoder embeds, an encoder with rank pooling reranks,
// anything else generates), with the task's default prices; a task the
// file cannot serve is refused by name.
func TestTaskFromFile(t *testing.T) {
	dir := t.TempDir()
	file := func(shape string) string {
		p := filepath.Join(dir, shape+".gguf")
		if err := synth.GenerateFile(synth.Config{Shape: shape, Type: gguf.TypeQ8_0}, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bert, rank, llama := file("bert-tiny"), file("bert-rank-tiny"), file("llama-tiny")
	c, err := FromFlags([]string{"emb=" + bert, "rr=" + rank, "gen=" + llama})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]struct {
		task   string
		prices Prices
	}{
		"emb": {TaskTextEmbeddings, DefaultPricesFor(TaskTextEmbeddings)},
		"rr":  {TaskTextClassification, DefaultPricesFor(TaskTextClassification)},
		"gen": {TaskTextGeneration, DefaultPrices()},
	} {
		m, ok := c.Lookup(name)
		if !ok || m.Task != want.task || m.Prices != want.prices {
			t.Errorf("%s: task %q prices %+v, want %q %+v", name, m.Task, m.Prices, want.task, want.prices)
		}
	}
	if m, _ := c.Lookup("emb"); m.ContextWindow != 512 || !Encoder(m.Task) {
		t.Errorf("emb: window %d, encoder %v", m.ContextWindow, Encoder(m.Task))
	}
	for _, tc := range []struct{ task, path string }{
		{TaskTextGeneration, bert}, {TaskTextEmbeddings, llama}, {TaskTextEmbeddings, rank}, {TaskTextClassification, bert},
	} {
		c, err := Parse([]byte("models:\n  - name: m\n    path: "+tc.path+"\n    task: "+tc.task+"\n"), dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Resolve(); !errors.Is(err, ErrInvalid) {
			t.Errorf("task %s for %s: %v, want ErrInvalid", tc.task, filepath.Base(tc.path), err)
		}
	}
	c, err = Parse([]byte("models:\n  - name: m\n    path: "+bert+"\n    task: text-embeddings\n    prices: {neurons_per_m_prompt_tokens: 7}\n"), dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Resolve(); err != nil {
		t.Fatal(err)
	}
	if m, _ := c.Lookup("m"); m.Prices.NeuronsPerMPromptTokens != 7 {
		t.Errorf("a named price was replaced: %+v", m.Prices)
	}
}
