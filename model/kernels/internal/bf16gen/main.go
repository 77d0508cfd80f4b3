// Command bf16gen writes the amd64 assembly of the bfloat16-weight decode kernels
// (kernels.SgemmBF16, bf16_amd64.s) with avo. Run it through `go generate` in model/kernels; the
// generated file and its Go declarations are committed, so building the package needs neither
// avo nor this command.
//
// The kernels multiply float32 activations by a weight stored as bfloat16 (uint16, the upper
// half of a float32), packed into panels of width columns (kernels.PackedBF16: k rows of width
// values each). Every weight is widened to float32 in registers (VPMOVZXWD puts each 16-bit
// value in the low half of a 32-bit lane, VPSLLD $16 moves it to the upper half, which is its
// float32) and the products are summed in float32 with FMAs: the rounding of the weights is the
// only difference from the float32 path. AVX512_BF16's VDPBF16PS would also round the
// activations and sum pairs before accumulating, so it is not used.
//
// Every element of C gets one FMA chain from zero over all k steps in order, then C =
// alpha*acc + beta*C (beta == 0, of either sign, stores without reading C), in the multi-row
// kernels (bf16NN) and in the one-row kernels over several panels (bf16Gemv) alike: a row's
// result does not depend on how many rows share the call or on which kernel ran it.
package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"

	"github.com/agentrl/agentrl/model/kernels/internal/rowaddr"
)

// family is the kernels of one instruction set: a panel is nvec vectors of lanes floats wide.
type family struct {
	isa     string // "avx512" (zmm, 32 registers; VPMOVZXWD on zmm needs AVX512BW) or "avx2" (ymm with FMA)
	lanes   int    // floats per vector
	nvec    int    // vectors per panel row
	maxRows int    // rows of the largest bf16NN kernel
	gemv    []int  // panel counts of the bf16Gemv kernels, widest first
}

func (f family) width() int { return f.lanes * f.nvec }

func (f family) vec() reg.VecVirtual {
	if f.isa == "avx512" {
		return ZMM()
	}
	return YMM()
}

// families lists every family written to the .s file; kernels.bf16Families picks among them.
// The rows and panels fill the register file as gemmgen's smallNN and gemv do: 12×2 zmm
// accumulators (6×2 ymm), or 8×2 zmm (6×2 ymm) chains for one row, beside the widened weights
// and the broadcast activation.
var families = []family{
	{isa: "avx512", lanes: 16, nvec: 2, maxRows: 12, gemv: []int{8, 4, 2}},
	{isa: "avx2", lanes: 8, nvec: 2, maxRows: 6, gemv: []int{6, 4, 2}},
}

// unroll is how many k steps one loop iteration does; the remainder runs one step at a time.
const unroll = 4

func main() {
	ConstraintExpr("amd64,!purego")
	for _, f := range families {
		for rows := 1; rows <= f.maxRows; rows++ {
			nn(f, rows)
		}
	}
	for _, f := range families {
		for _, p := range f.gemv {
			gemv(f, p)
		}
	}
	Generate()
}

// widen loads lanes bfloat16 values at m into x as float32.
func widen(m Mem, x reg.VecVirtual) {
	VPMOVZXWD(m, x)
	VPSLLD(Imm(16), x, x)
}

// zero clears a register; VPXORD needs only AVX512F, VXORPS on ymm only AVX.
func zero(f family, x reg.VecVirtual) {
	if f.isa == "avx512" {
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

// store writes C = alpha*acc + beta*C for the accumulators, cmem giving the address of each;
// beta == 0 and beta == -0 both overwrite C without reading it.
func store(f family, name string, acc [][]reg.VecVirtual, cmem func(i, v int) Mem, nextRow func()) {
	alpha := f.vec()
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
	beta := f.vec()
	VBROADCASTSS(addr("beta"), beta)
	for i := range acc {
		for v := range acc[i] {
			VFMADD231PS(cmem(i, v), beta, acc[i][v])
			VMOVUPS(acc[i][v], cmem(i, v))
		}
		nextRow()
	}
	VZEROUPPER()
	RET()

	Label(name + "_overwrite")
	for i := range acc {
		for v := range acc[i] {
			VMOVUPS(acc[i][v], cmem(i, v))
		}
		nextRow()
	}
	VZEROUPPER()
	RET()
}

// nn writes bf16NN<isa>_<rows>: a rows×width block C = alpha*A·B + beta*C over kb k steps, A
// float32 read in place (rows lda floats apart), B bfloat16 read in place (kb rows of width
// values, ldb values apart): a packed panel of kernels.PackedBF16, or a block of a bfloat16 KV
// cache. Per k step it widens one row of B and broadcasts one element of every row of A.
func nn(f family, rows int) {
	name := fmt.Sprintf("bf16NN%s_%d", f.isa, rows)
	TEXT(name, NOSPLIT, "func(kb int, a *float32, lda int, b *uint16, ldb int, c *float32, ldc int, alpha, beta float32)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s computes a %d×%d block C = alpha*A·B + beta*C over kb k steps, A float32 and B bfloat16 read in place (%s).", name, rows, f.width(), f.isa))
	kb := Load(Param("kb"), GP64())
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
	pb := Load(Param("b"), GP64())
	ldb := Load(Param("ldb"), GP64())
	SHLQ(Imm(1), ldb)
	ldb3 := GP64()
	LEAQ(Mem{Base: ldb, Index: ldb, Scale: 2}, ldb3)
	brow := func(u, v int) Mem { return rowaddr.Row(pb, ldb, ldb3, u, 2*v*f.lanes) }

	acc := make([][]reg.VecVirtual, rows)
	for i := range acc {
		acc[i] = make([]reg.VecVirtual, f.nvec)
		for v := range acc[i] {
			acc[i][v] = f.vec()
			zero(f, acc[i][v])
		}
	}
	bv := make([]reg.VecVirtual, f.nvec)
	for v := range bv {
		bv[v] = f.vec()
	}
	av := f.vec()
	step := func(u int) {
		for v := range bv {
			widen(brow(u, v), bv[v])
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
	DECQ(kb)
	JMP(LabelRef(name + "_tail"))

	Label(name + "_store")
	pc := Load(Param("c"), GP64())
	ldc := Load(Param("ldc"), GP64())
	SHLQ(Imm(2), ldc)
	store(f, name, acc, func(_, v int) Mem { return Mem{Base: pc, Disp: 4 * v * f.lanes} }, func() { ADDQ(ldc, pc) })
}

// gemv writes bf16Gemv<isa>_<panels>: one row of C = alpha*a·B + beta*C over panels consecutive
// width-wide bfloat16 panels (panel q at b + q*ldp values, kb rows of width values each), the
// matrix-vector product of a batch-1 decode step. Each column gets exactly nn's operations for
// one row, with panels·nvec chains in flight instead of nvec, so that the widening and the FMAs
// of different panels overlap and the weights stream at the memory's pace.
func gemv(f family, panels int) {
	name := fmt.Sprintf("bf16Gemv%s_%d", f.isa, panels)
	TEXT(name, NOSPLIT, "func(kb int, a *float32, b *uint16, ldp int, c *float32, alpha, beta float32)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s computes C[0:%d] = alpha*a·B + beta*C over kb k steps from %d bfloat16 panels of B, ldp values apart (%s).", name, panels*f.width(), panels, f.isa))
	kb := Load(Param("kb"), GP64())
	pa := Load(Param("a"), GP64())
	ldp := Load(Param("ldp"), GP64())
	SHLQ(Imm(1), ldp)
	pb := make([]reg.GPVirtual, panels)
	pb[0] = GP64()
	Load(Param("b"), pb[0])
	for q := 1; q < panels; q++ {
		pb[q] = GP64()
		LEAQ(Mem{Base: pb[q-1], Index: ldp, Scale: 1}, pb[q])
	}
	acc := make([][]reg.VecVirtual, panels)
	for q := range acc {
		acc[q] = make([]reg.VecVirtual, f.nvec)
		for v := range acc[q] {
			acc[q][v] = f.vec()
			zero(f, acc[q][v])
		}
	}
	// Two widened weights in turn: the renamer gives every load its own register anyway, and
	// two leave the allocator room on AVX2's sixteen.
	tmp := []reg.VecVirtual{f.vec(), f.vec()}
	av := f.vec()
	step := func(u int) {
		VBROADCASTSS(Mem{Base: pa, Disp: 4 * u}, av)
		t := 0
		for q := range acc {
			for v := range acc[q] {
				x := tmp[t%len(tmp)]
				t++
				widen(Mem{Base: pb[q], Disp: 2 * (u*f.width() + v*f.lanes)}, x)
				VFMADD231PS(x, av, acc[q][v])
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
		ADDQ(U32(2*unroll*f.width()), p)
	}
	SUBQ(Imm(unroll), kb)
	JMP(LabelRef(name + "_loop"))

	Label(name + "_tail")
	TESTQ(kb, kb)
	JZ(LabelRef(name + "_store"))
	step(0)
	ADDQ(Imm(4), pa)
	for _, p := range pb {
		ADDQ(U32(2*f.width()), p)
	}
	DECQ(kb)
	JMP(LabelRef(name + "_tail"))

	Label(name + "_store")
	pc := Load(Param("c"), GP64())
	store(f, name, acc, func(q, v int) Mem { return Mem{Base: pc, Disp: 4 * (q*f.width() + v*f.lanes)} }, func() {})
}
