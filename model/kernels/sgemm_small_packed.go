package kernels

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// PackedWeights is a copy of a weight matrix W (n×k, applied as x·Wᵀ) laid out for decoding:
// cut into panels of width columns of Wᵀ (rows of W), each stored k×width, so that the NN
// small-m kernels read one contiguous stream per panel, the way the blocked kernels read a
// strip that Sgemm packed. Decoding applies every weight matrix to a handful of rows per call;
// packing once per weight load instead of once per call (the blocked path) or transposing in
// registers on every call (the NT small-m path) leaves the weights' memory traffic as the cost
// of a batch-1 step and the FMAs as the cost of a larger batch.
//
// The copy is a snapshot: after W changes, Pack it again.
type PackedWeights struct {
	n, k  int
	width int          // panel width: the NN kernel's, 4 for the Go kernel
	kern  *microKernel // the microkernel whose arithmetic SgemmPacked reproduces
	data  []float32    // panel s at data[s*k*width:], row p of it at +p*width; zero-padded
}

// Pack copies w (n×k, row-major) into p, reusing p's storage when it is large enough.
func (p *PackedWeights) Pack(w []float32, n, k int) {
	checkMatrix("B", n, k, w, k)
	kern := activeKernel()
	width := 4
	if nn := smallNNFor(kern); nn != nil {
		width = nn.width
	}
	panels := (n + width - 1) / width
	p.n, p.k, p.width, p.kern = n, k, width, kern
	p.data = grow32(p.data, panels*k*width)
	if k == 0 {
		return
	}
	for s := range panels {
		j := s * width
		transposeStrip(p.data[s*k*width:(s+1)*k*width], w[j*k:], k, k, min(width, n-j), width)
	}
}

// Dims returns n and k of the packed matrix.
func (p *PackedWeights) Dims() (n, k int) { return p.n, p.k }

// PanelWidth is the number of columns of C a panel of the packed matrix gives, the unit in which
// SgemmPackedPart cuts a product.
func (p *PackedWeights) PanelWidth() int { return p.width }

// SgemmPacked computes C = alpha*A·Wᵀ + beta*C for the m×k matrix A and the packed n×k weight
// W. It is bit for bit Sgemm(false, true, m, n, k, alpha, a, lda, W, k, beta, c, ldc) for every
// m, with the microkernel that was active when W was packed: every element gets the blocked
// path's k slices, FMA chains and store (TestSgemmPackedBitwise, TestGemvPackedBitwise). One
// row (a batch-1 decode step) runs on gemvPart, the matrix-vector kernels split across the
// cores when gemvTune says so; more rows on the NN kernels, panel by panel.
func SgemmPacked(m int, alpha float32, a []float32, lda int, w *PackedWeights, beta float32, c []float32, ldc int) {
	n, k := w.n, w.k
	if !packedOperands("SgemmPacked", w.kern != nil, m, n, k, alpha, a, lda, beta, c, ldc) {
		return
	}
	parts := w.Parts(m, maxWorkers())
	if m == 1 && w.gemv() {
		var plan gemvPlan
		parts, plan = gemvTune.plan(parts, 4*n*k)
		defer plan.done()
	}
	fanOut(parts, func(part int) { w.part(part, parts, m, alpha, a, lda, beta, c, ldc) })
}

// Parts is how many parts SgemmPackedPart cuts a product of m rows by w into when nw
// goroutines share it (1: not split). One row (a batch-1 decode step, gemvPart) is cut by
// the weight each part reads, up to gemvPartsPerWorker parts a goroutine; more rows by panels,
// one run of panels a goroutine, from packedParallelMin multiply-adds or packedParallelBytes
// of weight.
func (w *PackedWeights) Parts(m, nw int) int {
	n, k := w.n, w.k
	if m <= 0 || n == 0 || k == 0 || nw <= 1 {
		return 1
	}
	if m == 1 && w.gemv() {
		full := n / w.width
		return max(1, min(full, nw*gemvPartsPerWorker, full*k*w.width*4/gemvMinPartBytes))
	}
	if float64(m)*float64(n)*float64(k) < packedParallelMin && 4*n*k < packedParallelBytes {
		return 1
	}
	return min(nw, (n+w.width-1)/w.width)
}

// gemv reports whether one row is multiplied by gemvPart.
func (w *PackedWeights) gemv() bool {
	nn := smallNNFor(w.kern)
	return gemvOn && (nn == nil || len(nn.gemv) > 0)
}

// SgemmPackedPart computes part of SgemmPacked(m, alpha, a, lda, w, beta, c, ldc): the columns
// of C that part (of parts, as w.Parts gives) owns. The parts of a product write disjoint
// columns and together make SgemmPacked's result bit for bit, whichever goroutines run them
// and in whatever order; it is for callers that run a product's parts inside a parallel region
// of their own (Phases). Any parts from 1 to the number of panels may be asked for: where n is a
// multiple of PanelWidth, part p writes the columns of the panels [p·P/parts, (p+1)·P/parts) of
// the P = n/PanelWidth, for every m, so a caller can cut C at panel boundaries of its choosing
// (a decode step's query/key/value heads by key/value head).
func SgemmPackedPart(part, parts, m int, alpha float32, a []float32, lda int, w *PackedWeights, beta float32, c []float32, ldc int) {
	if partDone("SgemmPackedPart", w.kern != nil, part, parts, m, w.k, w.n, alpha, a, lda, beta, c, ldc) {
		return
	}
	w.part(part, parts, m, alpha, a, lda, beta, c, ldc)
}

// partDone is SgemmPackedPart's and SgemmBF16Part's checks of one part of a product of m rows
// on packed k×n weights (panicking, under name, on weights not packed or a part out of range)
// and the parts with nothing to multiply: it reports whether the part is done, C scaled by beta
// (by part 0) where k or alpha is 0.
func partDone(name string, packed bool, part, parts, m, k, n int, alpha float32, a []float32, lda int, beta float32, c []float32, ldc int) bool {
	if !packed {
		panic("kernels." + name + ": weights not packed")
	}
	if m < 0 || parts < 1 || part < 0 || part >= parts {
		panic(fmt.Sprintf("kernels.%s: part %d of %d, m=%d", name, part, parts, m))
	}
	checkMatrix("A", m, k, a, lda)
	checkMatrix("C", m, n, c, ldc)
	if part == 0 { // the one part that scales C when there is nothing to multiply
		return emptyProduct(m, n, k, alpha, beta, c, ldc)
	}
	return m == 0 || n == 0 || k == 0 || alpha == 0
}

// part is SgemmPackedPart after the checks, with k > 0 and alpha ≠ 0.
func (w *PackedWeights) part(part, parts, m int, alpha float32, a []float32, lda int, beta float32, c []float32, ldc int) {
	n, k, kern, width := w.n, w.k, w.kern, w.width
	kc := sliceDepth(k, kern.kc)
	nn := smallNNFor(kern)
	if m == 1 && w.gemv() {
		gemvPart(nn, w, kc, alpha, a, beta, c, part, parts)
		return
	}
	panels := (n + width - 1) / width
	var edge []float32
	for s := part * panels / parts; s < (part+1)*panels/parts; s++ {
		j := s * width
		panel := w.data[s*k*width : (s+1)*k*width]
		cols := min(width, n-j)
		switch {
		case nn == nil:
			smallGoNN(0, cols, m, k, kc, alpha, a, lda, panel, width, beta, c[j:], ldc)
		case cols == width:
			smallNNPanel(nn, m, k, kc, alpha, a, lda, panel, width, beta, c[j:], ldc, packedPrefetch)
		default:
			// The last panel is zero-padded; its columns of C go through scratch.
			buf := getBuf(m * width)
			edge = *buf
			copyTile(edge, width, c[j:], ldc, m, cols)
			smallNNPanel(nn, m, k, kc, alpha, a, lda, panel, width, beta, edge, width, packedPrefetch)
			copyTile(c[j:], ldc, edge, width, m, cols)
			putBuf(buf)
		}
	}
}

// packedOperands checks the operands of a product with a packed weight (SgemmPacked,
// SgemmBF16; fn names it), panicking on a programming error, and computes the products that need
// no kernel: none when m or n is zero, C = beta*C when k or alpha is. It reports whether the
// kernels have the product to compute.
func packedOperands(fn string, packed bool, m, n, k int, alpha float32, a []float32, lda int, beta float32, c []float32, ldc int) bool {
	if !packed {
		panic("kernels." + fn + ": weights not packed")
	}
	if m < 0 {
		panic(fmt.Sprintf("kernels.%s: negative m=%d", fn, m))
	}
	checkMatrix("A", m, k, a, lda)
	checkMatrix("C", m, n, c, ldc)
	return !emptyProduct(m, n, k, alpha, beta, c, ldc)
}

// gemvPart's settings. gemvOn and gemvChoice exist for the tests and benchmarks, which
// compare it with the per-panel path and run each of its kernels.
var (
	gemvOn     = true
	gemvChoice = 0 // index into nn.gemv of the widest kernel to use
	// gemvMinPartBytes is the least weight a part of the product reads: a parallel region costs
	// a few microseconds even with the helpers spinning (pool.go), which is what 64 KiB take
	// from L3 or DRAM.
	gemvMinPartBytes = 64 << 10
)

// gemvPartsPerWorker: the product is cut into up to this many parts per goroutine, claimed one
// at a time, so that where a core is busy with another process the others take its share.
const gemvPartsPerWorker = 2

// gemvTune decides whether SgemmPacked splits a product among the goroutines. Split, a product
// streams faster where the other cores are free (each adds its own share of the caches' and
// the memory's bandwidth); but where another process keeps them busy, a helper that the
// operating system deschedules in the middle of its part makes the whole product wait for it
// for a scheduler time slice, milliseconds against the microseconds of a product. On the shared
// 2-vCPU Xeon, with another process using both cores, one core streamed 28 GB/s and two 18
// (BenchmarkGemvRoofline, BENCHMARKS.md). So both ways are timed (SplitTuner). Which goroutine
// computes a part never changes a bit, so neither does the choice.
var gemvTune SplitTuner

// gemvTuneOn is false only in tests and benchmarks that force one way.
var gemvTuneOn = true

const (
	gemvProbe      = 1024 // the most runs between two probe windows of split runs
	gemvFirstProbe = 64   // runs to the first probe window after a change of way
	gemvWindow     = 16   // runs in a probe window
	gemvWarm       = 4    // runs not timed after a switch
	// gemvRareProbe is the runs between two probe windows of unsplit runs while split runs are
	// the faster and unsplit ones have been timed.
	gemvRareProbe = 16 * gemvProbe
	tunerSamples  = 8 // the times kept of each way
)

// SplitTuner decides, for a kind of memory-bound work that runs again and again (gemvTune: a
// batch-1 product; the model's batch-1 decode step), whether to split it among the goroutines
// or run it on one. Both ways are timed per KiB of weight read, and the work is split unless the
// median of unsplit runs' last tunerSamples times has been faster than split runs' by a fifth
// (a margin, since splitting is the way that wins on a machine of one's own). Medians, because
// a run that the operating system descheduled takes a time slice longer: with the exponential
// average the tuner kept before, three stalled runs in a row (a stall of a millisecond or two
// covers that many steps of the default model) moved split runs' average past the margin, and
// the runs stayed on one core, at about half the speed, until the next window of split runs, up
// to a thousand runs later; the median of eight moves only when most of them are slow.
//
// The way not taken is probed in windows of gemvWindow runs, and the probes are not
// symmetric. While unsplit runs are the faster (another process keeps the other cores busy, or
// the work is too small to share), a window of split runs comes gemvFirstProbe runs after the
// switch, then after twice as many runs each time up to gemvProbe: the machine getting quiet
// again shows only in split runs. While split runs are the faster, a change shows in their own
// times: a load that makes unsplit runs the faster way slows split ones down until they lose
// against unsplit's times, which were taken earlier and are if anything lower than what unsplit
// runs take under the load. So once unsplit runs have been timed, a window of them comes only
// every gemvRareProbe runs. A window of the slower way costs what that way loses: a 24 M
// model's split steps are twice as fast as its unsplit ones, and a window every period made a
// 300-step decode 16% slower than its split steps alone (BenchmarkDecodeRoofline,
// BENCHMARKS.md). The first runs of a window and the first after a window or a switch are not
// timed: the helpers sleep while runs are not split (pool.go), and waking them is a cost of
// switching, not of either way.
//
// The zero value is ready; it is safe for concurrent use.
type SplitTuner struct {
	mu     sync.Mutex
	runs   uint64
	start  uint64 // the run at which the last window started
	gap    uint64 // runs from that start to the next window's (0: no run yet)
	split  bool   // the way taken outside windows at the last run
	recent [2]tunerTimes
}

// tunerTimes is a way's last tunerSamples times per KiB, in nanoseconds.
type tunerTimes struct {
	ns [tunerSamples]float64
	n  int // samples so far
}

func (r *tunerTimes) add(ns float64) {
	r.ns[r.n%tunerSamples] = ns
	r.n++
}

// median is the median of the samples kept, 0 without any.
func (r *tunerTimes) median() float64 {
	n := min(r.n, tunerSamples)
	if n == 0 {
		return 0
	}
	x := r.ns
	s := x[:n]
	slices.Sort(s)
	return s[n/2]
}

// Split reports whether the next run is split and whether to time it (Record).
func (t *SplitTuner) Split() (split, timed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	one, two := t.recent[0].median(), t.recent[1].median()
	best := one == 0 || two == 0 || one >= 0.8*two
	c := t.runs
	t.runs++
	switch {
	case t.gap == 0: // the first run: a window of the other way at once
		t.start, t.gap, t.split = c, gemvFirstProbe, best
	case best != t.split:
		// A switch: as if a window had just ended, so that the first runs are not timed and the
		// way left is probed again gemvFirstProbe runs on.
		t.start, t.gap, t.split = c-min(c, gemvWindow), gemvFirstProbe, best
	}
	gap := t.gap
	if best && one != 0 {
		gap = gemvRareProbe
	}
	pos := c - t.start
	if pos >= gap && pos >= gemvWindow+gemvWarm {
		t.start, pos = c, 0
		if !best || one == 0 {
			t.gap = min(2*t.gap, gemvProbe)
		}
	}
	switch {
	case pos < gemvWindow:
		return !best, pos >= gemvWarm
	case pos < gemvWindow+gemvWarm:
		return best, false
	}
	return best, true
}

// gemvPlan is how one one-row product was run, for SplitTuner.plan's caller to report its time.
type gemvPlan struct {
	t            *SplitTuner
	split, timed bool
	bytes        int
	t0           time.Time
}

// plan is how many parts a one-row product cut into parts (its Parts for the goroutines), bytes
// of weight in all, runs in: parts, or one where the tuner says unsplit products are faster
// now. The caller calls done on the returned plan once the product is computed.
func (t *SplitTuner) plan(parts, bytes int) (int, gemvPlan) {
	if parts <= 1 || !gemvTuneOn {
		return parts, gemvPlan{}
	}
	p := gemvPlan{t: t, bytes: bytes}
	p.split, p.timed = t.Split()
	if !p.split {
		parts = 1
	}
	if p.timed {
		p.t0 = time.Now()
	}
	return parts, p
}

// done records the product's time, if it was timed.
func (p gemvPlan) done() {
	if p.timed {
		p.t.Record(p.split, p.bytes, time.Since(p.t0))
	}
}

// Record adds a run that read the given bytes of weight and took d to the times of its way.
func (t *SplitTuner) Record(split bool, bytes int, d time.Duration) {
	i := 0
	if split {
		i = 1
	}
	t.mu.Lock()
	t.recent[i].add(float64(d.Nanoseconds()) / (float64(bytes) / 1024))
	t.mu.Unlock()
}

// gemvPart is SgemmPacked's part for one row of A (a batch-1 decode step): the full panels
// shared out in contiguous runs among the parts, each run on the widest gemv kernels that fit
// (gemvRun; gemvGo without the assembly), and the last, zero-padded panel in the last part as
// in SgemmPacked. Every column gets the arithmetic of the per-panel NN kernel (the same k
// slices, FMA chain and store), so the bits are SgemmPacked's.
func gemvPart(nn *smallNNKernel, w *PackedWeights, kc int, alpha float32, a []float32, beta float32, c []float32, part, parts int) {
	n, k, width := w.n, w.k, w.width
	full := n / width
	_ = a[k-1]
	s0, s1 := part*full/parts, (part+1)*full/parts
	if nn == nil {
		gemvGo(w.data, s0, s1-s0, k, kc, alpha, a, beta, c)
	} else {
		gemvRun(nn, min(gemvChoice, len(nn.gemv)-1), w.data, s0, s1-s0, k, kc, width, alpha, a, beta, c)
	}
	if part < parts-1 || full == (n+width-1)/width {
		return
	}
	j := full * width
	if nn == nil {
		smallGoNN(0, n-j, 1, k, kc, alpha, a, k, w.data[full*k*width:], width, beta, c[j:], n)
		return
	}
	panel := w.data[full*k*width : (full+1)*k*width]
	buf := getBuf(width)
	edge := *buf
	copyTile(edge, width, c[j:], width, 1, n-j)
	smallNNPanel(nn, 1, k, kc, alpha, a, k, panel, width, beta, edge, width, false)
	copyTile(c[j:], width, edge, width, 1, n-j)
	putBuf(buf)
}

// gemvGo is gemvRun for the Go kernel's packed panels (4 columns each): two panels at a time,
// eight chains in flight instead of smallGoNN's four, each column with smallGoNN's operations
// (acc += a*b from zero per slice, the same statement, then storeGo), a lone panel on smallGoNN.
func gemvGo(data []float32, s0, cnt, k, kc int, alpha float32, a []float32, beta float32, c []float32) {
	const width = 4
	for ; cnt >= 2; s0, cnt = s0+2, cnt-2 {
		b0 := data[s0*k*width : (s0+1)*k*width]
		b1 := data[(s0+1)*k*width : (s0+2)*k*width]
		cr := c[s0*width : (s0+2)*width]
		for pc := 0; pc < k; pc += kc {
			kb := min(kc, k-pc)
			betaEff := beta
			if pc > 0 {
				betaEff = 1
			}
			ar := a[pc : pc+kb]
			p0 := b0[pc*width : (pc+kb)*width]
			p1 := b1[pc*width : (pc+kb)*width]
			var s00, s01, s02, s03, s10, s11, s12, s13 float32
			for p, av := range ar {
				r0 := p0[p*width : p*width+4 : p*width+4]
				r1 := p1[p*width : p*width+4 : p*width+4]
				s00 += av * r0[0]
				s01 += av * r0[1]
				s02 += av * r0[2]
				s03 += av * r0[3]
				s10 += av * r1[0]
				s11 += av * r1[1]
				s12 += av * r1[2]
				s13 += av * r1[3]
			}
			storeRow4(cr[0:4], s00, s01, s02, s03, alpha, betaEff)
			storeRow4(cr[4:8], s10, s11, s12, s13, alpha, betaEff)
		}
	}
	if cnt == 1 {
		smallGoNN(0, width, 1, k, kc, alpha, a, k, data[s0*k*width:(s0+1)*k*width], width, beta, c[s0*width:], width)
	}
}

// gemvRun computes the columns of cnt full panels from panel s0 on, the widest gemv kernel
// from nn.gemv[ch:] that fits at a time, single panels on smallNN's one-row kernel.
func gemvRun(nn *smallNNKernel, ch int, data []float32, s0, cnt, k, kc, width int, alpha float32, a []float32, beta float32, c []float32) {
	for cnt > 0 {
		g := -1
		for i := ch; i < len(nn.gemv); i++ {
			if nn.gemv[i].panels <= cnt {
				g = i
				break
			}
		}
		P := 1
		if g >= 0 {
			P = nn.gemv[g].panels
		}
		base := s0 * k * width
		_ = data[base+P*k*width-1]
		_ = c[s0*width+P*width-1]
		for pc := 0; pc < k; pc += kc {
			kb := min(kc, k-pc)
			betaEff := beta
			if pc > 0 {
				betaEff = 1
			}
			b, cp := &data[base+pc*width], &c[s0*width]
			if g < 0 {
				nn.fns[0](kb, &a[pc], k, b, width, cp, width, alpha, betaEff)
			} else {
				nn.gemv[g].fn(kb, &a[pc], b, k*width, cp, alpha, betaEff)
			}
		}
		s0, cnt = s0+P, cnt-P
	}
}

// packedPrefetch turns on smallNNPanel's prefetch of the next slice for packed weights; only
// BenchmarkSgemmPackedStream turns it off, to measure what it gives.
var packedPrefetch = true

// packedParallelMin is the multiply-adds (m·n·k) from which SgemmPacked splits the panels of a
// product of several rows between goroutines: Sgemm's threshold. One row (gemvPart) is split
// by the weight it reads instead (gemvMinPartBytes): it is bound by how fast the weights stream,
// and each core adds its own share of the L3's and the memory's bandwidth: on the 2-vCPU Xeon,
// reading 13.7 MB from L3 or 97 MB from DRAM ran 1.5–2× faster on two cores than on one
// (BenchmarkGemvRoofline, BENCHMARKS.md). The per-panel one-row path had measured no faster on
// two Zen 4 cores.
const packedParallelMin = parallelMinFlops / 2

// packedParallelBytes is the weight from which a product of a few rows is split all the same:
// like one row, it is bound by how fast the weights stream (a decode step of 2 to 7 sequences
// reads every weight once, as batch 1 does), and each core adds its share of the bandwidth.
// Two of gemvMinPartBytes: two parts at least.
const packedParallelBytes = 2 * 64 << 10

func grow32(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}
