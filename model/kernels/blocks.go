package kernels

import "sync"

// The cache blocking of the blocked driver, derived from the caches of the CPU at hand (CPU)
// rather than tuned on one machine. Neither block changes a bit of any product: every element
// sums the same kc slices in the same order whatever mc and nc are.
//
//   - mc, the rows of the packed A block that the micro-kernel sweeps once per B strip, lives in
//     the L2 of one core. Measured on Zen 4 (1 MiB L2 per core, kc 384) over mc 48–192, 96 rows
//     were best or within noise of it: an A block of 144 KiB, a seventh of the L2, the rest left
//     to the B strips and C tiles streaming through. mc keeps that fraction of the L2 a core
//     has to itself (shared L2s are divided among the CPUs sharing them): 96 rows at 1 MiB,
//     192 at 2 MiB.
//   - nc, the columns of the packed B block (kc×nc) that every A block of a column block is
//     multiplied by, lives in the L3 (the macro-kernel reads each B strip once per A block from
//     there): half the L3 share of the CPUs that run the kernels, so that the block stays
//     resident, at most 4096 columns (a 6 MiB packing buffer with kc 384; larger blocks only
//     save repacking A, which wide products amortize anyway) and, without an L3, a quarter of
//     the L2. Zen 4 measured nc 512 and 1024 within noise of each other.
//
// The one software prefetch (smallNNPanel's, for products of more rows than a kernel call
// takes) runs one k slice of a packed panel ahead, into the L2: its distance is the slice, kc
// rows of the panel, and it is used where the slice being multiplied and the next one take at
// most half of the L2 a core has (prefetchFits), so that the prefetch never evicts the slice the
// later passes still read. The batch-1 products prefetch nothing: on their 8 streams no
// distance tried did better than the hardware prefetchers alone (gemmgen's gemv).

// blockOverride, when non-zero, replaces the derived blocks (tests force small blocks with it
// to cover several row and column blocks at small sizes).
var blockOverride struct{ mc, nc int }

// blocks returns mc and nc for this kernel on this CPU.
func (k *microKernel) blocks() (mc, nc int) {
	if blockOverride.mc > 0 {
		return roundUp(blockOverride.mc, k.mr), roundUp(blockOverride.nc, k.nr)
	}
	k.blockOnce.Do(func() { k.mc, k.nc = deriveBlocks(k.mr, k.nr, k.kc, CPU(), maxWorkers()) })
	return k.mc, k.nc
}

// deriveBlocks is the rule above for a kernel of mr×nr tiles and depth kc on a CPU with the
// given caches, nw goroutines running kernels.
func deriveBlocks(mr, nr, kc int, c CPUInfo, nw int) (mc, nc int) {
	l2 := l2Share(c)
	mc = l2 / 7 / (4 * kc) / mr * mr
	mc = min(max(mc, mr), 64*mr)

	var share int
	switch {
	case c.L3 > 0:
		share = c.L3 / 2
		if c.L3Sharing > 1 {
			share = c.L3 / c.L3Sharing * min(nw, c.L3Sharing) / 2
		}
	default:
		share = l2 / 4
	}
	nc = share / (4 * kc) / nr * nr
	nc = min(max(nc, 4*nr), 4096/nr*nr)
	return mc, nc
}

var (
	l2Once sync.Once
	l2Core int
)

// prefetchFits reports whether two k slices of sliceBytes each fit in half the L2 share of a
// core, so that prefetching the next slice keeps the current one cached.
func prefetchFits(sliceBytes int) bool {
	l2Once.Do(func() { l2Core = l2Share(CPU()) })
	return 4*sliceBytes <= l2Core
}

// l2Share is the L2 one logical CPU has to itself (sixteen L1s where no L2 is known).
func l2Share(c CPUInfo) int {
	l2 := c.L2
	if l2 == 0 {
		l2 = 16 * c.L1D
	}
	if c.L2Sharing > 1 {
		l2 /= c.L2Sharing
	}
	return l2
}
