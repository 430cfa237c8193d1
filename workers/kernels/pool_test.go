package kernels

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/models/testkit"
)

func TestPoolRunCoversEachIndexOnce(t *testing.T) {
	for _, threads := range []int{1, 2, 3, 8} {
		p := NewPool(threads)
		for _, n := range []int{0, 1, 2, 3, 7, 100, 1001} {
			t.Run(fmt.Sprintf("t%d/n%d", threads, n), func(t *testing.T) {
				for rep := range 50 { // repeated, so parked and spinning hand-offs both occur
					hits := make([]atomic.Int32, n)
					p.Run(n, func(lo, hi int) {
						if lo >= hi || lo < 0 || hi > n {
							t.Errorf("bad chunk [%d,%d) of %d", lo, hi, n)
						}
						for i := lo; i < hi; i++ {
							hits[i].Add(1)
						}
					})
					for i := range hits {
						if h := hits[i].Load(); h != 1 {
							t.Fatalf("rep %d: index %d run %d times", rep, i, h)
						}
					}
					if rep == 25 {
						time.Sleep(2 * time.Millisecond) // let workers park
					}
				}
			})
		}
		p.Close()
	}
}

func TestPoolThreads(t *testing.T) {
	for _, tc := range []struct{ in, want int }{{1, 1}, {3, 3}, {0, runtime.NumCPU()}, {-2, runtime.NumCPU()}} {
		t.Run(fmt.Sprint(tc.in), func(t *testing.T) {
			p := NewPool(tc.in)
			defer p.Close()
			if got := p.Threads(); got != tc.want {
				t.Fatalf("Threads() = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestPoolConcurrentRun(t *testing.T) {
	p := NewPool(3)
	defer p.Close()
	var wg sync.WaitGroup
	var total atomic.Int64
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				p.Run(10, func(lo, hi int) { total.Add(int64(hi - lo)) })
			}
		}()
	}
	wg.Wait()
	if got := total.Load(); got != 4*200*10 {
		t.Fatalf("total %d, want %d", got, 4*200*10)
	}
}

func TestPoolCloseIdempotentNoLeak(t *testing.T) {
	before := testkit.Running()
	p := NewPool(5)
	p.Run(10, func(lo, hi int) {})
	p.Close()
	p.Close()
	ran := 0
	p.Run(4, func(lo, hi int) { ran += hi - lo }) // after Close: inline
	if ran != 4 {
		t.Fatalf("Run after Close covered %d of 4", ran)
	}
	q := NewPool(4) // closed without ever running
	q.Close()
	if err := before.Leaks(2 * time.Second); err != nil {
		t.Fatalf("after Close: %v", err)
	}
}
