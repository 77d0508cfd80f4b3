// Command gemmgen writes the amd64 assembly microkernels of kernels.Sgemm with avo. Run it
// through `go generate` in model/kernels; the generated sgemm_amd64.s and its Go declarations
// are committed, so building the package needs neither avo nor this command.
//
// Each kernel multiplies a packed mr×kc strip of A by a packed kc×nr strip of B, keeping the
// whole mr×nr tile of C in vector registers (mr*nr/width accumulators), then writes
// C = alpha*acc + beta*C row by row; beta == 0 (either sign) stores without reading C.
//
// The small-m kernels (smallNT) serve decoding, where op(A) has a handful of rows and B is
// stored transposed (n×k): they read B in place, transposing 4×4 blocks in registers, and give
// every element of C exactly the operations of the blocked kernels (one FMA chain from zero
// over the k slice in order, then the same alpha/beta store).
//
// The small-m NN kernels (smallNN) read B row by row with a stride, as the blocked kernels read
// a packed strip: they serve NN products with few rows (attention's P·V while decoding) with B
// in place, and products with weights that were packed once into strips (kernels.PackedWeights).
//
// The gemv kernels are the one-row NN kernel over several packed panels at once: a batch-1
// decode step's matrix-vector products.
package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"

	"github.com/agentrl/agentrl/model/kernels/internal/rowaddr"
)

// kernelSpec is one register tile: mr rows by nvec vectors of width floats.
type kernelSpec struct {
	isa   string // "avx512" (zmm, 32 registers) or "avx2" (ymm with FMA, 16 registers)
	mr    int
	nvec  int
	width int
}

func (s kernelSpec) nr() int { return s.nvec * s.width }

func (s kernelSpec) name() string { return fmt.Sprintf("sgemmKernel%s_%dx%d", s.isa, s.mr, s.nr()) }

func (s kernelSpec) vec() reg.VecVirtual {
	if s.isa == "avx512" {
		return ZMM()
	}
	return YMM()
}

// unroll is how many k steps one loop iteration does; the remainder runs one step at a time.
const unroll = 4

// specs lists every kernel written to the .s file; kernels.availableKernels picks among them.
var specs = []kernelSpec{
	{"avx512", 12, 2, 16},
	{"avx2", 6, 2, 8},
}

func main() {
	ConstraintExpr("amd64,!purego")
	for _, s := range specs {
		kernel(s)
	}
	for _, s := range smallSpecs {
		for rows := 1; rows <= s.maxRows; rows++ {
			smallNT(s, rows)
		}
	}
	for _, s := range specs {
		for rows := 1; rows <= s.mr; rows++ {
			smallNN(s, rows, false)
		}
		for rows := 1; rows <= s.mr; rows++ {
			smallNN(s, rows, true)
		}
	}
	for _, s := range specs {
		for _, panels := range gemvPanels[s.isa] {
			gemv(s, panels)
		}
	}
	transpose4()
	copyStrided()
	Generate()
}

func kernel(s kernelSpec) {
	TEXT(s.name(), NOSPLIT, "func(kc int, a, b, c *float32, ldc int, alpha, beta float32)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s computes a %d×%d tile C = alpha*A·B + beta*C from packed strips (%s).", s.name(), s.mr, s.nr(), s.isa))
	kc := Load(Param("kc"), GP64())
	pa := Load(Param("a"), GP64())
	pb := Load(Param("b"), GP64())

	acc := make([][]reg.VecVirtual, s.mr)
	for r := range acc {
		acc[r] = make([]reg.VecVirtual, s.nvec)
		for v := range acc[r] {
			acc[r][v] = s.vec()
			zero(s, acc[r][v])
		}
	}
	bv := make([]reg.VecVirtual, s.nvec)
	for v := range bv {
		bv[v] = s.vec()
	}
	av := s.vec()
	step := func(u int) {
		for v := range bv {
			VMOVUPS(Mem{Base: pb, Disp: 4 * (u*s.nr() + v*s.width)}, bv[v])
		}
		for r := 0; r < s.mr; r++ {
			VBROADCASTSS(Mem{Base: pa, Disp: 4 * (u*s.mr + r)}, av)
			for v := range bv {
				VFMADD231PS(bv[v], av, acc[r][v])
			}
		}
	}

	Label(s.name() + "_loop")
	CMPQ(kc, Imm(unroll))
	JL(LabelRef(s.name() + "_tail"))
	for u := 0; u < unroll; u++ {
		step(u)
	}
	ADDQ(U32(4*unroll*s.mr), pa)
	ADDQ(U32(4*unroll*s.nr()), pb)
	SUBQ(Imm(unroll), kc)
	JMP(LabelRef(s.name() + "_loop"))

	Label(s.name() + "_tail")
	TESTQ(kc, kc)
	JZ(LabelRef(s.name() + "_store"))
	step(0)
	ADDQ(U32(4*s.mr), pa)
	ADDQ(U32(4*s.nr()), pb)
	DECQ(kc)
	JMP(LabelRef(s.name() + "_tail"))

	Label(s.name() + "_store")
	pc := Load(Param("c"), GP64())
	ldc := Load(Param("ldc"), GP64())
	SHLQ(Imm(2), ldc)
	alpha := s.vec()
	VBROADCASTSS(addr("alpha"), alpha)
	for r := range acc {
		for v := range acc[r] {
			VMULPS(alpha, acc[r][v], acc[r][v])
		}
	}
	// beta == 0 and beta == -0 both mean "overwrite": test the bits without the sign.
	betaBits := GP32()
	MOVL(addr("beta"), betaBits)
	ANDL(U32(0x7fffffff), betaBits)
	JZ(LabelRef(s.name() + "_overwrite"))

	beta := s.vec()
	VBROADCASTSS(addr("beta"), beta)
	for r := range acc {
		for v := range acc[r] {
			m := Mem{Base: pc, Disp: 4 * v * s.width}
			VFMADD231PS(m, beta, acc[r][v])
			VMOVUPS(acc[r][v], m)
		}
		ADDQ(ldc, pc)
	}
	VZEROUPPER()
	RET()

	Label(s.name() + "_overwrite")
	for r := range acc {
		for v := range acc[r] {
			VMOVUPS(acc[r][v], Mem{Base: pc, Disp: 4 * v * s.width})
		}
		ADDQ(ldc, pc)
	}
	VZEROUPPER()
	RET()
}

// zero clears a register; VPXORD needs only AVX512F, VXORPS on ymm only AVX.
func zero(s kernelSpec, x reg.VecVirtual) {
	if s.isa == "avx512" {
		VPXORD(x, x, x)
		return
	}
	VXORPS(x, x, x)
}

// addr is the stack slot of a scalar parameter, for instructions that read it from memory.
func addr(name string) Mem {
	b, err := Param(name).Resolve()
	if err != nil {
		panic(err)
	}
	return b.Addr
}

// transpose4 packs four rows of a row-major matrix into 4-float groups along k: for each block
// of four columns it transposes a 4×4 tile in SSE registers, so the strided writes of packing
// (the fused transpose of A, and of B when transB) become 16-byte stores.
func transpose4() {
	TEXT("transpose4", NOSPLIT, "func(dst, src *float32, ld, width, blocks int)")
	Pragma("noescape")
	Doc("transpose4 writes dst[(4q+j)*width+i] = src[i*ld+4q+j] for rows i < 4, columns j < 4, blocks q < blocks.")
	dst := Load(Param("dst"), GP64())
	src := Load(Param("src"), GP64())
	ld := Load(Param("ld"), GP64())
	width := Load(Param("width"), GP64())
	blocks := Load(Param("blocks"), GP64())
	SHLQ(Imm(2), ld)
	SHLQ(Imm(2), width)
	src3 := GP64() // row 3 of src and column 3 of dst need a register each: scale 3 does not exist
	dst3 := GP64()
	LEAQ(Mem{Base: src, Index: ld, Scale: 2}, src3)
	ADDQ(ld, src3)
	LEAQ(Mem{Base: dst, Index: width, Scale: 2}, dst3)
	ADDQ(width, dst3)
	step := GP64()
	MOVQ(width, step)
	SHLQ(Imm(2), step)
	x := []reg.VecVirtual{XMM(), XMM(), XMM(), XMM()}
	t := []reg.VecVirtual{XMM(), XMM(), XMM(), XMM()}

	Label("transpose4_loop")
	TESTQ(blocks, blocks)
	JZ(LabelRef("transpose4_done"))
	VMOVUPS(Mem{Base: src}, x[0])
	VMOVUPS(Mem{Base: src, Index: ld, Scale: 1}, x[1])
	VMOVUPS(Mem{Base: src, Index: ld, Scale: 2}, x[2])
	VMOVUPS(Mem{Base: src3}, x[3])
	VUNPCKLPS(x[1], x[0], t[0]) // x0_0 x1_0 x0_1 x1_1
	VUNPCKHPS(x[1], x[0], t[1]) // x0_2 x1_2 x0_3 x1_3
	VUNPCKLPS(x[3], x[2], t[2])
	VUNPCKHPS(x[3], x[2], t[3])
	VUNPCKLPD(t[2], t[0], x[0]) // column 0
	VUNPCKHPD(t[2], t[0], x[1])
	VUNPCKLPD(t[3], t[1], x[2])
	VUNPCKHPD(t[3], t[1], x[3])
	VMOVUPS(x[0], Mem{Base: dst})
	VMOVUPS(x[1], Mem{Base: dst, Index: width, Scale: 1})
	VMOVUPS(x[2], Mem{Base: dst, Index: width, Scale: 2})
	VMOVUPS(x[3], Mem{Base: dst3})
	ADDQ(Imm(16), src)
	ADDQ(Imm(16), src3)
	ADDQ(step, dst)
	ADDQ(step, dst3)
	DECQ(blocks)
	JMP(LabelRef("transpose4_loop"))

	Label("transpose4_done")
	RET()
}

// copyStrided packs rows of width floats (a multiple of four) taken ld floats apart into one
// contiguous run: the packing of A when transA and of B when not transB. Go's copy pays a
// memmove call per 48- or 128-byte row, which cost a sixth of the time of a TN product.
func copyStrided() {
	TEXT("copyStrided", NOSPLIT, "func(dst, src *float32, ld, width, rows int)")
	Pragma("noescape")
	Doc("copyStrided writes dst[r*width+j] = src[r*ld+j] for r < rows, j < width; width must be a multiple of 4.")
	dst := Load(Param("dst"), GP64())
	src := Load(Param("src"), GP64())
	ld := Load(Param("ld"), GP64())
	width := Load(Param("width"), GP64())
	rows := Load(Param("rows"), GP64())
	SHLQ(Imm(2), ld)
	step := GP64()
	MOVQ(width, step)
	SHLQ(Imm(2), step)
	s, d, n := GP64(), GP64(), GP64()
	y := YMM()
	x := XMM()

	Label("copyStrided_row")
	TESTQ(rows, rows)
	JZ(LabelRef("copyStrided_done"))
	MOVQ(src, s)
	MOVQ(dst, d)
	MOVQ(width, n)
	Label("copyStrided_8")
	CMPQ(n, Imm(8))
	JL(LabelRef("copyStrided_4"))
	VMOVUPS(Mem{Base: s}, y)
	VMOVUPS(y, Mem{Base: d})
	ADDQ(Imm(32), s)
	ADDQ(Imm(32), d)
	SUBQ(Imm(8), n)
	JMP(LabelRef("copyStrided_8"))
	Label("copyStrided_4")
	CMPQ(n, Imm(4))
	JL(LabelRef("copyStrided_next"))
	VMOVUPS(Mem{Base: s}, x)
	VMOVUPS(x, Mem{Base: d})
	ADDQ(Imm(16), s)
	ADDQ(Imm(16), d)
	SUBQ(Imm(4), n)
	JMP(LabelRef("copyStrided_4"))
	Label("copyStrided_next")
	ADDQ(ld, src)
	ADDQ(step, dst)
	DECQ(rows)
	JMP(LabelRef("copyStrided_row"))

	Label("copyStrided_done")
	VZEROUPPER()
	RET()
}

// smallSpec is a family of small-m kernels: one function per row count 1..maxRows, each
// computing a rows×width block of C (width = lanes of one vector) from rows of A and width
// rows of B (B stored n×k, read in place).
type smallSpec struct {
	isa     string
	width   int
	maxRows int
}

// smallSpecs lists the small-m kernel families; kernels.smallKernels indexes them by row count.
var smallSpecs = []smallSpec{
	{"avx512", 16, 12},
	{"avx2", 8, 6},
}

func (s smallSpec) vec() reg.VecVirtual {
	if s.isa == "avx512" {
		return ZMM()
	}
	return YMM()
}

// smallNT writes sgemmSmallNT<isa>_<rows>. Per block of four k steps it loads four floats from
// each of the width rows of B (row 4q+r of the block into 128-bit lane q of register r), so a
// 4×4 transpose inside every lane leaves register e holding B[j0..j0+width][p+e]: the columns
// of op(B) in lane order, as a packed strip would hold them. The last kb%4 steps come from tail,
// a width-wide packed strip the caller fills.
func smallNT(s smallSpec, rows int) {
	name := fmt.Sprintf("sgemmSmallNT%s_%d", s.isa, rows)
	TEXT(name, NOSPLIT, "func(blocks int, a *float32, lda int, b *float32, ldb int, tail *float32, ntail int, c *float32, ldc int, alpha, beta float32)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s computes a %d×%d block C = alpha*A·Bᵀ + beta*C over 4*blocks+ntail k steps, B read in place (%s).", name, rows, s.width, s.isa))
	blocks := Load(Param("blocks"), GP64())
	lda := Load(Param("lda"), GP64())
	SHLQ(Imm(2), lda)
	lda3 := GP64()
	LEAQ(Mem{Base: lda, Index: lda, Scale: 2}, lda3)
	// Row i of A is at pa[i/4] + (i%4)*lda.
	pa := make([]reg.GPVirtual, (rows+3)/4)
	pa[0] = GP64()
	Load(Param("a"), pa[0])
	for g := 1; g < len(pa); g++ {
		pa[g] = GP64()
		LEAQ(Mem{Base: pa[g-1], Index: lda, Scale: 4}, pa[g])
	}
	arow := func(i, disp int) Mem { return rowaddr.Row(pa[i/4], lda, lda3, i%4, disp) }
	// Row 4q+r of B is at pb[q] + r*ldb.
	ldb := Load(Param("ldb"), GP64())
	SHLQ(Imm(2), ldb)
	ldb3 := GP64()
	LEAQ(Mem{Base: ldb, Index: ldb, Scale: 2}, ldb3)
	lanes := s.width / 4
	pb := make([]reg.GPVirtual, lanes)
	pb[0] = GP64()
	Load(Param("b"), pb[0])
	for q := 1; q < lanes; q++ {
		pb[q] = GP64()
		LEAQ(Mem{Base: pb[q-1], Index: ldb, Scale: 4}, pb[q])
	}
	brow := func(q, r int) Mem { return rowaddr.Row(pb[q], ldb, ldb3, r, 0) }

	acc := make([]reg.VecVirtual, rows)
	for i := range acc {
		acc[i] = s.vec()
		zero(kernelSpec{isa: s.isa}, acc[i])
	}
	x := []reg.VecVirtual{s.vec(), s.vec(), s.vec(), s.vec()}
	t := []reg.VecVirtual{s.vec(), s.vec(), s.vec(), s.vec()}
	av := s.vec()
	fmaRows := func(col reg.VecVirtual, disp int) {
		for i := range acc {
			VBROADCASTSS(arow(i, disp), av)
			VFMADD231PS(col, av, acc[i])
		}
	}

	Label(name + "_loop")
	TESTQ(blocks, blocks)
	JZ(LabelRef(name + "_tail"))
	for r := 0; r < 4; r++ {
		VMOVUPS(brow(0, r), x[r].AsX())
		for q := 1; q < lanes; q++ {
			if s.isa == "avx512" {
				VINSERTF32X4(Imm(uint64(q)), brow(q, r), x[r], x[r])
			} else {
				VINSERTF128(Imm(uint64(q)), brow(q, r), x[r], x[r])
			}
		}
	}
	VUNPCKLPS(x[1], x[0], t[0]) // b0_0 b1_0 b0_1 b1_1 in every lane
	VUNPCKHPS(x[1], x[0], t[1]) // b0_2 b1_2 b0_3 b1_3
	VUNPCKLPS(x[3], x[2], t[2])
	VUNPCKHPS(x[3], x[2], t[3])
	VUNPCKLPD(t[2], t[0], x[0]) // k step 0
	VUNPCKHPD(t[2], t[0], x[1])
	VUNPCKLPD(t[3], t[1], x[2])
	VUNPCKHPD(t[3], t[1], x[3])
	for e := 0; e < 4; e++ {
		fmaRows(x[e], 4*e)
	}
	for _, p := range pa {
		ADDQ(Imm(16), p)
	}
	for _, p := range pb {
		ADDQ(Imm(16), p)
	}
	DECQ(blocks)
	JMP(LabelRef(name + "_loop"))

	Label(name + "_tail")
	ptail := Load(Param("tail"), GP64())
	ntail := Load(Param("ntail"), GP64())
	Label(name + "_tailloop")
	TESTQ(ntail, ntail)
	JZ(LabelRef(name + "_store"))
	VMOVUPS(Mem{Base: ptail}, x[0])
	fmaRows(x[0], 0)
	for _, p := range pa {
		ADDQ(Imm(4), p)
	}
	ADDQ(U32(4*s.width), ptail)
	DECQ(ntail)
	JMP(LabelRef(name + "_tailloop"))

	Label(name + "_store")
	pc := Load(Param("c"), GP64())
	ldc := Load(Param("ldc"), GP64())
	SHLQ(Imm(2), ldc)
	alpha := s.vec()
	VBROADCASTSS(addr("alpha"), alpha)
	for i := range acc {
		VMULPS(alpha, acc[i], acc[i])
	}
	betaBits := GP32()
	MOVL(addr("beta"), betaBits)
	ANDL(U32(0x7fffffff), betaBits)
	JZ(LabelRef(name + "_overwrite"))
	beta := s.vec()
	VBROADCASTSS(addr("beta"), beta)
	for i := range acc {
		VFMADD231PS(Mem{Base: pc}, beta, acc[i])
		VMOVUPS(acc[i], Mem{Base: pc})
		ADDQ(ldc, pc)
	}
	VZEROUPPER()
	RET()

	Label(name + "_overwrite")
	for i := range acc {
		VMOVUPS(acc[i], Mem{Base: pc})
		ADDQ(ldc, pc)
	}
	VZEROUPPER()
	RET()
}

// smallNN writes sgemmSmallNN<isa>_<rows>: a rows×nr block C = alpha*A·B + beta*C with the tile
// width of the blocked kernel s, A read in place (rows lda floats apart) and B read in place
// (kb rows of nr floats, ldb floats apart). Per k step it loads one row of B and broadcasts one
// element of every row of A, exactly as the blocked kernel does from its packed strips, so
// every element of C gets the same FMA chain and the same store.
//
// With prefetch it is sgemmSmallNNPF<isa>_<rows>, which also takes pfd, a distance in bytes, and
// asks for every line of B it reads again pfd bytes further on (PREFETCHT1): SgemmPacked passes
// one k slice of a packed panel, so that the rows of a product beyond the first pass keep the
// next slice coming from memory while they run on the one already in cache. A prefetch never
// faults, so the distance may reach past the end of B. The arithmetic is smallNN's.
func smallNN(s kernelSpec, rows int, prefetch bool) {
	name := fmt.Sprintf("sgemmSmallNN%s_%d", s.isa, rows)
	sig := "func(kb int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int, alpha, beta float32)"
	doc := fmt.Sprintf("%s computes a %d×%d block C = alpha*A·B + beta*C over kb k steps, A and B read in place (%s).", name, rows, s.nr(), s.isa)
	if prefetch {
		name = fmt.Sprintf("sgemmSmallNNPF%s_%d", s.isa, rows)
		sig = "func(kb int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int, alpha, beta float32, pfd int)"
		doc = fmt.Sprintf("%s is sgemmSmallNN%s_%d that also prefetches every line of B it reads pfd bytes further on.", name, s.isa, rows)
	}
	TEXT(name, NOSPLIT, sig)
	Pragma("noescape")
	Doc(doc)
	kb := Load(Param("kb"), GP64())
	lda := Load(Param("lda"), GP64())
	SHLQ(Imm(2), lda)
	lda3 := GP64()
	LEAQ(Mem{Base: lda, Index: lda, Scale: 2}, lda3)
	pa := make([]reg.GPVirtual, (rows+3)/4)
	pa[0] = GP64()
	Load(Param("a"), pa[0])
	for g := 1; g < len(pa); g++ {
		pa[g] = GP64()
		LEAQ(Mem{Base: pa[g-1], Index: lda, Scale: 4}, pa[g])
	}
	arow := func(i, disp int) Mem { return rowaddr.Row(pa[i/4], lda, lda3, i%4, disp) }
	pb := Load(Param("b"), GP64())
	ldb := Load(Param("ldb"), GP64())
	SHLQ(Imm(2), ldb)
	ldb3 := GP64()
	LEAQ(Mem{Base: ldb, Index: ldb, Scale: 2}, ldb3)
	brow := func(u, v int) Mem { return rowaddr.Row(pb, ldb, ldb3, u, 4*v*s.width) }

	// ppf runs pfd bytes ahead of pb.
	var ppf reg.GPVirtual
	if prefetch {
		ppf = GP64()
		Load(Param("pfd"), ppf)
		ADDQ(pb, ppf)
	}
	pfrow := func(u, v int) Mem {
		m := brow(u, v)
		m.Base = ppf
		return m
	}

	acc := make([][]reg.VecVirtual, rows)
	for i := range acc {
		acc[i] = make([]reg.VecVirtual, s.nvec)
		for v := range acc[i] {
			acc[i][v] = s.vec()
			zero(s, acc[i][v])
		}
	}
	bv := make([]reg.VecVirtual, s.nvec)
	for v := range bv {
		bv[v] = s.vec()
	}
	av := s.vec()
	step := func(u int) {
		for v := range bv {
			VMOVUPS(brow(u, v), bv[v])
		}
		if prefetch {
			// One prefetch per 64-byte line of the row: a vector of 16 floats or two of 8.
			for v := 0; v < s.nvec; v += max(1, 16/s.width) {
				PREFETCHT1(pfrow(u, v))
			}
		}
		for i := range acc {
			VBROADCASTSS(arow(i, 4*u), av)
			for v := range bv {
				VFMADD231PS(bv[v], av, acc[i][v])
			}
		}
	}

	Label(name + "_loop")
	CMPQ(kb, Imm(unroll))
	JL(LabelRef(name + "_tail"))
	for u := 0; u < unroll; u++ {
		step(u)
	}
	for _, p := range pa {
		ADDQ(Imm(4*unroll), p)
	}
	LEAQ(Mem{Base: pb, Index: ldb, Scale: 4}, pb)
	if prefetch {
		LEAQ(Mem{Base: ppf, Index: ldb, Scale: 4}, ppf)
	}
	SUBQ(Imm(unroll), kb)
	JMP(LabelRef(name + "_loop"))

	Label(name + "_tail")
	TESTQ(kb, kb)
	JZ(LabelRef(name + "_store"))
	step(0)
	for _, p := range pa {
		ADDQ(Imm(4), p)
	}
	ADDQ(ldb, pb)
	if prefetch {
		ADDQ(ldb, ppf)
	}
	DECQ(kb)
	JMP(LabelRef(name + "_tail"))

	Label(name + "_store")
	pc := Load(Param("c"), GP64())
	ldc := Load(Param("ldc"), GP64())
	SHLQ(Imm(2), ldc)
	alpha := s.vec()
	VBROADCASTSS(addr("alpha"), alpha)
	for i := range acc {
		for v := range acc[i] {
			VMULPS(alpha, acc[i][v], acc[i][v])
		}
	}
	betaBits := GP32()
	MOVL(addr("beta"), betaBits)
	ANDL(U32(0x7fffffff), betaBits)
	JZ(LabelRef(name + "_overwrite"))
	beta := s.vec()
	VBROADCASTSS(addr("beta"), beta)
	for i := range acc {
		for v := range acc[i] {
			m := Mem{Base: pc, Disp: 4 * v * s.width}
			VFMADD231PS(m, beta, acc[i][v])
			VMOVUPS(acc[i][v], m)
		}
		ADDQ(ldc, pc)
	}
	VZEROUPPER()
	RET()

	Label(name + "_overwrite")
	for i := range acc {
		for v := range acc[i] {
			VMOVUPS(acc[i][v], Mem{Base: pc, Disp: 4 * v * s.width})
		}
		ADDQ(ldc, pc)
	}
	VZEROUPPER()
	RET()
}

// gemvPanels lists, per instruction set, the panel counts of the gemv kernels written, widest
// first: 8 panels (16 zmm chains) or 6 (12 ymm chains) at once, and the narrower ones for the
// panels left over.
var gemvPanels = map[string][]int{
	"avx512": {8, 4, 2},
	"avx2":   {6, 4, 2},
}

// gemv writes sgemvPacked<isa>_<panels>: one row of C = alpha*a·B + beta*C over panels
// consecutive nr-wide panels of a packed weight (kernels.PackedWeights: panel q at b + q*ldp
// floats, kb rows of nr floats each), the matrix-vector product of a batch-1 decode step. Each
// column gets exactly smallNN's operations for one row (one FMA chain from zero over the k steps
// in order, then the same alpha/beta store), but panels·nvec chains run side by side where
// smallNN's one row has nvec: a chain waits on its FMA's latency every step, so one panel at a
// time leaves most of the FMA ports idle and an L2-resident weight streams at a fraction of what
// the L2 delivers. B is read by the FMAs themselves (memory operands), so no register holds it,
// and without software prefetch: the hardware prefetchers follow the panels' streams (a
// PREFETCHT0 0.25–4 KiB ahead measured no faster, and up to 30% slower in some runs).
func gemv(s kernelSpec, panels int) {
	name := fmt.Sprintf("sgemvPacked%s_%d", s.isa, panels)
	TEXT(name, NOSPLIT, "func(kb int, a *float32, b *float32, ldp int, c *float32, alpha, beta float32)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s computes C[0:%d] = alpha*a·B + beta*C over kb k steps from %d packed panels of B, ldp floats apart (%s).", name, panels*s.nr(), panels, s.isa))
	kb := Load(Param("kb"), GP64())
	pa := Load(Param("a"), GP64())
	ldp := Load(Param("ldp"), GP64())
	SHLQ(Imm(2), ldp)
	pb := make([]reg.GPVirtual, panels)
	pb[0] = GP64()
	Load(Param("b"), pb[0])
	for q := 1; q < panels; q++ {
		pb[q] = GP64()
		LEAQ(Mem{Base: pb[q-1], Index: ldp, Scale: 1}, pb[q])
	}
	acc := make([][]reg.VecVirtual, panels)
	for q := range acc {
		acc[q] = make([]reg.VecVirtual, s.nvec)
		for v := range acc[q] {
			acc[q][v] = s.vec()
			zero(s, acc[q][v])
		}
	}
	av := s.vec()
	step := func(u int) {
		VBROADCASTSS(Mem{Base: pa, Disp: 4 * u}, av)
		for q := range acc {
			for v := range acc[q] {
				VFMADD231PS(Mem{Base: pb[q], Disp: 4 * (u*s.nr() + v*s.width)}, av, acc[q][v])
			}
		}
	}

	Label(name + "_loop")
	CMPQ(kb, Imm(unroll))
	JL(LabelRef(name + "_tail"))
	for u := 0; u < unroll; u++ {
		step(u)
	}
	ADDQ(Imm(4*unroll), pa)
	for _, p := range pb {
		ADDQ(U32(4*unroll*s.nr()), p)
	}
	SUBQ(Imm(unroll), kb)
	JMP(LabelRef(name + "_loop"))

	Label(name + "_tail")
	TESTQ(kb, kb)
	JZ(LabelRef(name + "_store"))
	step(0)
	ADDQ(Imm(4), pa)
	for _, p := range pb {
		ADDQ(U32(4*s.nr()), p)
	}
	DECQ(kb)
	JMP(LabelRef(name + "_tail"))

	Label(name + "_store")
	pc := Load(Param("c"), GP64())
	alpha := s.vec()
	VBROADCASTSS(addr("alpha"), alpha)
	for q := range acc {
		for v := range acc[q] {
			VMULPS(alpha, acc[q][v], acc[q][v])
		}
	}
	cmem := func(q, v int) Mem { return Mem{Base: pc, Disp: 4 * (q*s.nr() + v*s.width)} }
	betaBits := GP32()
	MOVL(addr("beta"), betaBits)
	ANDL(U32(0x7fffffff), betaBits)
	JZ(LabelRef(name + "_overwrite"))
	beta := s.vec()
	VBROADCASTSS(addr("beta"), beta)
	for q := range acc {
		for v := range acc[q] {
			VFMADD231PS(cmem(q, v), beta, acc[q][v])
			VMOVUPS(acc[q][v], cmem(q, v))
		}
	}
	VZEROUPPER()
	RET()

	Label(name + "_overwrite")
	for q := range acc {
		for v := range acc[q] {
			VMOVUPS(acc[q][v], cmem(q, v))
		}
	}
	VZEROUPPER()
	RET()
}
