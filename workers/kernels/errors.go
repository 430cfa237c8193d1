package kernels

import "errors"

// Errors returned by NewMatrix.
var (
	// ErrUnsupportedType means the weight type has no kernel here.
	ErrUnsupportedType = errors.New("kernels: unsupported weight type")
	// ErrShape means rows, cols or the data length do not fit the type.
	ErrShape = errors.New("kernels: bad matrix shape")
)
