package kernels

import (
	"encoding/binary"
	"time"
)

// ReadBandwidth measures how fast the pool's threads can stream memory: it
// writes one byte per page of buf (which should be much larger than the
// caches, e.g. 256 MiB), then reads it passes times, split over the threads as MatMul splits weight rows, and returns
// bytes per second of the fastest pass. Decode is bound by this figure times
// the weight bytes a token reads; bench engine reports the share reached.
func (p *Pool) ReadBandwidth(buf []byte, passes int) float64 {
	const unit = 1 << 16 // bytes per work item
	n := len(buf) / unit
	if n == 0 || passes < 1 {
		return 0
	}
	sums := make([]uint64, n)
	fn := func(lo, hi int) {
		for i := lo; i < hi; i++ {
			sums[i] = readSum(buf[i*unit : (i+1)*unit])
		}
	}
	// Write every page first: untouched pages of a fresh allocation all map
	// the kernel's one zero page, which would be read from cache.
	for i := 0; i < len(buf); i += 4096 {
		buf[i] = byte(i>>12) | 1
	}
	best := time.Duration(1<<63 - 1)
	for range passes {
		start := time.Now()
		p.Run(n, fn)
		best = min(best, time.Since(start))
	}
	var s uint64
	for _, v := range sums {
		s += v
	}
	_ = s
	return float64(n*unit) / best.Seconds()
}

// readSum sums b (a multiple of 128 bytes long) as little-endian 64-bit words.
func readSum(b []byte) uint64 {
	if Active().asm() && len(b) > 0 {
		return readSumAVX(&b[0], len(b)&^127)
	}
	var s uint64
	for i := 0; i+8 <= len(b); i += 8 {
		s += binary.LittleEndian.Uint64(b[i:])
	}
	return s
}

// Bytes returns how many bytes of weights one MatMul with m reads: its packed
// copy when it has one, else its data.
func (m Matrix) Bytes() int {
	if m.pack != nil {
		return len(m.pack)
	}
	return len(m.Data)
}
