package builtin

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
)

// Name is the catalog name the built-in model is served under, as Workers AI
// names it.
const Name = "@cf/tinyllamas/stories260k"

// FileName is the built-in model's file name in a data directory.
const FileName = "stories260K.gguf"

// SHA256 is the checksum of the embedded file (the same file as
// ../shared/models/stories260K.gguf).
const SHA256 = "270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d"

// License is the model's licence notice, shown with it.
//
//go:embed LICENSE
var License string

//go:embed stories260K.gguf
var model []byte

// Bytes returns the embedded GGUF file. The slice is shared: do not modify it.
func Bytes() []byte { return model }

// WriteTo makes sure dir holds the built-in model and returns its path. An
// existing file is kept when its checksum matches and replaced (atomically)
// otherwise, so a damaged copy is never served.
func WriteTo(dir string) (string, error) {
	path := filepath.Join(dir, FileName)
	if b, err := os.ReadFile(path); err == nil && sum(b) == SHA256 {
		return path, nil
	}
	if got := sum(model); got != SHA256 {
		return "", fmt.Errorf("builtin: embedded model has checksum %s, want %s", got, SHA256)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("builtin: %w", err)
	}
	tmp, err := os.CreateTemp(dir, FileName+".*.tmp")
	if err != nil {
		return "", fmt.Errorf("builtin: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(model); err != nil {
		tmp.Close()
		return "", fmt.Errorf("builtin: writing %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("builtin: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", fmt.Errorf("builtin: %w", err)
	}
	return path, nil
}

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// Equal reports whether b is the built-in model's bytes.
func Equal(b []byte) bool { return bytes.Equal(b, model) }
