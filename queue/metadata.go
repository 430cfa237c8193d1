package queue

import (
	"fmt"
	"unicode/utf8"
)

// Bounds of a request's metadata (OpenAI's): at most MaxMetadataPairs keys,
// each 1 to MaxMetadataKey bytes, each value at most MaxMetadataValue bytes,
// all valid UTF-8.
const (
	MaxMetadataPairs = 16
	MaxMetadataKey   = 64
	MaxMetadataValue = 512
)

// MaxUserLen bounds a request's end-user id (OpenAI's user and
// safety_identifier).
const MaxUserLen = 256

// ValidateUser reports why user cannot be a request's end-user id: longer
// than MaxUserLen bytes or not UTF-8.
func ValidateUser(user string) error {
	if len(user) > MaxUserLen || !utf8.ValidString(user) {
		return fmt.Errorf("want at most %d bytes of UTF-8", MaxUserLen)
	}
	return nil
}

// ValidateMetadata reports the first way m breaks the bounds above, without
// a wrapped sentinel: the edge words it for the client, the decoders wrap it
// in ErrBadMessage.
func ValidateMetadata(m map[string]string) error {
	if len(m) > MaxMetadataPairs {
		return fmt.Errorf("has %d keys; at most %d", len(m), MaxMetadataPairs)
	}
	for k, v := range m {
		switch {
		case k == "" || len(k) > MaxMetadataKey || !utf8.ValidString(k):
			return fmt.Errorf("key %q: want 1 to %d bytes of UTF-8", k, MaxMetadataKey)
		case len(v) > MaxMetadataValue || !utf8.ValidString(v):
			return fmt.Errorf("value of %q: want at most %d bytes of UTF-8", k, MaxMetadataValue)
		}
	}
	return nil
}
