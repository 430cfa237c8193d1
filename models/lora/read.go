package lora

import "fmt"

// Read reads an adapter from path: a GGUF adapter file, or a directory
// holding PEFT's adapter_model.safetensors and adapter_config.json.
func Read(path string) (*Adapter, error) {
	return nil, fmt.Errorf("%w: %s: not implemented yet", ErrNotAdapter, path)
}

// ParseGGUF parses a GGUF adapter file's bytes.
func ParseGGUF(b []byte) (*Adapter, error) {
	return nil, fmt.Errorf("%w: not implemented yet", ErrNotAdapter)
}

// ParsePEFT parses PEFT's adapter_model.safetensors and adapter_config.json.
func ParsePEFT(safetensors, config []byte) (*Adapter, error) {
	return nil, fmt.Errorf("%w: not implemented yet", ErrNotAdapter)
}
