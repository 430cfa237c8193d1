package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/bulkhead-ai/bulkhead/models/tokenizer"
	"github.com/bulkhead-ai/bulkhead/workers/engine"

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
	r, err := openEmbedder(*model, *pooling, *threads)
	if err != nil {
		return err
	}
	defer r.close()
	rank := r.pooling == "rank"
	if rank != (*query != "") {
		return fmt.Errorf("%w: --query goes with a rank-pooling (reranker) model, and such a model needs it", errUsage)
	}
	inputs := make([][]int32, len(texts))
	for i, t := range texts {
		if rank {
			inputs[i] = r.tok.EncodePair(*query, t)
		} else {
			inputs[i] = r.tok.Encode(t, true, false)
		}
	}
	vecs, err := r.encode(inputs)
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

// embedRunner is an embedding model opened for the command line: an
// encoder (bert) or a causal model with a pooling type (Qwen3-Embedding).
type embedRunner struct {
	tok     *tokenizer.Tokenizer
	pooling string
	encode  func([][]int32) ([][]float32, error)
	close   func()
	passer  encoder.Passer
	info    encoder.Info
	threads int
}

// openEmbedder opens the model at path on threads kernel threads; pooling,
// when not empty, overrides the file's (mean, cls or last).
func openEmbedder(path, pooling string, threads int) (*embedRunner, error) {
	var p encoder.Pooling
	if pooling != "" {
		var err error
		if p, err = encoder.ParsePooling(pooling); err != nil || p == encoder.PoolRank {
			return nil, fmt.Errorf("%w: --pooling %q: want mean, cls or last", errUsage, pooling)
		}
	}
	pool := kernels.NewPool(threads)
	if m, err := encoder.Load(path); err == nil {
		if p != 0 {
			m.Hyper.Pooling = p
		}
		e := encoder.New(m, pool)
		return &embedRunner{tok: m.Tokenizer, pooling: m.Hyper.Pooling.String(), encode: e.Encode,
			close: func() { pool.Close(); m.Close() }, passer: e, info: e.Info(), threads: pool.Threads()}, nil
	} else if !errors.Is(err, encoder.ErrUnsupportedArch) {
		pool.Close()
		return nil, err
	}
	m, err := engine.Load(path)
	if err != nil {
		pool.Close()
		return nil, err
	}
	e, err := engine.NewEmbedder(m, pool, int(p), m.Hyper.Context)
	if err != nil {
		pool.Close()
		m.Close()
		return nil, fmt.Errorf("%s: %w (give --pooling mean or last)", path, err)
	}
	name := encoder.Pooling(m.Hyper.Pooling).String()
	if p != 0 {
		name = p.String()
	}
	info := encoder.Info{Tokenizer: m.Tokenizer, Window: e.Window(), Vocab: m.Hyper.Vocab, Dims: m.Hyper.Embd, Pooling: encoder.Pooling(m.Hyper.Pooling)}
	return &embedRunner{tok: m.Tokenizer, pooling: name, encode: e.Encode, close: func() { pool.Close(); m.Close() },
		passer: e, info: info, threads: pool.Threads()}, nil
}
