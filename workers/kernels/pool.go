package kernels

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// spinLimit is how many polls a waiting goroutine makes before it parks. Decode
// calls MatMul a few hundred times per token with little work in between, so a
// short spin keeps the hand-off in the sub-microsecond range without burning a
// core while the engine is idle.
const spinLimit = 1 << 14

// Pool runs data-parallel work on a fixed set of goroutines, created once and
// reused. The caller of Run takes pieces of the work too, so a pool of T
// threads owns T-1 goroutines.
//
// Run calls are serialized; a Pool is safe for use by several goroutines.
type Pool struct {
	threads int
	workers []*poolWorker

	// Lock order: matMu, then runMu (MatMul holds matMu while it calls
	// Run); Run never takes matMu.
	runMu    sync.Mutex // serializes Run
	matMu    sync.Mutex // serializes MatMul, guarding job
	job      matJob
	rowsFn   func(lo, hi int) // job.rows, bound once so MatMul does not allocate
	prepFn   func(lo, hi int) // job.prepRows
	groupsFn func(lo, hi int) // job.groups

	// The current job, published before gen is advanced.
	fn      func(lo, hi int)
	n       int
	piece   int          // items per piece of the current Run
	taken   atomic.Int64 // pieces handed out in the current Run
	gen     atomic.Uint64
	pending atomic.Int32

	callerParked atomic.Bool
	callerWake   chan struct{}

	closeOnce sync.Once
	closed    atomic.Bool
	wg        sync.WaitGroup
}

type poolWorker struct {
	parked atomic.Bool
	wake   chan struct{}
}

// NewPool starts a pool of the given number of threads; threads <= 0 means
// runtime.NumCPU().
func NewPool(threads int) *Pool {
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	p := &Pool{threads: threads, callerWake: make(chan struct{}, 1)}
	p.rowsFn, p.prepFn, p.groupsFn = p.job.rows, p.job.prepRows, p.job.groups
	p.job.wide = make(chan []byte, threads)
	for range threads {
		p.job.wide <- nil
	}
	for i := 1; i < threads; i++ {
		w := &poolWorker{wake: make(chan struct{}, 1)}
		p.workers = append(p.workers, w)
		p.wg.Add(1)
		go p.loop(w)
	}
	return p
}

// Threads returns the number of threads work is split over.
func (p *Pool) Threads() int { return p.threads }

// Close stops the pool's goroutines and waits for them. It is idempotent; Run
// after Close does all the work on the caller's goroutine.
func (p *Pool) Close() {
	p.closeOnce.Do(func() {
		p.runMu.Lock()
		defer p.runMu.Unlock()
		p.closed.Store(true)
		p.fn = nil
		p.gen.Add(1)
		for _, w := range p.workers {
			if w.parked.CompareAndSwap(true, false) {
				w.wake <- struct{}{}
			}
		}
		p.wg.Wait()
	})
}

// chunksPerThread is how many pieces Run cuts [0,n) into per thread, at
// most: threads take pieces as they finish the last, so a thread slowed by
// the machine (another process on its core, a page fault) leaves the rest to
// the others instead of holding every thread at the barrier.
const chunksPerThread = 8

// Run cuts [0,n) into contiguous pieces, calls fn on each from the pool's
// threads concurrently (each piece once, in no fixed order, on whichever
// thread takes it), and returns when all calls have returned. fn must not
// call Run on the same pool, and its results must not depend on where the
// pieces are cut.
func (p *Pool) Run(n int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	if p.threads == 1 || n == 1 || p.closed.Load() {
		fn(0, n)
		return
	}
	p.runMu.Lock()
	defer p.runMu.Unlock()
	if p.closed.Load() {
		fn(0, n)
		return
	}
	p.fn, p.n = fn, n
	p.piece = max(1, (n+p.threads*chunksPerThread-1)/(p.threads*chunksPerThread))
	p.taken.Store(0)
	p.pending.Store(int32(len(p.workers)))
	p.gen.Add(1)
	for _, w := range p.workers {
		if w.parked.CompareAndSwap(true, false) {
			w.wake <- struct{}{}
		}
	}
	p.work(fn, n)
	p.waitDone()
	p.fn = nil
}

// waitDone waits, spinning then parking, until every worker has finished.
// work calls fn on pieces of [0,n) until none is left.
func (p *Pool) work(fn func(lo, hi int), n int) {
	for {
		lo := int(p.taken.Add(1)-1) * p.piece
		if lo >= n {
			return
		}
		fn(lo, min(lo+p.piece, n))
	}
}

func (p *Pool) waitDone() {
	for spin := 0; p.pending.Load() != 0; spin++ {
		if spin < spinLimit {
			if spin&63 == 63 {
				runtime.Gosched()
			}
			continue
		}
		p.callerParked.Store(true)
		if p.pending.Load() == 0 {
			if !p.callerParked.CompareAndSwap(true, false) {
				<-p.callerWake // a worker took the flag and is sending
			}
			return
		}
		<-p.callerWake
		spin = 0
	}
}

// loop is a worker goroutine: wait for a new generation, do its chunk, report.
func (p *Pool) loop(w *poolWorker) {
	defer p.wg.Done()
	var seen uint64 // the generation at NewPool; a job may be posted before this goroutine runs
	for {
		for spin := 0; p.gen.Load() == seen; spin++ {
			if spin < spinLimit {
				if spin&63 == 63 {
					runtime.Gosched()
				}
				continue
			}
			w.parked.Store(true)
			if p.gen.Load() != seen {
				if !w.parked.CompareAndSwap(true, false) {
					<-w.wake // Run took the flag and is sending
				}
				break
			}
			<-w.wake
			spin = 0
		}
		seen = p.gen.Load()
		fn, n := p.fn, p.n
		if fn == nil { // closed
			return
		}
		p.work(fn, n)
		if p.pending.Add(-1) == 0 && p.callerParked.CompareAndSwap(true, false) {
			p.callerWake <- struct{}{}
		}
	}
}
