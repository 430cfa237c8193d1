package engine

import (
	"errors"
	"fmt"

	"github.com/bulkhead-ai/bulkhead/models/lora"
)

// ErrAdapterMismatch is returned for an adapter that does not fit the model
// (architecture, layer count or a projection's shape).
var ErrAdapterMismatch = errors.New("engine: adapter does not fit the model")

// Adapter is a LoRA adapter bound to one model: each targeted projection's
// output gains scale·B·(A·x). It is immutable and may serve any number of
// sequences and engines of the model at once.
type Adapter struct {
	// Key identifies the adapter and its scale: the prefix cache keys and
	// hand-over manifests carry it, so KV computed under it is never taken
	// for KV computed under another adapter or none.
	Key   string
	Rank  int
	Scale float32 // applied to B·A·x: the user's scale times Alpha/Rank
	bytes int64
}

// Bytes is the memory the adapter holds.
func (a *Adapter) Bytes() int64 { return a.bytes }

// LoadAdapter reads the adapter at path (lora.Read: a GGUF adapter, or a
// PEFT directory) and binds it to m with the user's scale (1 for the
// adapter's own; llama.cpp's --lora-scaled). digest identifies the file's
// bytes (the caller's sha256 of them; "" hashes the file here).
func LoadAdapter(m *Model, path string, scale float32, digest string) (*Adapter, error) {
	a, err := lora.Read(path)
	if err != nil {
		return nil, err
	}
	return BindAdapter(m, a, scale, digest)
}

// BindAdapter binds a parsed adapter to m (see LoadAdapter).
func BindAdapter(m *Model, a *lora.Adapter, scale float32, digest string) (*Adapter, error) {
	return nil, fmt.Errorf("%w: not implemented yet", ErrAdapterMismatch)
}
