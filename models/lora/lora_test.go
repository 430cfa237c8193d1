package lora

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

// sample is a small two-layer adapter.
func sample(rank int, targets ...Target) *Adapter {
	a := &Adapter{Format: "gguf", Arch: "llama", Rank: rank, Alpha: 16}
	for l := range 2 {
		for i, t := range targets {
			p := Pair{Layer: l, Target: t, In: 8, Out: 12, A: make([]float32, rank*8), B: make([]float32, 12*rank)}
			for j := range p.A {
				p.A[j] = float32(j+i) / 7
			}
			for j := range p.B {
				p.B[j] = -float32(j*l+1) / 3
			}
			a.Pairs = append(a.Pairs, p)
		}
	}
	sortPairs(a.Pairs)
	return a
}

func ggufBytes(t testing.TB, a *Adapter) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := WriteGGUF(&b, a); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func peftFiles(t testing.TB, a *Adapter) (weights, config []byte) {
	t.Helper()
	dir := t.TempDir()
	if err := WritePEFT(dir, a, "base"); err != nil {
		t.Fatal(err)
	}
	w, err := os.ReadFile(filepath.Join(dir, PEFTWeights))
	if err != nil {
		t.Fatal(err)
	}
	c, err := os.ReadFile(filepath.Join(dir, PEFTConfig))
	if err != nil {
		t.Fatal(err)
	}
	return w, c
}

// TestRoundTrip: an adapter written as GGUF and as PEFT reads back the same.
func TestRoundTrip(t *testing.T) {
	a := sample(4, AttnQ, AttnOutput, FFNDown)
	g, err := ParseGGUF(ggufBytes(t, a))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, a) {
		t.Fatalf("GGUF round trip:\n got %+v\nwant %+v", g, a)
	}
	dir := t.TempDir()
	if err := WritePEFT(dir, a, "base"); err != nil {
		t.Fatal(err)
	}
	p, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := *a
	want.Format, want.Arch = "peft", ""
	if !reflect.DeepEqual(p, &want) {
		t.Fatalf("PEFT round trip:\n got %+v\nwant %+v", p, &want)
	}
}

// TestRefusals: every kind of bad file is refused with its sentinel and a
// message naming the problem.
func TestRefusals(t *testing.T) {
	model := gguf.NewWriter()
	model.SetString("general.architecture", "llama")
	var mb bytes.Buffer
	if _, err := model.WriteTo(&mb); err != nil {
		t.Fatal(err)
	}
	big := ggufBytes(t, sample(64, AttnQ))
	embd := sample(4, AttnQ)
	embd.Pairs[0].Target = "token_embd"
	onlyA := sample(4, AttnQ)
	w, c := peftFiles(t, sample(4, AttnQ))
	cases := []struct {
		name    string
		parse   func() (*Adapter, error)
		want    error
		message string
	}{
		{"not GGUF", func() (*Adapter, error) { return ParseGGUF([]byte("hello, world, not a file")) }, ErrNotAdapter, "not a GGUF file"},
		{"a model", func() (*Adapter, error) { return ParseGGUF(mb.Bytes()) }, ErrNotAdapter, `general.type is ""`},
		{"rank 64", func() (*Adapter, error) { return ParseGGUF(big) }, ErrBadAdapter, "rank 64 is over the limit of 32"},
		{"unknown target", func() (*Adapter, error) { return ParseGGUF(ggufBytes(t, embd)) }, ErrBadAdapter, `unknown target module "token_embd"`},
		{"A without B", func() (*Adapter, error) { return ParseGGUF(dropTensor(t, ggufBytes(t, onlyA), "lora_b")) }, ErrBadAdapter, "lora_a without lora_b"},
		{"PEFT DoRA", func() (*Adapter, error) {
			return ParsePEFT(w, patch(c, `"peft_type"`, `"use_dora": true, "peft_type"`))
		}, ErrBadAdapter, "DoRA"},
		{"PEFT r 64", func() (*Adapter, error) { return ParsePEFT(w, patch(c, `"r": 4`, `"r": 64`)) }, ErrBadAdapter, "rank must be 1 to 32"},
		{"PEFT lm_head", func() (*Adapter, error) { return ParsePEFT(w, patch(c, `"q_proj"`, `"q_proj", "lm_head"`)) }, ErrBadAdapter, `unknown target module "lm_head"`},
		{"PEFT prompt tuning", func() (*Adapter, error) { return ParsePEFT(w, patch(c, `"LORA"`, `"PROMPT_TUNING"`)) }, ErrNotAdapter, "peft_type"},
		{"PEFT truncated", func() (*Adapter, error) { return ParsePEFT(w[:len(w)-4], c) }, ErrBadAdapter, "offsets"},
		{"PEFT header too long", func() (*Adapter, error) {
			return ParsePEFT(binary.LittleEndian.AppendUint64(nil, 1<<40), c)
		}, ErrNotAdapter, "header"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.parse()
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.message) {
				t.Fatalf("got %v, want %v naming %q", err, tc.want, tc.message)
			}
		})
	}
}

func patch(b []byte, old, new string) []byte {
	return []byte(strings.Replace(string(b), old, new, 1))
}

// dropTensor rewrites a GGUF adapter without the tensors whose names end in suffix.
func dropTensor(t *testing.T, b []byte, suffix string) []byte {
	f, err := gguf.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	w := gguf.NewWriter()
	for _, k := range f.Keys {
		if err := w.Set(k, f.KV[k]); err != nil {
			t.Fatal(err)
		}
	}
	for _, info := range f.Tensors {
		if strings.HasSuffix(info.Name, suffix) {
			continue
		}
		_, data, _ := f.Tensor(info.Name)
		if err := w.AddTensor(info.Name, info.Shape, info.Type, data); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	if _, err := w.WriteTo(&out); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// TestPermutation: within each head, GGUF row 2j+i is Hugging Face row
// i·d/2+j, and ToHFOrder undoes ToGGUFOrder.
func TestPermutation(t *testing.T) {
	// 2 heads of 4 rows, 1 column: HF rows 0..7.
	hf := []float32{0, 1, 2, 3, 4, 5, 6, 7}
	g := ToGGUFOrder(hf, 1, 2)
	if want := []float32{0, 2, 1, 3, 4, 6, 5, 7}; !reflect.DeepEqual(g, want) {
		t.Fatalf("ToGGUFOrder %v, want %v", g, want)
	}
	if back := ToHFOrder(g, 1, 2); !reflect.DeepEqual(back, hf) {
		t.Fatalf("ToHFOrder %v, want %v", back, hf)
	}
}

func FuzzParseGGUF(f *testing.F) {
	f.Add(ggufBytes(f, sample(2, AttnQ, FFNUp)))
	f.Add([]byte("GGUF"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if a, err := ParseGGUF(b); err == nil && a.Rank > MaxRank {
			t.Fatalf("rank %d accepted", a.Rank)
		}
	})
}

func FuzzParsePEFT(f *testing.F) {
	w, c := peftFiles(f, sample(2, AttnV))
	f.Add(w, c)
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, '{'}, []byte(`{"peft_type":"LORA","r":2}`))
	f.Fuzz(func(t *testing.T, w, c []byte) {
		if a, err := ParsePEFT(w, c); err == nil && a.Rank > MaxRank {
			t.Fatalf("rank %d accepted", a.Rank)
		}
	})
}
