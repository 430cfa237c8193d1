package kernels

import (
	"errors"
	"fmt"
	"os"
)

// EnvKernels names the environment variable that forces a lower kernel path
// than the CPU supports ("avx512", "avx2" or "go"), for tests and comparisons;
// "avx512" on a CPU with AMX turns the tiles off. It is read once, when the
// process starts.
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
	pathAMX                // the AVX-512 set plus AMX tiles for batched Q8_0 products (amx.go)
)

var pathNames = [...]string{pathGo: "go", pathAVX2: "avx2", pathAVX512: "avx512", pathAMX: "amx"}

func (p path) String() string { return pathNames[p] }

// active is the path this process chose once, from the CPU (detectPath) and
// EnvKernels; activeErr says why EnvKernels was refused. It is read only by
// Active and by the zero Set.
var active, activeErr = choosePath(detectPath(), os.Getenv(EnvKernels))

// Set is one kernel path, as a table of the ops that have more than one
// implementation (ggml's per-type traits, by path): every such op is a method
// of the Set it runs on, and a Matrix records the Set it was laid out for. A
// serving process uses one Set, Active; a test runs every Set the CPU has
// (Available) in one process. The zero Set is Active.
type Set struct {
	id uint8 // 0: the active path; otherwise the path plus one
}

// Active is the Set this process chose at start-up: the best the CPU and build
// have, or the lower one EnvKernels names.
func Active() Set { return active.set() }

// Available lists every Set this CPU and build support, lowest (the portable
// reference) first.
func Available() []Set {
	var ss []Set
	for _, p := range availablePaths() {
		ss = append(ss, p.set())
	}
	return ss
}

// set is the Set that runs path p.
func (p path) set() Set { return Set{id: uint8(p) + 1} }

// path is the kernel path s runs.
func (s Set) path() path {
	if s.id == 0 {
		return active
	}
	return path(s.id - 1)
}

// asm says whether s runs the AVX2 (or higher) assembly.
func (s Set) asm() bool { return s.path() >= pathAVX2 }

// String names the Set: "amx", "avx512", "avx2" or "go".
func (s Set) String() string { return s.path().String() }

// Portable reports whether s is the portable Go reference path.
func (s Set) Portable() bool { return s.path() == pathGo }

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
	return best, fmt.Errorf("%w: %q is not one of amx, avx512, avx2, go", ErrKernels, env)
}

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
