package store

import (
	"fmt"
	"path/filepath"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

// Info is what a GGUF header says about a model.
type Info struct {
	Arch       string `json:"architecture"`   // general.architecture
	Context    int    `json:"context_length"` // <arch>.context_length; 0 when absent
	TensorType string `json:"tensor_type"`    // the type holding the most tensor bytes
	FileType   string `json:"file_type,omitempty"`
	Tensors    int    `json:"tensors"`
	Params     uint64 `json:"parameters"` // elements over all tensors
}

// Listed is one row of List: the registry's entry, and the header's Info or
// the error that kept it from being read.
type Listed struct {
	Entry
	Path string `json:"path"`
	Info
	Err error `json:"-"`
}

// List returns every registered model, sorted by name, with its header read.
// A model whose file is missing or unreadable is listed with Err set rather
// than failing the list.
func (s *Store) List() ([]Listed, error) {
	entries, err := s.Entries()
	if err != nil {
		return nil, err
	}
	out := make([]Listed, len(entries))
	for i, e := range entries {
		out[i] = Listed{Entry: e, Path: filepath.Join(s.cfg.Dir, e.File)}
		f, err := gguf.Open(out[i].Path)
		if err != nil {
			out[i].Err = fmt.Errorf("%w: %w", ErrInvalid, err)
			continue
		}
		out[i].Info = describe(f)
		f.Close()
	}
	return out, nil
}

// describe reads Info from an open file.
func describe(f *gguf.File) Info {
	var in Info
	in.Arch, _ = f.String("general.architecture")
	if in.Arch != "" {
		if n, ok := f.Uint(in.Arch + ".context_length"); ok && n <= 1<<31 {
			in.Context = int(n)
		}
	}
	if ft, ok := f.Uint("general.file_type"); ok {
		in.FileType = fileTypeName(ft)
	}
	bytes := map[gguf.Type]uint64{}
	for _, t := range f.Tensors {
		bytes[t.Type] += t.Size
		in.Params += t.Elements()
	}
	in.Tensors = len(f.Tensors)
	var best gguf.Type
	var most uint64
	for t, n := range bytes {
		if n > most || n == most && t < best {
			best, most = t, n
		}
	}
	if most > 0 {
		in.TensorType = best.String()
	}
	return in
}

// fileTypeName names llama.cpp's general.file_type values (enum llama_ftype).
func fileTypeName(v uint64) string {
	names := map[uint64]string{
		0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1",
		10: "Q2_K", 11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M",
		16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S",
		22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M",
		28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0", 37: "TQ2_0",
	}
	if n, ok := names[v]; ok {
		return n
	}
	return fmt.Sprintf("file_type %d", v)
}
