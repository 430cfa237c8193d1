package catalog

import "fmt"

// CheckName reports whether name is a model name a catalog accepts: non-empty,
// at most MaxNameBytes bytes of printable UTF-8 without spaces. The error wraps
// ErrInvalid and says what is wrong.
func CheckName(name string) error {
	if msg := checkName(name); msg != "" {
		return fmt.Errorf("%w: model name: %s", ErrInvalid, msg)
	}
	return nil
}
