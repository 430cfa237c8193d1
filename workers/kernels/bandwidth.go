package kernels

import (
	"encoding/binary"
	"time"
)

// ReadBandwidth measures how fast the pool's threads stream bufs, read only:
// a model's own weights (Matrix.Weights), as decode reads them, so the figure
// comes from the memory they live in and costs no memory of its own. It
// reads them passes times, split over the threads in 64 KiB pieces as MatMul
// splits weight rows, and returns bytes per second of the fastest pass (the
// first one also faults in what was not resident yet). Decode is bound by
// this figure divided by the weight bytes a token reads; bench engine
// reports the share reached.
func (p *Pool) ReadBandwidth(bufs [][]byte, passes int) float64 {
	const unit = 1 << 16 // bytes per work item at most
	var pieces [][]byte
	total := 0
	for _, b := range bufs {
		for len(b) >= 128 {
			n := min(len(b), unit) &^ 127
			pieces = append(pieces, b[:n])
			total += n
			b = b[n:]
		}
	}
	if len(pieces) == 0 || passes < 1 {
		return 0
	}
	sums := make([]uint64, len(pieces))
	fn := func(lo, hi int) {
		for i := lo; i < hi; i++ {
			sums[i] = readSum(pieces[i])
		}
	}
	best := time.Duration(1<<63 - 1)
	for range passes {
		start := time.Now()
		p.Run(len(pieces), fn)
		best = min(best, time.Since(start))
	}
	return float64(total) / best.Seconds()
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

// Weights is the bytes one MatMul with m reads: its packed copy when it has
// one, else its data. They must not be written.
func (m Matrix) Weights() []byte {
	if m.pack != nil {
		return m.pack
	}
	return m.Data
}

// Bytes returns how many bytes of weights one MatMul with m reads.
func (m Matrix) Bytes() int { return len(m.Weights()) }
