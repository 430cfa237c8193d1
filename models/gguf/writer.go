package gguf

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
)

// ErrSize reports a buffer whose length does not match what its type and shape
// require: tensor data given to a Writer, or the source and destination of
// Dequantize and the quantizers.
var ErrSize = errors.New("gguf: size mismatch")

// ErrInvalid reports a Writer given something it cannot encode: an empty or
// duplicate tensor name, a bad shape, a Value whose Go type does not match its
// ValueType, a bad alignment.
var ErrInvalid = errors.New("gguf: invalid writer input")

// TensorSource writes a tensor's data to w, exactly TensorInfo.Size bytes of it.
// It lets a Writer stream a large tensor without holding it in memory.
type TensorSource func(w io.Writer) error

// Writer builds a GGUF version 3 file: metadata in the order it was first set,
// then tensor infos and data in the order they were added, each tensor's data
// aligned to the file's alignment (general.alignment, default 32) and padded with
// zeros, as GGML's own writer lays it out.
//
// The setters without an error result record the first error, which WriteTo and
// WriteFile then return; Err reports it earlier. A Writer is not safe for
// concurrent use.
type Writer struct {
	alignment uint64
	keys      []string
	kv        map[string]Value
	tensors   []wtensor
	names     map[string]bool
	err       error
}

type wtensor struct {
	info TensorInfo
	data []byte
	src  TensorSource
}

// NewWriter returns an empty Writer with the default alignment.
func NewWriter() *Writer {
	return &Writer{alignment: DefaultAlignment, kv: map[string]Value{}, names: map[string]bool{}}
}

// Err returns the first error recorded by a setter, or nil.
func (w *Writer) Err() error { return w.err }

// Alignment returns the tensor data alignment the file will use.
func (w *Writer) Alignment() uint64 { return w.alignment }

// Set sets a metadata value. A key set again keeps its first position and takes
// the new value. Setting general.alignment (any unsigned integer type, a power of
// two up to 65536) changes the alignment of tensor data.
func (w *Writer) Set(key string, v Value) error {
	if key == "" {
		return w.fail(fmt.Errorf("%w: empty metadata key", ErrInvalid))
	}
	if err := checkValue(v, 0); err != nil {
		return w.fail(fmt.Errorf("%w: key %q: %v", ErrInvalid, key, err))
	}
	if key == "general.alignment" {
		a, ok := v.uint()
		if !ok || a == 0 || a&(a-1) != 0 || a > 1<<16 {
			return w.fail(fmt.Errorf("%w: general.alignment %v is not a power of two up to 65536", ErrInvalid, v.V))
		}
		w.alignment = a
	}
	if _, ok := w.kv[key]; !ok {
		w.keys = append(w.keys, key)
	}
	w.kv[key] = v
	return nil
}

func (w *Writer) fail(err error) error {
	if w.err == nil {
		w.err = err
	}
	return err
}

// SetString sets a string value.
func (w *Writer) SetString(key, s string) { _ = w.Set(key, Value{Type: ValString, V: s}) }

// SetUint32 sets a uint32 value.
func (w *Writer) SetUint32(key string, u uint32) { _ = w.Set(key, Value{Type: ValUint32, V: u}) }

// SetInt32 sets an int32 value.
func (w *Writer) SetInt32(key string, i int32) { _ = w.Set(key, Value{Type: ValInt32, V: i}) }

// SetUint64 sets a uint64 value.
func (w *Writer) SetUint64(key string, u uint64) { _ = w.Set(key, Value{Type: ValUint64, V: u}) }

// SetFloat32 sets a float32 value.
func (w *Writer) SetFloat32(key string, f float32) { _ = w.Set(key, Value{Type: ValFloat32, V: f}) }

// SetBool sets a boolean value.
func (w *Writer) SetBool(key string, b bool) { _ = w.Set(key, Value{Type: ValBool, V: b}) }

// SetStrings sets a string-array value.
func (w *Writer) SetStrings(key string, s []string) {
	_ = w.Set(key, Value{Type: ValArray, Elem: ValString, V: s})
}

// SetFloat32s sets a float32-array value.
func (w *Writer) SetFloat32s(key string, f []float32) {
	_ = w.Set(key, Value{Type: ValArray, Elem: ValFloat32, V: f})
}

// SetInt32s sets an int32-array value.
func (w *Writer) SetInt32s(key string, i []int32) {
	_ = w.Set(key, Value{Type: ValArray, Elem: ValInt32, V: i})
}

// AddTensor adds a tensor whose data is held in memory; data is not copied and
// must stay unchanged until the file is written. Shape is in GGML order
// (Shape[0] innermost).
func (w *Writer) AddTensor(name string, shape []uint64, typ Type, data []byte) error {
	info, err := w.tensorInfo(name, shape, typ)
	if err != nil {
		return w.fail(err)
	}
	if uint64(len(data)) != info.Size {
		return w.fail(fmt.Errorf("%w: tensor %q: %d bytes of data, want %d", ErrSize, name, len(data), info.Size))
	}
	w.add(wtensor{info: info, data: data})
	return nil
}

// AddTensorSource adds a tensor whose data src writes while the file is being
// written. Writing fails unless src writes exactly the tensor's size in bytes.
func (w *Writer) AddTensorSource(name string, shape []uint64, typ Type, src TensorSource) error {
	info, err := w.tensorInfo(name, shape, typ)
	if err != nil {
		return w.fail(err)
	}
	if src == nil {
		return w.fail(fmt.Errorf("%w: tensor %q has no data source", ErrInvalid, name))
	}
	w.add(wtensor{info: info, src: src})
	return nil
}

func (w *Writer) add(t wtensor) {
	w.names[t.info.Name] = true
	w.tensors = append(w.tensors, t)
}

func (w *Writer) tensorInfo(name string, shape []uint64, typ Type) (TensorInfo, error) {
	if name == "" {
		return TensorInfo{}, fmt.Errorf("%w: empty tensor name", ErrInvalid)
	}
	if w.names[name] {
		return TensorInfo{}, fmt.Errorf("%w: duplicate tensor %q", ErrInvalid, name)
	}
	if len(shape) == 0 || len(shape) > maxDims {
		return TensorInfo{}, fmt.Errorf("%w: tensor %q has %d dimensions", ErrInvalid, name, len(shape))
	}
	if !typ.Known() {
		return TensorInfo{}, fmt.Errorf("%w: tensor %q has %s", ErrUnsupportedType, name, typ)
	}
	elems := uint64(1)
	for _, n := range shape {
		// The same bounds the reader enforces, so what is written can be read.
		if n == 0 || n > 1<<40 || elems > (1<<50)/n {
			return TensorInfo{}, fmt.Errorf("%w: tensor %q has an impossible shape %v", ErrInvalid, name, shape)
		}
		elems *= n
	}
	if shape[0]%uint64(typ.BlockSize()) != 0 {
		return TensorInfo{}, fmt.Errorf("%w: tensor %q: row of %d is not a multiple of %s's block of %d", ErrInvalid, name, shape[0], typ, typ.BlockSize())
	}
	return TensorInfo{
		Name:  name,
		Shape: append([]uint64(nil), shape...),
		Type:  typ,
		Size:  elems / uint64(typ.BlockSize()) * uint64(typ.TypeSize()),
	}, nil
}

// Tensors returns the infos of the tensors added so far, with the offsets they
// will have in the file.
func (w *Writer) Tensors() []TensorInfo {
	out := make([]TensorInfo, len(w.tensors))
	off := uint64(0)
	for i, t := range w.tensors {
		out[i] = t.info
		out[i].Offset = off
		off += pad(t.info.Size, w.alignment)
	}
	return out
}

func pad(n, a uint64) uint64 { return (n + a - 1) / a * a }

// WriteTo writes the file to dst. It implements io.WriterTo.
func (w *Writer) WriteTo(dst io.Writer) (int64, error) {
	if w.err != nil {
		return 0, w.err
	}
	hdr, err := w.header()
	if err != nil {
		return 0, err
	}
	cw := &countWriter{w: dst}
	bw := bufio.NewWriterSize(cw, 1<<20)
	var zeros [1 << 16]byte // alignment is at most 1<<16
	_, _ = bw.Write(hdr)
	_, _ = bw.Write(zeros[:pad(uint64(len(hdr)), w.alignment)-uint64(len(hdr))])
	for _, t := range w.tensors {
		if t.src == nil {
			_, _ = bw.Write(t.data)
		} else {
			sw := &countWriter{w: bw}
			if err := t.src(sw); err != nil {
				return cw.n, fmt.Errorf("gguf: writing tensor %q: %w", t.info.Name, err)
			}
			if uint64(sw.n) != t.info.Size {
				return cw.n, fmt.Errorf("%w: tensor %q: source wrote %d bytes, want %d", ErrSize, t.info.Name, sw.n, t.info.Size)
			}
		}
		_, _ = bw.Write(zeros[:pad(t.info.Size, w.alignment)-t.info.Size])
	}
	// bufio.Writer keeps the first write error and returns it from Flush.
	if err := bw.Flush(); err != nil {
		return cw.n, fmt.Errorf("gguf: %w", err)
	}
	return cw.n, nil
}

// WriteFile writes the file to path through a temporary file in the same
// directory, renamed into place only when complete.
func (w *Writer) WriteFile(path string) (err error) {
	if w.err != nil {
		return w.err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("gguf: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err = w.WriteTo(tmp); err != nil {
		return err
	}
	// CreateTemp makes the file 0600; a model file is ordinary data.
	if err = tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("gguf: %w", err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("gguf: %w", err)
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("gguf: %w", err)
	}
	return nil
}

// Size returns the number of bytes WriteTo will write.
func (w *Writer) Size() (int64, error) {
	if w.err != nil {
		return 0, w.err
	}
	hdr, err := w.header()
	if err != nil {
		return 0, err
	}
	n := pad(uint64(len(hdr)), w.alignment)
	for _, t := range w.tensors {
		n += pad(t.info.Size, w.alignment)
	}
	return int64(n), nil
}

// header encodes everything before the tensor data.
func (w *Writer) header() ([]byte, error) {
	e := &encoder{}
	e.u32(Magic)
	e.u32(3)
	e.u64(uint64(len(w.tensors)))
	e.u64(uint64(len(w.keys)))
	for _, k := range w.keys {
		e.str(k)
		v := w.kv[k]
		e.u32(uint32(v.Type))
		if err := e.value(v); err != nil {
			return nil, fmt.Errorf("%w: key %q: %v", ErrInvalid, k, err)
		}
	}
	for _, t := range w.Tensors() {
		e.str(t.Name)
		e.u32(uint32(len(t.Shape)))
		for _, d := range t.Shape {
			e.u64(d)
		}
		e.u32(uint32(t.Type))
		e.u64(t.Offset)
	}
	return e.buf.Bytes(), nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

type encoder struct{ buf bytes.Buffer }

func (e *encoder) u8(v uint8) { e.buf.WriteByte(v) }

func (e *encoder) u16(v uint16) { e.buf.Write(binary.LittleEndian.AppendUint16(nil, v)) }

func (e *encoder) u32(v uint32) {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], v)
	e.buf.Write(b[:])
}

func (e *encoder) u64(v uint64) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	e.buf.Write(b[:])
}

func (e *encoder) str(s string) {
	e.u64(uint64(len(s)))
	e.buf.WriteString(s)
}

// checkValue reports whether v's Go value matches its ValueType, so that
// encoding cannot fail half way.
func checkValue(v Value, depth int) error {
	if v.Type != ValArray {
		if !scalarMatches(v.Type, v.V) {
			return fmt.Errorf("value %T does not match value type %d", v.V, v.Type)
		}
		return nil
	}
	if depth >= 2 {
		return errors.New("arrays nested too deep")
	}
	ok := true
	switch v.Elem {
	case ValUint8:
		_, ok = v.V.([]uint8)
	case ValInt8:
		_, ok = v.V.([]int8)
	case ValUint16:
		_, ok = v.V.([]uint16)
	case ValInt16:
		_, ok = v.V.([]int16)
	case ValUint32:
		_, ok = v.V.([]uint32)
	case ValInt32:
		_, ok = v.V.([]int32)
	case ValFloat32:
		_, ok = v.V.([]float32)
	case ValBool:
		_, ok = v.V.([]bool)
	case ValString:
		_, ok = v.V.([]string)
	case ValUint64:
		_, ok = v.V.([]uint64)
	case ValInt64:
		_, ok = v.V.([]int64)
	case ValFloat64:
		_, ok = v.V.([]float64)
	case ValArray:
		a, isA := v.V.([]Value)
		if !isA {
			ok = false
			break
		}
		for _, x := range a {
			if x.Type != ValArray {
				return errors.New("array of arrays holds a non-array")
			}
			if err := checkValue(x, depth+1); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("unknown array element type %d", v.Elem)
	}
	if !ok {
		return fmt.Errorf("value %T does not match array of element type %d", v.V, v.Elem)
	}
	return nil
}

func scalarMatches(vt ValueType, x any) bool {
	ok := false
	switch vt {
	case ValUint8:
		_, ok = x.(uint8)
	case ValInt8:
		_, ok = x.(int8)
	case ValUint16:
		_, ok = x.(uint16)
	case ValInt16:
		_, ok = x.(int16)
	case ValUint32:
		_, ok = x.(uint32)
	case ValInt32:
		_, ok = x.(int32)
	case ValFloat32:
		_, ok = x.(float32)
	case ValBool:
		_, ok = x.(bool)
	case ValString:
		_, ok = x.(string)
	case ValUint64:
		_, ok = x.(uint64)
	case ValInt64:
		_, ok = x.(int64)
	case ValFloat64:
		_, ok = x.(float64)
	}
	return ok
}

// value encodes v's payload (its type tag is written by the caller).
func (e *encoder) value(v Value) error {
	switch x := v.V.(type) {
	case uint8:
		e.u8(x)
	case int8:
		e.u8(uint8(x))
	case uint16:
		e.u16(x)
	case int16:
		e.u16(uint16(x))
	case uint32:
		e.u32(x)
	case int32:
		e.u32(uint32(x))
	case float32:
		e.u32(math.Float32bits(x))
	case uint64:
		e.u64(x)
	case int64:
		e.u64(uint64(x))
	case float64:
		e.u64(math.Float64bits(x))
	case bool:
		e.u8(b2u8(x))
	case string:
		e.str(x)
	default:
		return e.array(v)
	}
	return nil
}

func b2u8(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

func (e *encoder) array(v Value) error {
	e.u32(uint32(v.Elem))
	switch a := v.V.(type) {
	case []uint8:
		e.u64(uint64(len(a)))
		e.buf.Write(a)
	case []int8:
		putArray(e, a, func(x int8) { e.u8(uint8(x)) })
	case []bool:
		putArray(e, a, func(x bool) { e.u8(b2u8(x)) })
	case []uint16:
		putArray(e, a, e.u16)
	case []int16:
		putArray(e, a, func(x int16) { e.u16(uint16(x)) })
	case []uint32:
		putArray(e, a, e.u32)
	case []int32:
		putArray(e, a, func(x int32) { e.u32(uint32(x)) })
	case []float32:
		putArray(e, a, func(x float32) { e.u32(math.Float32bits(x)) })
	case []uint64:
		putArray(e, a, e.u64)
	case []int64:
		putArray(e, a, func(x int64) { e.u64(uint64(x)) })
	case []float64:
		putArray(e, a, func(x float64) { e.u64(math.Float64bits(x)) })
	case []string:
		putArray(e, a, e.str)
	case []Value:
		e.u64(uint64(len(a)))
		for _, x := range a {
			if err := e.array(x); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("cannot encode %T", v.V)
	}
	return nil
}

// putArray writes a's length, then each element with put.
func putArray[T any](e *encoder, a []T, put func(T)) {
	e.u64(uint64(len(a)))
	for _, x := range a {
		put(x)
	}
}
