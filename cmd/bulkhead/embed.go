package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/bulkhead-ai/bulkhead/workers/encoder"
	"github.com/bulkhead-ai/bulkhead/workers/kernels"
)

// textFlags collects a repeated --text flag.
type textFlags []string

func (t *textFlags) String() string     { return strings.Join(*t, "\n") }
func (t *textFlags) Set(s string) error { *t = append(*t, s); return nil }

// runEmbed prints the vectors of an encoder model for each --text, all
// encoded in one pass: pooled as the file says (or --pooling), normalised to
// unit length unless --normalize=false (rank pooling's scores never are).
func runEmbed(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("embed", stderr)
	model := fs.String("model", "", "GGUF encoder model file (bert)")
	var texts textFlags
	fs.Var(&texts, "text", "input text; repeat for several inputs, encoded in one pass")
	query := fs.String("query", "", "rank pooling: score each --text as a document against this query")
	pooling := fs.String("pooling", "", "override the file's pooling: mean, cls or last")
	normalize := fs.Bool("normalize", true, "scale each embedding to unit length (as llama-embedding's default)")
	threads := fs.Int("threads", 0, "kernel threads (0: all cores)")
	asJSON := fs.Bool("json", false, `print one object per input: {"tokens":[...],"embedding":[...]} (a reranker's: its scores)`)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := require(fs, "model", "text"); err != nil {
		return err
	}
	m, err := encoder.Load(*model)
	if err != nil {
		return err
	}
	defer m.Close()
	if *pooling != "" {
		p, err := encoder.ParsePooling(*pooling)
		if err != nil || p == encoder.PoolRank {
			return fmt.Errorf("%w: --pooling %q: want mean, cls or last", errUsage, *pooling)
		}
		m.Hyper.Pooling = p
	}
	pool := kernels.NewPool(*threads)
	defer pool.Close()
	rank := m.Hyper.Pooling == encoder.PoolRank
	if rank != (*query != "") {
		return fmt.Errorf("%w: --query goes with a rank-pooling (reranker) model, and such a model needs it", errUsage)
	}
	inputs := make([][]int32, len(texts))
	for i, t := range texts {
		if rank {
			inputs[i] = m.PairTokens(*query, t)
		} else {
			inputs[i] = m.Tokenize(t)
		}
	}
	vecs, err := encoder.New(m, pool).Encode(inputs)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	for i, v := range vecs {
		if *normalize && !rank {
			encoder.Normalize(v)
		}
		if *asJSON {
			err = enc.Encode(struct {
				Tokens    []int32   `json:"tokens"`
				Embedding []float32 `json:"embedding"`
			}{inputs[i], v})
		} else {
			err = printVector(stdout, v)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// printVector writes v's elements on one line, space-separated.
func printVector(w io.Writer, v []float32) error {
	var b strings.Builder
	for i, x := range v {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%.6f", x)
	}
	b.WriteByte('\n')
	_, err := io.WriteString(w, b.String())
	return err
}
