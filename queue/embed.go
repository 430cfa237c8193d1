package queue

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
)

// MaxEmbedInputs bounds the inputs of one encoder job (Workers AI's limit
// for its bge models); with vectors of up to MaxEmbedDims floats the final
// frame stays well under NATS's default 1 MiB payload.
const (
	MaxEmbedInputs = 100
	MaxEmbedDims   = 1024
)

// Embed makes a job an encoder job (the text-embeddings and
// text-classification tasks): its inputs are encoded in one or more shared
// passes and the final frame carries one vector per input (Frame.Vectors;
// an async job's record, AsyncResult.Vectors); nothing is generated.
// Exactly one of Inputs and Tokens is set.
type Embed struct {
	Inputs []string  `json:"inputs,omitempty"` // texts, tokenized by the worker
	Tokens [][]int32 `json:"tokens,omitempty"` // or token ids, as the client sent them
	// Query, for text-classification (reranking), is what every input is
	// scored against: the worker encodes each (query, input) pair.
	Query string `json:"query,omitempty"`
	// Truncate cuts inputs over the model's window to the window (keeping
	// the closing special token); without it they are refused.
	Truncate bool `json:"truncate,omitempty"`
	// Normalize scales each embedding to unit length.
	Normalize bool `json:"normalize,omitempty"`
}

// Count is the number of inputs.
func (e *Embed) Count() int { return len(e.Inputs) + len(e.Tokens) }

func (e *Embed) validate() error {
	switch n := e.Count(); {
	case n == 0:
		return fmt.Errorf("%w: embed job without inputs", ErrBadMessage)
	case n > MaxEmbedInputs:
		return fmt.Errorf("%w: embed job of %d inputs, limit %d", ErrBadMessage, n, MaxEmbedInputs)
	case len(e.Inputs) > 0 && len(e.Tokens) > 0:
		return fmt.Errorf("%w: embed job with both texts and token ids", ErrBadMessage)
	}
	return nil
}

// Vectors is an encoder job's result on its final frame: Count vectors of
// Dims float32s, little-endian, one after another (base64 in the frame's
// JSON, a third the size of decimal text), and the pooling that made them.
type Vectors struct {
	Dims    int    `json:"dims"`
	Data    []byte `json:"data"`
	Pooling string `json:"pooling"`
}

// PackVectors packs vectors of one length into a Vectors.
func PackVectors(vs [][]float32, pooling string) *Vectors {
	v := &Vectors{Pooling: pooling}
	if len(vs) > 0 {
		v.Dims = len(vs[0])
	}
	v.Data = make([]byte, 0, 4*v.Dims*len(vs))
	for _, vec := range vs {
		for _, x := range vec {
			v.Data = binary.LittleEndian.AppendUint32(v.Data, math.Float32bits(x))
		}
	}
	return v
}

// Unpack returns the vectors.
func (v *Vectors) Unpack() ([][]float32, error) {
	if v.Dims <= 0 || v.Dims > MaxEmbedDims || len(v.Data)%(4*v.Dims) != 0 {
		return nil, fmt.Errorf("%w: %d bytes of vectors of %d dims", ErrBadMessage, len(v.Data), v.Dims)
	}
	out := make([][]float32, len(v.Data)/(4*v.Dims))
	for i := range out {
		out[i] = make([]float32, v.Dims)
		for d := range out[i] {
			out[i][d] = math.Float32frombits(binary.LittleEndian.Uint32(v.Data[4*(i*v.Dims+d):]))
		}
	}
	return out, nil
}

// FinalVectors sends an encoder job's final frame, its vectors and usage, and
// records the job as done.
func (r *Replier) FinalVectors(ctx context.Context, v *Vectors, usage Usage) error {
	if r.end {
		return ErrEnded
	}
	if r.job.Reply != "" {
		if err := r.markStreamed(ctx); err != nil {
			return err
		}
		if err := r.publish(&Frame{Kind: KindFinal, Finish: "stop", Usage: &usage, Vectors: v}); err != nil {
			return err
		}
	}
	r.end = true
	r.ended.Store(true)
	r.rec.Status = StatusDone
	r.rec.Finish = "stop"
	r.rec.Usage = &usage
	if r.job.Async {
		r.rec.Vectors = v
	}
	return r.recordEnd(ctx)
}
