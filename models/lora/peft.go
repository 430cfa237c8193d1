package lora

import (
	"cmp"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

// peftConfig is the part of adapter_config.json that decides the math.
type peftConfig struct {
	PeftType      string          `json:"peft_type"`
	R             int             `json:"r"`
	LoraAlpha     float64         `json:"lora_alpha"`
	TargetModules json.RawMessage `json:"target_modules"`
	UseRSLoRA     bool            `json:"use_rslora"`
	UseDoRA       bool            `json:"use_dora"`
	FanInFanOut   bool            `json:"fan_in_fan_out"`
	Bias          string          `json:"bias"`
	ModulesToSave []string        `json:"modules_to_save"`
	AlphaPattern  map[string]any  `json:"alpha_pattern"`
	BaseModel     string          `json:"base_model_name_or_path"`
}

// hfTargets maps Hugging Face module names to the projections they are.
var hfTargets = map[string]Target{
	"q_proj": AttnQ, "k_proj": AttnK, "v_proj": AttnV, "qkv_proj": AttnQKV, "o_proj": AttnOutput,
	"gate_proj": FFNGate, "up_proj": FFNUp, "gate_up_proj": FFNUp, "down_proj": FFNDown,
}

// peftName is a PEFT tensor name: ...layers.N.(self_attn|mlp).<module>.lora_A|B[.adapter].weight.
var peftName = regexp.MustCompile(`layers\.(\d+)\.(?:self_attn|mlp)\.([a-z_]+)\.lora_([AB])(?:\.[A-Za-z0-9_-]+)?\.weight$`)

// ParsePEFT parses PEFT's adapter_model.safetensors and adapter_config.json.
// Its scale is lora_alpha/r (lora_alpha/sqrt(r) with use_rslora), as PEFT
// applies it. DoRA, biases, fully trained modules (modules_to_save), per
// module alphas and Conv1D layouts (fan_in_fan_out) are refused by name.
func ParsePEFT(safetensors, config []byte) (*Adapter, error) {
	var c peftConfig
	if err := json.Unmarshal(config, &c); err != nil {
		return nil, fmt.Errorf("%w: adapter_config.json: %v", ErrNotAdapter, err)
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	a := &Adapter{Format: "peft", Alpha: float32(c.LoraAlpha)}
	if c.UseRSLoRA {
		a.Alpha = float32(c.LoraAlpha * math.Sqrt(float64(c.R)))
	}
	ts, err := readSafetensors(safetensors)
	if err != nil {
		return nil, err
	}
	if err := a.pair(ts); err != nil {
		return nil, err
	}
	return a, nil
}

func (c *peftConfig) check() error {
	bad := func(what string) error { return fmt.Errorf("%w: adapter_config.json: %s", ErrBadAdapter, what) }
	switch {
	case c.PeftType != "LORA":
		return fmt.Errorf("%w: adapter_config.json: peft_type is %q, not LORA", ErrNotAdapter, c.PeftType)
	case c.R < 1 || c.R > MaxRank:
		return bad(fmt.Sprintf("r is %d; the rank must be 1 to %d", c.R, MaxRank))
	case c.LoraAlpha < 0 || math.IsInf(c.LoraAlpha, 0) || math.IsNaN(c.LoraAlpha):
		return bad(fmt.Sprintf("lora_alpha %v", c.LoraAlpha))
	case c.UseDoRA:
		return bad("use_dora: DoRA adapters are not supported")
	case c.FanInFanOut:
		return bad("fan_in_fan_out: Conv1D layouts are not supported")
	case c.Bias != "" && c.Bias != "none":
		return bad(fmt.Sprintf("bias %q: adapters with biases are not supported", c.Bias))
	case len(c.ModulesToSave) > 0:
		return bad(fmt.Sprintf("modules_to_save %v: fully trained modules are not supported", c.ModulesToSave))
	case len(c.AlphaPattern) > 0:
		return bad("alpha_pattern: per-module alphas are not supported")
	}
	var mods []string
	if len(c.TargetModules) > 0 && json.Unmarshal(c.TargetModules, &mods) == nil {
		for _, m := range mods {
			if _, ok := hfTargets[m]; !ok {
				return bad(fmt.Sprintf("unknown target module %q (known: q_proj, k_proj, v_proj, qkv_proj, o_proj, gate_proj, up_proj, gate_up_proj, down_proj)", m))
			}
		}
	}
	return nil
}

// safetensorsEntry is one tensor of a safetensors header.
type safetensorsEntry struct {
	DType   string   `json:"dtype"`
	Shape   []int    `json:"shape"`
	Offsets [2]int64 `json:"data_offsets"`
}

// readSafetensors reads the header (a little-endian u64 length, then JSON)
// and returns the adapter's tensors, bounds checked.
func readSafetensors(b []byte) ([]tensor, error) {
	if len(b) < 8 {
		return nil, fmt.Errorf("%w: %s is %d bytes", ErrNotAdapter, PEFTWeights, len(b))
	}
	n := binary.LittleEndian.Uint64(b)
	if n > uint64(len(b)-8) || n > 100<<20 {
		return nil, fmt.Errorf("%w: %s: header of %d bytes in a file of %d", ErrNotAdapter, PEFTWeights, n, len(b))
	}
	var hdr map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &hdr); err != nil {
		return nil, fmt.Errorf("%w: %s header: %v", ErrNotAdapter, PEFTWeights, err)
	}
	data := b[8+n:]
	names := make([]string, 0, len(hdr))
	for name := range hdr {
		if name != "__metadata__" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	ts := make([]tensor, 0, len(names))
	for _, name := range names {
		t, err := safetensor(name, hdr[name], data)
		if err != nil {
			return nil, err
		}
		ts = append(ts, t)
	}
	return ts, nil
}

var safetensorsTypes = map[string]gguf.Type{"F32": gguf.TypeF32, "F16": gguf.TypeF16, "BF16": gguf.TypeBF16}

// safetensor checks one header entry and maps its name to a layer and target.
func safetensor(name string, raw json.RawMessage, data []byte) (tensor, error) {
	var e safetensorsEntry
	if err := json.Unmarshal(raw, &e); err != nil {
		return tensor{}, fmt.Errorf("%w: %s: tensor %q: %v", ErrNotAdapter, PEFTWeights, name, err)
	}
	m := peftName.FindStringSubmatch(name)
	if m == nil {
		return tensor{}, fmt.Errorf("%w: tensor %q is not a LoRA A or B matrix of a layer's projection", ErrBadAdapter, name)
	}
	target, ok := hfTargets[m[2]]
	if !ok {
		return tensor{}, fmt.Errorf("%w: tensor %q: unknown target module %q", ErrBadAdapter, name, m[2])
	}
	typ, ok := safetensorsTypes[e.DType]
	if !ok || len(e.Shape) != 2 || e.Shape[0] < 1 || e.Shape[1] < 1 || e.Shape[0] > 1<<20 || e.Shape[1] > 1<<20 {
		return tensor{}, fmt.Errorf("%w: tensor %q: dtype %s shape %v (want a 2-D F32, F16 or BF16 matrix)", ErrBadAdapter, name, e.DType, e.Shape)
	}
	width := int64(4)
	if typ != gguf.TypeF32 {
		width = 2
	}
	size := int64(e.Shape[0]) * int64(e.Shape[1]) * width
	if e.Offsets[0] < 0 || e.Offsets[1]-e.Offsets[0] != size || e.Offsets[1] > int64(len(data)) {
		return tensor{}, fmt.Errorf("%w: %s: tensor %q: offsets %v for %d bytes in %d: %w", ErrBadAdapter, PEFTWeights, name, e.Offsets, size, len(data), errShort)
	}
	layer, _ := strconv.Atoi(m[1])
	return tensor{name: name, layer: layer, target: target, isB: m[3] == "B", rows: e.Shape[0], cols: e.Shape[1],
		typ: typ, data: data[e.Offsets[0]:e.Offsets[1]]}, nil
}

// sortPairs orders pairs by layer, then by target.
func sortPairs(ps []Pair) {
	slices.SortStableFunc(ps, func(x, y Pair) int {
		if x.Layer != y.Layer {
			return x.Layer - y.Layer
		}
		return cmp.Compare(x.Target, y.Target)
	})
}
