// Prefetch macros shared by the 4-row kernels (#include "prefetch_amd64.h").
//
// A batch of 4 to 15 activation rows makes 1 to 3 passes over each group of
// 16 weight rows, too few for the hardware prefetcher to hide DRAM: the
// products waited on memory, then memory on the products. So the first pass
// over a group asks, super-block by super-block (block by block), for the
// same bytes of the next group (R14, advanced with the weights), a few lines
// after each sub-block's products: spread out, the requests overlap the
// arithmetic. Asked for at once ahead of a pass, they filled the load queue
// and gained nothing. Later passes (and the last group) pass their own
// weights, already in cache. A block of B bytes takes ceil(B/64) lines: when
// the block straddles one more line, the next block's first request fetches
// it.

// PFn(a): the n cache lines from line a of R14 into L2.
#define PF1(a) \
	PREFETCHT1 (64*(a))(R14)
#define PF2(a) \
	PF1(a) \
	PREFETCHT1 (64*(a)+64)(R14)
#define PF3(a) \
	PF2(a) \
	PREFETCHT1 (64*(a)+128)(R14)
#define PF4(a) \
	PF3(a) \
	PREFETCHT1 (64*(a)+192)(R14)
#define PF5(a) \
	PF4(a) \
	PREFETCHT1 (64*(a)+256)(R14)
