package gguf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"syscall"
	"unsafe"
)

// Sentinel errors. Every error from this package wraps one of them.
var (
	ErrNotGGUF         = errors.New("gguf: not a GGUF file")
	ErrVersion         = errors.New("gguf: unsupported GGUF version")
	ErrCorrupt         = errors.New("gguf: corrupt file")
	ErrUnsupportedType = errors.New("gguf: unsupported tensor type")
	ErrNoTensor        = errors.New("gguf: no such tensor")
	ErrNoKey           = errors.New("gguf: no such metadata key")
)

// Magic is "GGUF" read as a little-endian uint32.
const Magic = 0x46554747

// DefaultAlignment is the tensor data alignment when general.alignment is absent.
const DefaultAlignment = 32

// maxDims bounds a tensor's rank (GGML_MAX_DIMS).
const maxDims = 4

// ValueType is the type tag of a metadata value.
type ValueType uint32

// Metadata value types, numbered as in the GGUF specification.
const (
	ValUint8   ValueType = 0
	ValInt8    ValueType = 1
	ValUint16  ValueType = 2
	ValInt16   ValueType = 3
	ValUint32  ValueType = 4
	ValInt32   ValueType = 5
	ValFloat32 ValueType = 6
	ValBool    ValueType = 7
	ValString  ValueType = 8
	ValArray   ValueType = 9
	ValUint64  ValueType = 10
	ValInt64   ValueType = 11
	ValFloat64 ValueType = 12
)

// Value is one metadata value. Scalars are held as the matching Go type (uint8,
// int8, ..., float64, bool, string). Arrays are held as a typed slice ([]uint8,
// []int32, []float32, []string, ...) with Elem naming the element type; an array of
// arrays is held as []Value.
type Value struct {
	Type ValueType
	Elem ValueType // element type when Type == ValArray
	V    any
}

// TensorInfo describes one tensor. Shape is in GGML order: Shape[0] is the
// innermost (contiguous) dimension, so a weight matrix of Rows x Cols has
// Shape = [Cols, Rows].
type TensorInfo struct {
	Name   string
	Shape  []uint64
	Type   Type
	Offset uint64 // from the start of the data section
	Size   uint64 // bytes
}

// Elements returns the number of elements in the tensor.
func (t TensorInfo) Elements() uint64 {
	n := uint64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// File is an opened GGUF file. Tensor data slices alias the mapping and stay
// valid until Close.
type File struct {
	Version   uint32
	Alignment uint64
	Keys      []string         // metadata keys in file order
	KV        map[string]Value // metadata by key
	Tensors   []TensorInfo     // in file order
	byName    map[string]int
	data      []byte   // the tensor data section
	mapped    []byte   // the whole mapping, nil when parsed from memory
	fd        *os.File // the mapped file, open for CopyData; nil when parsed from memory
	size      int64    // the image's size, for one parsed from memory
}

// Open maps the file at path read-only and parses its header. Tensor data is not
// read until used.
func Open(path string) (*File, error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			fd.Close()
		}
	}()
	st, err := fd.Stat()
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	size := st.Size()
	if size < 24 {
		return nil, fmt.Errorf("%w: %s is %d bytes", ErrNotGGUF, path, size)
	}
	if size > math.MaxInt {
		return nil, fmt.Errorf("%w: %s is too large", ErrCorrupt, path)
	}
	m, err := syscall.Mmap(int(fd.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("gguf: mmap %s: %w", path, err)
	}
	f, err := Parse(m)
	if err != nil {
		_ = syscall.Munmap(m)
		return nil, fmt.Errorf("%w (%s)", err, path)
	}
	f.mapped, f.fd, ok = m, fd, true
	// Parse copied the metadata (a vocabulary's strings are megabytes), so
	// the header's pages need not stay in the resident set.
	f.Evict(m[:len(m)-len(f.data)])
	return f, nil
}

// Evict tells the kernel that the mapped pages wholly inside b (tensor data of
// this file) are not needed for now, so they leave the process's resident
// set; a later read faults them back in from the file, unchanged. It does
// nothing for a file parsed from memory, or for b outside the mapping.
func (f *File) Evict(b []byte) {
	if f.mapped == nil || len(b) == 0 {
		return
	}
	base := uintptr(unsafe.Pointer(&f.mapped[0]))
	p := uintptr(unsafe.Pointer(&b[0]))
	if p < base || p+uintptr(len(b)) > base+uintptr(len(f.mapped)) {
		return
	}
	page := uintptr(os.Getpagesize())
	lo := (p - base + page - 1) / page * page
	hi := (p - base + uintptr(len(b))) / page * page
	if hi > lo {
		_ = syscall.Madvise(f.mapped[lo:hi], syscall.MADV_DONTNEED)
	}
}

// CopyData copies src, a slice of this file's tensor data, into dst (which
// must be as long), reading the file rather than the mapping: a read through
// the mapping maps the page, and with the large page-cache folios of current
// kernels up to 2 MiB around it, into the process's resident set, so rows
// read now and then (embedding lookups into an evicted tensor) would bring a
// whole table back one folio at a time. For a file parsed from memory it is
// copy.
func (f *File) CopyData(dst, src []byte) error {
	if len(dst) != len(src) {
		return fmt.Errorf("gguf: CopyData of %d bytes into %d", len(src), len(dst))
	}
	if f.fd == nil || len(src) == 0 {
		copy(dst, src)
		return nil
	}
	base := uintptr(unsafe.Pointer(&f.mapped[0]))
	p := uintptr(unsafe.Pointer(&src[0]))
	if p < base || p+uintptr(len(src)) > base+uintptr(len(f.mapped)) {
		copy(dst, src)
		return nil
	}
	n, err := f.fd.ReadAt(dst, int64(p-base))
	if n != len(dst) {
		return fmt.Errorf("gguf: reading tensor data: %w", err)
	}
	return nil
}

// Size is the file's size in bytes (of the image, for one parsed from memory).
func (f *File) Size() int64 {
	if f.mapped != nil {
		return int64(len(f.mapped))
	}
	return f.size
}

// DropArrays removes the array values from f's metadata (a vocabulary's
// tokens, scores, types and merges: 12 MB at 128k tokens and 280k merges),
// for a holder that keeps f open for its tensor data once it has copied
// what it needs from them. Scalar values stay.
func (f *File) DropArrays() {
	for k, v := range f.KV {
		if v.Type == ValArray {
			delete(f.KV, k)
		}
	}
	f.Keys = slices.DeleteFunc(f.Keys, func(k string) bool {
		_, ok := f.KV[k]
		return !ok
	})
}

// Close unmaps the file. Tensor data obtained from it must not be used after.
func (f *File) Close() error {
	if f.mapped == nil {
		return nil
	}
	m := f.mapped
	f.mapped, f.data = nil, nil
	if f.fd != nil {
		_ = f.fd.Close()
		f.fd = nil
	}
	return syscall.Munmap(m)
}

// Parse reads a GGUF image held in memory. The returned File aliases b. A
// tensor of a type Bulkhead cannot compute with is refused by name with an
// *UnsupportedTypeError.
func Parse(b []byte) (*File, error) {
	r := &reader{b: b}
	if r.u32() != Magic || r.err != nil {
		return nil, ErrNotGGUF
	}
	f := &File{Version: r.u32(), KV: map[string]Value{}, byName: map[string]int{}, size: int64(len(b))}
	if r.err != nil {
		return nil, r.err
	}
	if f.Version != 2 && f.Version != 3 {
		return nil, fmt.Errorf("%w: %d (want 2 or 3)", ErrVersion, f.Version)
	}
	nTensors, nKV := r.u64(), r.u64()
	if r.err != nil {
		return nil, r.err
	}
	// Each KV takes at least 8+4+1 bytes, each tensor info at least 8+4+8+4+8.
	if nKV > uint64(r.left())/13 || nTensors > uint64(r.left())/32 {
		return nil, fmt.Errorf("%w: %d tensors and %d keys cannot fit in %d bytes", ErrCorrupt, nTensors, nKV, len(b))
	}
	if err := f.readKV(r, nKV); err != nil {
		return nil, err
	}
	for i := uint64(0); i < nTensors; i++ {
		t, err := readTensorInfo(r, i)
		if err != nil {
			return nil, err
		}
		if _, dup := f.byName[t.Name]; dup {
			return nil, fmt.Errorf("%w: duplicate tensor %q", ErrCorrupt, t.Name)
		}
		f.byName[t.Name] = len(f.Tensors)
		f.Tensors = append(f.Tensors, t)
	}
	if err := f.placeData(b, r.off); err != nil {
		return nil, err
	}
	return f, nil
}

// readKV reads n metadata pairs, and the alignment they set.
func (f *File) readKV(r *reader, n uint64) error {
	for i := uint64(0); i < n; i++ {
		key := r.str()
		v := r.value(r.u32(), 0)
		if r.err != nil {
			return fmt.Errorf("%w: metadata key %d (%q): %v", ErrCorrupt, i, key, r.err)
		}
		if _, dup := f.KV[key]; dup {
			return fmt.Errorf("%w: duplicate metadata key %q", ErrCorrupt, key)
		}
		f.Keys = append(f.Keys, key)
		f.KV[key] = v
	}
	f.Alignment = DefaultAlignment
	if v, ok := f.KV["general.alignment"]; ok {
		a, ok := v.uint()
		if !ok || a == 0 || a&(a-1) != 0 || a > 1<<16 {
			return fmt.Errorf("%w: general.alignment %v is not a power of two", ErrCorrupt, v.V)
		}
		f.Alignment = a
	}
	return nil
}

// readTensorInfo reads the info of tensor i: name, shape, type and offset,
// and its size from them.
func readTensorInfo(r *reader, i uint64) (TensorInfo, error) {
	var t TensorInfo
	t.Name = r.str()
	nd := r.u32()
	if r.err == nil && (nd == 0 || nd > maxDims) {
		return t, fmt.Errorf("%w: tensor %q has %d dimensions", ErrCorrupt, t.Name, nd)
	}
	elems := uint64(1)
	for d := uint32(0); d < nd && r.err == nil; d++ {
		n := r.u64()
		if n == 0 || n > 1<<40 || elems > (1<<50)/n {
			return t, fmt.Errorf("%w: tensor %q has an impossible shape", ErrCorrupt, t.Name)
		}
		elems *= n
		t.Shape = append(t.Shape, n)
	}
	t.Type = Type(r.u32())
	t.Offset = r.u64()
	if r.err != nil {
		return t, fmt.Errorf("%w: tensor info %d: %v", ErrCorrupt, i, r.err)
	}
	if !t.Type.Supported() {
		// Named by type even when its layout is unknown to us, so the
		// refusal says what the file holds, not just a number.
		return t, &UnsupportedTypeError{Tensor: t.Name, Type: t.Type}
	}
	if t.Shape[0]%uint64(t.Type.BlockSize()) != 0 {
		return t, fmt.Errorf("%w: tensor %q: row of %d is not a multiple of %s's block", ErrCorrupt, t.Name, t.Shape[0], t.Type)
	}
	t.Size = elems / uint64(t.Type.BlockSize()) * uint64(t.Type.TypeSize())
	return t, nil
}

// placeData sets the tensor data section, which starts at the first aligned
// offset after headerEnd, and checks that every tensor lies inside it.
func (f *File) placeData(b []byte, headerEnd int) error {
	start := (uint64(headerEnd) + f.Alignment - 1) / f.Alignment * f.Alignment
	if start > uint64(len(b)) {
		if len(f.Tensors) > 0 {
			return fmt.Errorf("%w: truncated before tensor data", ErrCorrupt)
		}
		start = uint64(len(b))
	}
	f.data = b[start:]
	for _, t := range f.Tensors {
		if t.Offset%f.Alignment != 0 {
			return fmt.Errorf("%w: tensor %q offset %d is not aligned to %d", ErrCorrupt, t.Name, t.Offset, f.Alignment)
		}
		if t.Offset > uint64(len(f.data)) || t.Size > uint64(len(f.data))-t.Offset {
			return fmt.Errorf("%w: tensor %q (%d bytes at %d) runs past the end of the file", ErrCorrupt, t.Name, t.Size, t.Offset)
		}
	}
	return nil
}

// Tensor returns the info and raw bytes of the named tensor.
func (f *File) Tensor(name string) (TensorInfo, []byte, error) {
	i, ok := f.byName[name]
	if !ok {
		return TensorInfo{}, nil, fmt.Errorf("%w: %q", ErrNoTensor, name)
	}
	t := f.Tensors[i]
	return t, f.data[t.Offset : t.Offset+t.Size : t.Offset+t.Size], nil
}

// Vector reads a small 1-D tensor of n elements (a norm weight, a bias) as
// float32s: F32, F16 or BF16; anything else, or another shape, is an error
// naming the tensor.
func (f *File) Vector(name string, n int) ([]float32, error) {
	info, data, err := f.Tensor(name)
	if err != nil {
		return nil, err
	}
	if len(info.Shape) != 1 || info.Shape[0] != uint64(n) {
		return nil, fmt.Errorf("tensor %s has shape %v, want [%d]", name, info.Shape, n)
	}
	switch info.Type {
	case TypeF32, TypeF16, TypeBF16:
	default:
		return nil, fmt.Errorf("tensor %s has type %s (want F32, F16 or BF16)", name, info.Type)
	}
	out := make([]float32, n)
	if err := Dequantize(info.Type, data, out); err != nil {
		return nil, fmt.Errorf("tensor %s: %w", name, err)
	}
	return out, nil
}

// HasTensor reports whether the file holds the named tensor.
func (f *File) HasTensor(name string) bool { _, ok := f.byName[name]; return ok }

// String returns a string metadata value.
func (f *File) String(key string) (string, bool) {
	s, ok := f.KV[key].V.(string)
	return s, ok
}

// Uint returns an unsigned or non-negative integer metadata value of any width.
func (f *File) Uint(key string) (uint64, bool) { return f.KV[key].uint() }

// Float returns a float (or integer) metadata value as float64.
func (f *File) Float(key string) (float64, bool) {
	switch v := f.KV[key].V.(type) {
	case float32:
		return float64(v), true
	case float64:
		return v, true
	}
	u, ok := f.KV[key].uint()
	return float64(u), ok
}

// Bool returns a boolean metadata value.
func (f *File) Bool(key string) (bool, bool) {
	b, ok := f.KV[key].V.(bool)
	return b, ok
}

// Strings returns a string-array metadata value.
func (f *File) Strings(key string) ([]string, bool) {
	s, ok := f.KV[key].V.([]string)
	return s, ok
}

// Float32s returns a float32-array metadata value.
func (f *File) Float32s(key string) ([]float32, bool) {
	s, ok := f.KV[key].V.([]float32)
	return s, ok
}

// Int32s returns an integer-array metadata value as int32s (any integer element
// type that fits).
func (f *File) Int32s(key string) ([]int32, bool) {
	v, ok := f.KV[key]
	if !ok || v.Type != ValArray {
		return nil, false
	}
	switch a := v.V.(type) {
	case []int32:
		return a, true
	case []uint32:
		return convInts[uint32](a)
	case []uint8:
		return convInts[uint8](a)
	case []int8:
		return convInts[int8](a)
	case []uint16:
		return convInts[uint16](a)
	case []int16:
		return convInts[int16](a)
	case []uint64:
		return convInts[uint64](a)
	case []int64:
		return convInts[int64](a)
	}
	return nil, false
}

func convInts[T uint8 | int8 | uint16 | int16 | uint32 | uint64 | int64](a []T) ([]int32, bool) {
	out := make([]int32, len(a))
	for i, x := range a {
		if int64(x) > math.MaxInt32 || int64(x) < math.MinInt32 {
			return nil, false
		}
		out[i] = int32(x)
	}
	return out, true
}

func (v Value) uint() (uint64, bool) {
	switch x := v.V.(type) {
	case uint8:
		return uint64(x), true
	case uint16:
		return uint64(x), true
	case uint32:
		return uint64(x), true
	case uint64:
		return x, true
	case int8:
		return uint64(x), x >= 0
	case int16:
		return uint64(x), x >= 0
	case int32:
		return uint64(x), x >= 0
	case int64:
		return uint64(x), x >= 0
	}
	return 0, false
}

// reader decodes little-endian values, remembering the first error; after an
// error every read returns zero.
type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) left() int { return len(r.b) - r.off }

func (r *reader) take(n uint64) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(r.left()) {
		r.err = fmt.Errorf("%w: truncated at byte %d (need %d more)", ErrCorrupt, r.off, n)
		return nil
	}
	p := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return p
}

func (r *reader) u8() uint8 {
	if p := r.take(1); p != nil {
		return p[0]
	}
	return 0
}

func (r *reader) u16() uint16 {
	if p := r.take(2); p != nil {
		return binary.LittleEndian.Uint16(p)
	}
	return 0
}

func (r *reader) u32() uint32 {
	if p := r.take(4); p != nil {
		return binary.LittleEndian.Uint32(p)
	}
	return 0
}

func (r *reader) u64() uint64 {
	if p := r.take(8); p != nil {
		return binary.LittleEndian.Uint64(p)
	}
	return 0
}

func (r *reader) str() string { return string(r.take(r.u64())) }

// scalarSize is the encoded size of each fixed-size value type.
var scalarSize = map[ValueType]uint64{
	ValUint8: 1, ValInt8: 1, ValBool: 1, ValUint16: 2, ValInt16: 2,
	ValUint32: 4, ValInt32: 4, ValFloat32: 4, ValUint64: 8, ValInt64: 8, ValFloat64: 8,
}

// value decodes one value of type t. depth bounds nested arrays.
func (r *reader) value(t uint32, depth int) Value {
	vt := ValueType(t)
	switch vt {
	case ValUint8:
		return Value{Type: vt, V: r.u8()}
	case ValInt8:
		return Value{Type: vt, V: int8(r.u8())}
	case ValUint16:
		return Value{Type: vt, V: r.u16()}
	case ValInt16:
		return Value{Type: vt, V: int16(r.u16())}
	case ValUint32:
		return Value{Type: vt, V: r.u32()}
	case ValInt32:
		return Value{Type: vt, V: int32(r.u32())}
	case ValFloat32:
		return Value{Type: vt, V: math.Float32frombits(r.u32())}
	case ValUint64:
		return Value{Type: vt, V: r.u64()}
	case ValInt64:
		return Value{Type: vt, V: int64(r.u64())}
	case ValFloat64:
		return Value{Type: vt, V: math.Float64frombits(r.u64())}
	case ValBool:
		b := r.u8()
		if b > 1 && r.err == nil {
			r.err = fmt.Errorf("%w: bool value %d", ErrCorrupt, b)
		}
		return Value{Type: vt, V: b == 1}
	case ValString:
		return Value{Type: vt, V: r.str()}
	case ValArray:
		return r.array(depth)
	}
	if r.err == nil {
		r.err = fmt.Errorf("%w: unknown value type %d", ErrCorrupt, t)
	}
	return Value{}
}

func (r *reader) array(depth int) Value {
	et, n := ValueType(r.u32()), r.u64()
	if r.err != nil {
		return Value{}
	}
	if depth >= 2 {
		r.err = fmt.Errorf("%w: arrays nested too deep", ErrCorrupt)
		return Value{}
	}
	// Every element takes at least one byte (strings eight), so a count larger
	// than what is left is a lie; checking first bounds every allocation below.
	minSize := scalarSize[et]
	switch et {
	case ValString:
		minSize = 8 // its length
	case ValArray:
		minSize = 12 // its element type and count
	}
	if minSize == 0 {
		r.err = fmt.Errorf("%w: unknown array element type %d", ErrCorrupt, et)
		return Value{}
	}
	if n > uint64(r.left())/minSize {
		r.err = fmt.Errorf("%w: array of %d elements cannot fit in %d bytes", ErrCorrupt, n, r.left())
		return Value{}
	}
	v := Value{Type: ValArray, Elem: et}
	switch et {
	case ValString:
		a := make([]string, n)
		for i := range a {
			a[i] = r.str()
		}
		v.V = a
	case ValArray:
		a := make([]Value, n)
		for i := range a {
			a[i] = r.array(depth + 1)
		}
		v.V = a
	default:
		v.V = decodeScalars(et, r.take(n*minSize), int(n))
	}
	return v
}

func decodeScalars(et ValueType, p []byte, n int) any {
	if p == nil {
		n = 0
	}
	le := binary.LittleEndian
	switch et {
	case ValUint8:
		return append([]uint8(nil), p...)
	case ValInt8:
		return scalars(p, n, 1, func(b []byte) int8 { return int8(b[0]) })
	case ValBool:
		return scalars(p, n, 1, func(b []byte) bool { return b[0] != 0 })
	case ValUint16:
		return scalars(p, n, 2, le.Uint16)
	case ValInt16:
		return scalars(p, n, 2, func(b []byte) int16 { return int16(le.Uint16(b)) })
	case ValUint32:
		return scalars(p, n, 4, le.Uint32)
	case ValInt32:
		return scalars(p, n, 4, func(b []byte) int32 { return int32(le.Uint32(b)) })
	case ValFloat32:
		return scalars(p, n, 4, func(b []byte) float32 { return math.Float32frombits(le.Uint32(b)) })
	case ValUint64:
		return scalars(p, n, 8, le.Uint64)
	case ValInt64:
		return scalars(p, n, 8, func(b []byte) int64 { return int64(le.Uint64(b)) })
	case ValFloat64:
		return scalars(p, n, 8, func(b []byte) float64 { return math.Float64frombits(le.Uint64(b)) })
	}
	return nil
}

// scalars decodes n little-endian values of size bytes each from p.
func scalars[T any](p []byte, n, size int, decode func([]byte) T) []T {
	a := make([]T, n)
	for i := range a {
		a[i] = decode(p[size*i:])
	}
	return a
}
