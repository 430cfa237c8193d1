package kernels

import (
	"errors"
	"fmt"
	"os"
)

// EnvKernels names the environment variable that forces a lower kernel path
// than the CPU supports ("avx2" or "go"), for tests and comparisons. It is read
// once, when the process starts.
const EnvKernels = "BULKHEAD_KERNELS"

// ErrKernels is returned by CheckKernels when EnvKernels names an unknown path
// or one this CPU or build does not have.
var ErrKernels = errors.New("kernels: bad " + EnvKernels)

// path is a family of kernels. Higher paths need more of the CPU; every path
// computes quantized products bitwise equal to the portable one, and float
// products within rounding of it.
type path uint8

const (
	pathGo     path = iota // portable Go, the reference
	pathAVX2               // AVX2, FMA, F16C
	pathAVX512             // the AVX2 set plus AVX-512 F, BW, VL and VNNI
)

var pathNames = [...]string{pathGo: "go", pathAVX2: "avx2", pathAVX512: "avx512"}

func (p path) String() string { return pathNames[p] }

// active is the path every product of this process uses, chosen once from the
// CPU (detectPath) and EnvKernels; activeErr says why EnvKernels was refused.
var active, activeErr = choosePath(detectPath(), os.Getenv(EnvKernels))

// useAsm says whether the AVX2 (or higher) kernels are in use.
var useAsm = active >= pathAVX2

// choosePath returns the path to use on a CPU whose best path is best, with env
// the value of EnvKernels: empty means best; a name at or below best means
// that path. Anything else is an error, and best is used.
func choosePath(best path, env string) (path, error) {
	if env == "" {
		return best, nil
	}
	for p, name := range pathNames {
		if env != name {
			continue
		}
		if path(p) > best {
			return best, fmt.Errorf("%w: %q asks for a kernel path this CPU or build lacks (best here: %s)", ErrKernels, env, best)
		}
		return path(p), nil
	}
	return best, fmt.Errorf("%w: %q is not one of avx512, avx2, go", ErrKernels, env)
}

// Kernels names the kernel path in use: "avx512", "avx2" or "go".
func Kernels() string { return active.String() }

// CheckKernels returns an error wrapping ErrKernels when EnvKernels was set to
// a path that cannot be used; callers should refuse to start rather than run
// on a path nobody asked for.
func CheckKernels() error { return activeErr }

// availablePaths lists the paths this CPU and build support, lowest first.
func availablePaths() []path {
	var ps []path
	for p := pathGo; p <= detectPath(); p++ {
		ps = append(ps, p)
	}
	return ps
}
