// Command elemgen writes the amd64 assembly of the elementwise kernels (elem_amd64.s) with avo:
// the exponential of softmax and the SiLU of SwiGLU, the row work of RMSNorm and RoPE, and AdamW's update. Run it through `go generate` in
// model/kernels; the generated file and its Go declarations are committed.
//
// Every kernel reproduces the Go code of elem_go.go bit for bit: the exponential is expf's
// range reduction and polynomial with each product rounded before the add that follows it
// (VMULPS then VADDPS, no FMA, as expf's explicit float32 conversions demand), the scaling by
// 2^n an integer add to the exponent bits, and the special cases blended in at the end. Rows
// are processed sixteen floats at a time, one zmm or two ymm, so that the sixteen partial sums
// of expSum are the same lanes on both; the last partial block is loaded and stored under a
// mask (a k register, or VMASKMOVPS) and adds nothing to the lanes it does not cover.
package main

import (
	"fmt"
	"math"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"

	"github.com/agentrl/agentrl/model/kernels/internal/rowaddr"
)

// The constants of kernels.expf, spelled the same way so that they round to the same float32.
const (
	expLn2Hi = 0.693359375
	expLn2Lo = -2.12194440e-4
	expLog2e = 1.44269504088896341
	expHi    = 88.3762626647949
	expLo    = -87.3365447505531
	expC0    = 1.9875691500e-4
	expC1    = 1.3981999507e-3
	expC2    = 8.3334519073e-3
	expC3    = 4.1665795894e-2
	expC4    = 1.6666665459e-1
	expC5    = 5.0000001201e-1
)

// block is the number of floats one loop step handles on either ISA.
const block = 16

type isa struct {
	name   string // "avx512" or "avx2"
	width  int    // floats per vector register
	consts map[string]reg.VecVirtual
	masks  []reg.Register // the tail's masks: one k register, or one ymm per half block
}

func (s *isa) vec() reg.VecVirtual {
	if s.name == "avx512" {
		return ZMM()
	}
	return YMM()
}

// constant names, in their order in the elemconsts table (32 bytes each).
var constNames = []string{"log2e", "half", "ln2hi", "ln2lo", "c0", "c1", "c2", "c3", "c4", "c5", "one", "hi", "lo", "inf", "sign", "neginf"}

func constBits(name string) uint32 {
	f := map[string]float32{
		"log2e": expLog2e, "half": 0.5, "ln2hi": expLn2Hi, "ln2lo": expLn2Lo,
		"c0": expC0, "c1": expC1, "c2": expC2, "c3": expC3, "c4": expC4, "c5": expC5,
		"one": 1, "hi": expHi, "lo": expLo,
	}
	switch name {
	case "inf":
		return math.Float32bits(float32(math.Inf(1)))
	case "sign":
		return 0x80000000
	case "neginf":
		return math.Float32bits(float32(math.Inf(-1)))
	}
	v, ok := f[name]
	if !ok {
		panic(name)
	}
	return math.Float32bits(v)
}

var consts, tailMask512, tailMask256 Mem

func main() {
	ConstraintExpr("amd64,!purego")
	consts = GLOBL("elemconsts", RODATA|NOPTR)
	for i, name := range constNames {
		for l := 0; l < 8; l++ {
			DATA(32*i+4*l, U32(constBits(name)))
		}
	}
	// tailMask512[t] has the low t bits set; tailMask256[t] is 16 int32 lanes, the first t all ones.
	tailMask512 = GLOBL("elemtailmask512", RODATA|NOPTR)
	for t := 0; t < block; t++ {
		DATA(2*t, U16(uint16(1)<<t-1))
	}
	tailMask256 = GLOBL("elemtailmask256", RODATA|NOPTR)
	for t := 0; t < block; t++ {
		for l := 0; l < block; l++ {
			v := uint32(0)
			if l < t {
				v = 0xffffffff
			}
			DATA(4*(block*t+l), U32(v))
		}
	}
	for _, name := range []string{"avx512", "avx2"} {
		width := 16
		if name == "avx2" {
			width = 8
		}
		expSum(&isa{name: name, width: width})
		swigluForward(&isa{name: name, width: width})
		swigluBackward(&isa{name: name, width: width}, false)
		swigluBackward(&isa{name: name, width: width}, true)
		maxFinite(&isa{name: name, width: width})
		scale(&isa{name: name, width: width})
		readStream(&isa{name: name, width: width})
		softmaxGrad(&isa{name: name, width: width})
		expMoments(&isa{name: name, width: width})
		rmsScale(&isa{name: name, width: width})
		rmsBackward(&isa{name: name, width: width})
		rowSums(&isa{name: name, width: width}, true)
		rowSums(&isa{name: name, width: width}, false)
		rope(&isa{name: name, width: width}, false)
		rope(&isa{name: name, width: width}, true)
		adamW(&isa{name: name, width: width})
	}
	cpuid()
	Generate()
}

// c is a constant as an operand: a register holding it broadcast (AVX-512, 32 registers), or
// its 32-byte row of elemconsts (AVX2, where registers are scarce).
func (s *isa) c(name string) Op {
	if s.name == "avx512" {
		r, ok := s.consts[name]
		if !ok {
			r = ZMM()
			VBROADCASTSS(s.constMem(name), r)
			s.consts[name] = r
		}
		return r
	}
	return s.constMem(name)
}

func (s *isa) constMem(name string) Mem {
	for i, n := range constNames {
		if n == name {
			return consts.Offset(32 * i)
		}
	}
	panic(name)
}

// loadConsts broadcasts every constant a kernel uses before its loop (AVX-512 only).
func (s *isa) loadConsts(names ...string) {
	s.consts = map[string]reg.VecVirtual{}
	if s.name == "avx512" {
		for _, n := range names {
			s.c(n)
		}
	}
}

// setTailMasks loads the masks for the last t < 16 floats.
func (s *isa) setTailMasks(t reg.GPVirtual) {
	tbl := GP64()
	if s.name == "avx512" {
		LEAQ(tailMask512, tbl)
		k := K()
		KMOVW(Mem{Base: tbl, Index: t, Scale: 2}, k)
		s.masks = []reg.Register{k}
		return
	}
	LEAQ(tailMask256, tbl)
	SHLQ(Imm(6), t)
	s.masks = nil
	for h := 0; h < block/s.width; h++ {
		m := YMM()
		VMOVDQU(Mem{Base: tbl, Index: t, Disp: 32 * h, Scale: 1}, m)
		s.masks = append(s.masks, m)
	}
}

// load reads vector h of the block at p, under the tail mask when masked.
func (s *isa) load(p reg.Register, h int, masked bool) reg.VecVirtual {
	x := s.vec()
	m := Mem{Base: p, Disp: 4 * h * s.width}
	switch {
	case !masked:
		VMOVUPS(m, x)
	case s.name == "avx512":
		VMOVUPS_Z(m, s.masks[0], x)
	default:
		VMASKMOVPS(m, s.masks[h], x)
	}
	return x
}

func (s *isa) store(x reg.Register, p reg.Register, h int, masked bool) {
	m := Mem{Base: p, Disp: 4 * h * s.width}
	switch {
	case !masked:
		VMOVUPS(x, m)
	case s.name == "avx512":
		VMOVUPS(x, s.masks[0], m)
	default:
		VMASKMOVPS(x, s.masks[h], m)
	}
}

// exp returns a new register with expf of every lane of x (x is left as it was).
func (s *isa) exp(x reg.VecVirtual) reg.VecVirtual {
	t, n, r, a, p := s.vec(), s.vec(), s.vec(), s.vec(), s.vec()
	// n = floor(x·log2e + 0.5)
	VMULPS(s.c("log2e"), x, t)
	VADDPS(s.c("half"), t, t)
	if s.name == "avx512" {
		VRNDSCALEPS(Imm(1), t, n)
	} else {
		VROUNDPS(Imm(1), t, n)
	}
	// r = x − n·ln2hi − n·ln2lo
	VMULPS(s.c("ln2hi"), n, a)
	VSUBPS(a, x, r)
	VMULPS(s.c("ln2lo"), n, a)
	VSUBPS(a, r, r)
	// p = ((((c0·r + c1)·r + c2)·r + c3)·r + c4)·r + c5
	VMULPS(s.c("c0"), r, p)
	for _, c := range []string{"c1", "c2", "c3", "c4"} {
		VADDPS(s.c(c), p, p)
		VMULPS(r, p, p)
	}
	VADDPS(s.c("c5"), p, p)
	// y = p·r·r + r + 1, then 2^n into the exponent
	VMULPS(r, p, p)
	VMULPS(r, p, p)
	VADDPS(r, p, p)
	VADDPS(s.c("one"), p, p)
	VCVTTPS2DQ(n, n)
	VPSLLD(Imm(23), n, n)
	VPADDD(n, p, p)
	// x > hi → +Inf; x < lo → 0; NaN → x. (VCMPPS predicates: 0x1e GT_OQ, 0x11 LT_OQ, 3 UNORD_Q.)
	if s.name == "avx512" {
		k := K()
		VCMPPS(Imm(0x1e), s.c("hi"), x, k)
		VMOVAPS(s.c("inf"), k, p)
		VCMPPS(Imm(0x11), s.c("lo"), x, k)
		zero := s.vec()
		VPXORD(zero, zero, zero)
		VMOVAPS(zero, k, p)
		VCMPPS(Imm(3), x, x, k)
		VMOVAPS(x, k, p)
		return p
	}
	m := s.vec()
	VCMPPS(Imm(0x1e), s.c("hi"), x, m)
	VBLENDVPS(m, s.c("inf"), p, p)
	VCMPPS(Imm(0x11), s.c("lo"), x, m)
	VANDNPS(p, m, p)
	VCMPPS(Imm(3), x, x, m)
	VBLENDVPS(m, x, p, p)
	return p
}

// loop emits the block loop over n floats: body(masked) handles one block of 16 and advances
// nothing; loop moves the pointers ptrs on by a block after each full one.
func (s *isa) loop(name string, n reg.GPVirtual, ptrs []reg.GPVirtual, body func(masked bool)) {
	Label(name + "_loop")
	CMPQ(n, Imm(block))
	JB(LabelRef(name + "_tail"))
	body(false)
	for _, p := range ptrs {
		ADDQ(Imm(4*block), p)
	}
	SUBQ(Imm(block), n)
	JMP(LabelRef(name + "_loop"))

	Label(name + "_tail")
	TESTQ(n, n)
	JZ(LabelRef(name + "_done"))
	s.setTailMasks(n)
	body(true)
	Label(name + "_done")
}

func expSum(s *isa) {
	name := "expSum" + s.name
	TEXT(name, NOSPLIT, "func(dst, src *float32, n int, shift float32) float32")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s writes dst[i] = expf(src[i] - shift) for i < n and returns their sum in expSumGo's order (%s).", name, s.name))
	dst := Load(Param("dst"), GP64())
	src := Load(Param("src"), GP64())
	n := Load(Param("n"), GP64())
	s.loadConsts("log2e", "half", "ln2hi", "ln2lo", "c0", "c1", "c2", "c3", "c4", "c5", "one", "hi", "lo", "inf")
	shift := s.vec()
	VBROADCASTSS(addr("shift"), shift)
	halves := block / s.width
	acc := make([]reg.VecVirtual, halves)
	for h := range acc {
		acc[h] = s.vec()
		VXORPS(acc[h].AsY(), acc[h].AsY(), acc[h].AsY()) // clears the whole zmm as well
	}
	s.loop(name, n.(reg.GPVirtual), []reg.GPVirtual{dst.(reg.GPVirtual), src.(reg.GPVirtual)}, func(masked bool) {
		for h := 0; h < halves; h++ {
			x := s.load(src, h, masked)
			VSUBPS(shift, x, x)
			e := s.exp(x)
			s.store(e, dst, h, masked)
			switch {
			case !masked:
				VADDPS(e, acc[h], acc[h])
			case s.name == "avx512":
				VADDPS(e, acc[h], s.masks[0], acc[h])
			default:
				// Lanes past the end add +0, which leaves a sum of exponentials unchanged.
				VANDPS(s.masks[h], e, e)
				VADDPS(e, acc[h], acc[h])
			}
		}
	})
	// Pairwise: lanes l += l+8, l += l+4, l += l+2, l += l+1.
	lo := acc[0].AsY().(reg.VecVirtual)
	if s.name == "avx512" {
		hi := YMM()
		VEXTRACTF64X4(Imm(1), acc[0], hi)
		VADDPS(hi, lo, lo)
	} else {
		VADDPS(acc[1], lo, lo)
	}
	x, t := lo.AsX(), XMM()
	VEXTRACTF128(Imm(1), lo, t)
	VADDPS(t, x, x)
	VMOVHLPS(x, x, t)
	VADDPS(t, x, x)
	VMOVSHDUP(x, t)
	VADDSS(t, x, x)
	Store(x, ReturnIndex(0))
	VZEROUPPER()
	RET()
}

func swigluForward(s *isa) {
	name := "swigluForward" + s.name
	TEXT(name, NOSPLIT, "func(out, gate, up *float32, n int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s writes out[j] = gate[j]/(1 + expf(-gate[j]))·up[j] for j < n (%s).", name, s.name))
	out := Load(Param("out"), GP64())
	g := Load(Param("gate"), GP64()) // "g" would name the goroutine register
	u := Load(Param("up"), GP64())
	n := Load(Param("n"), GP64())
	s.loadConsts(constNames[:len(constNames)-1]...)
	ptrs := []reg.GPVirtual{out.(reg.GPVirtual), g.(reg.GPVirtual), u.(reg.GPVirtual)}
	s.loop(name, n.(reg.GPVirtual), ptrs, func(masked bool) {
		for h := 0; h < block/s.width; h++ {
			gv := s.load(g, h, masked)
			x := s.vec()
			s.negate(gv, x)
			e := s.exp(x)
			VADDPS(s.c("one"), e, e)
			VDIVPS(e, gv, e)
			uv := s.load(u, h, masked)
			VMULPS(uv, e, e)
			s.store(e, out, h, masked)
		}
	})
	VZEROUPPER()
	RET()
}

// swigluBackward emits the gradient of swigluForward, added to dg and du, or with set written
// over them as +0 plus the gradient (the bits of clearing them first and adding), without
// reading them.
func swigluBackward(s *isa, set bool) {
	name := "swigluBackward" + s.name
	doc := "%s adds to dg and du the gradient of swigluForward%s given dy, for j < n (%s)."
	if set {
		name = "swigluBackwardSet" + s.name
		doc = "%s sets dg and du to +0 plus the gradient of swigluForward%s given dy, for j < n (%s)."
	}
	TEXT(name, NOSPLIT, "func(dg, du, dy, gate, up *float32, n int)")
	Pragma("noescape")
	Doc(fmt.Sprintf(doc, name, s.name, s.name))
	dg := Load(Param("dg"), GP64())
	du := Load(Param("du"), GP64())
	dy := Load(Param("dy"), GP64())
	g := Load(Param("gate"), GP64()) // "g" would name the goroutine register
	u := Load(Param("up"), GP64())
	n := Load(Param("n"), GP64())
	s.loadConsts(constNames[:len(constNames)-1]...)
	var ptrs []reg.GPVirtual
	for _, p := range []reg.Register{dg, du, dy, g, u} {
		ptrs = append(ptrs, p.(reg.GPVirtual))
	}
	s.loop(name, n.(reg.GPVirtual), ptrs, func(masked bool) {
		for h := 0; h < block/s.width; h++ {
			gv := s.load(g, h, masked)
			x := s.vec()
			s.negate(gv, x)
			e := s.exp(x)
			// sv = 1/(1 + e), silu = g·sv
			VADDPS(s.c("one"), e, e)
			sv := s.vec()
			VMOVUPS(s.c("one"), sv)
			VDIVPS(e, sv, sv)
			// sv·g, not g·sv: with g NaN both factors are NaNs of opposite signs, and this order
			// gives the one the Go compiler's code gives.
			silu := s.vec()
			VMULPS(gv, sv, silu)
			// t = 1 + g·(1 − sv)
			t := s.vec()
			VMOVUPS(s.c("one"), t)
			VSUBPS(sv, t, t)
			VMULPS(t, gv, t)
			VADDPS(s.c("one"), t, t)
			// dg += dy·u·sv·t; du += dy·silu
			dyv := s.load(dy, h, masked)
			uv := s.load(u, h, masked)
			a := s.vec()
			VMULPS(uv, dyv, a)
			VMULPS(sv, a, a)
			VMULPS(t, a, a)
			old := func(p reg.Register) reg.VecVirtual {
				if !set {
					return s.load(p, h, masked)
				}
				z := s.vec()
				VXORPS(z, z, z)
				return z
			}
			dgv := old(dg)
			VADDPS(a, dgv, dgv)
			s.store(dgv, dg, h, masked)
			VMULPS(silu, dyv, a)
			duv := old(du)
			VADDPS(a, duv, duv)
			s.store(duv, du, h, masked)
		}
	})
	VZEROUPPER()
	RET()
}

// maxFinite returns the largest of n > 0 floats and chk, the sum of x − x over them: 0 when
// all are finite, NaN when any is NaN or infinite (the caller then takes the Go loop, whose
// NaN rule VMAXPS does not follow). Which zero a row of mixed ±0 maximum gives is unspecified.
func maxFinite(s *isa) {
	name := "maxFinite" + s.name
	TEXT(name, NOSPLIT, "func(x *float32, n int) (m float32, chk float32)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s returns max(x[:n]) and the sum of x[i]-x[i] for n > 0 (%s).", name, s.name))
	x := Load(Param("x"), GP64())
	n := Load(Param("n"), GP64())
	s.loadConsts("neginf")
	halves := block / s.width
	acc, chk := make([]reg.VecVirtual, halves), make([]reg.VecVirtual, halves)
	for h := range acc {
		acc[h], chk[h] = s.vec(), s.vec()
		VMOVUPS(s.c("neginf"), acc[h])
		VXORPS(chk[h].AsY(), chk[h].AsY(), chk[h].AsY())
	}
	s.loop(name, n.(reg.GPVirtual), []reg.GPVirtual{x.(reg.GPVirtual)}, func(masked bool) {
		for h := 0; h < halves; h++ {
			v := s.load(x, h, masked) // masked-off lanes read as +0: v − v adds 0 to chk
			d := s.vec()
			VSUBPS(v, v, d)
			VADDPS(d, chk[h], chk[h])
			switch {
			case !masked:
				VMAXPS(v, acc[h], acc[h])
			case s.name == "avx512":
				VMAXPS(v, acc[h], s.masks[0], acc[h])
			default:
				ni := s.vec()
				VMOVUPS(s.c("neginf"), ni)
				VBLENDVPS(s.masks[h], v, ni, v)
				VMAXPS(v, acc[h], acc[h])
			}
		}
	})
	for i, r := range [][]reg.VecVirtual{acc, chk} {
		op := VMAXPS
		if i == 1 {
			op = VADDPS
		}
		lo := r[0].AsY().(reg.VecVirtual)
		if s.name == "avx512" {
			hi := YMM()
			VEXTRACTF64X4(Imm(1), r[0], hi)
			op(hi, lo, lo)
		} else {
			op(r[1], lo, lo)
		}
		x, t := lo.AsX(), XMM()
		VEXTRACTF128(Imm(1), lo, t)
		op(t, x, x)
		VMOVHLPS(x, x, t)
		op(t, x, x)
		VMOVSHDUP(x, t)
		op(t, x, x)
		Store(x, ReturnIndex(i))
	}
	VZEROUPPER()
	RET()
}

// scale multiplies n floats by a in place.
// softmaxGrad is the backward of attention's softmax on one row, from the scores and the
// gradient of the probabilities: p[j] = expf(p[j] − shift) (shift the row's log-sum-exp, so p
// becomes the probabilities) and ds[j] = p[j]·(ds[j] − d)·scale, each product rounded as in
// softmaxGradGo.
func softmaxGrad(s *isa) {
	name := "softmaxGrad" + s.name
	TEXT(name, NOSPLIT, "func(p, ds *float32, n int, shift, d, scale float32)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s writes p[j] = expf(p[j] - shift) and ds[j] = p[j]·(ds[j] - d)·scale for j < n (%s).", name, s.name))
	p := Load(Param("p"), GP64())
	ds := Load(Param("ds"), GP64())
	n := Load(Param("n"), GP64())
	s.loadConsts("log2e", "half", "ln2hi", "ln2lo", "c0", "c1", "c2", "c3", "c4", "c5", "one", "hi", "lo", "inf")
	shift, d, sc := s.vec(), s.vec(), s.vec()
	VBROADCASTSS(addr("shift"), shift)
	VBROADCASTSS(addr("d"), d)
	VBROADCASTSS(addr("scale"), sc)
	s.loop(name, n.(reg.GPVirtual), []reg.GPVirtual{p.(reg.GPVirtual), ds.(reg.GPVirtual)}, func(masked bool) {
		for h := 0; h < block/s.width; h++ {
			x := s.load(p, h, masked)
			VSUBPS(shift, x, x)
			e := s.exp(x)
			s.store(e, p, h, masked)
			g := s.load(ds, h, masked)
			VSUBPS(d, g, g)
			VMULPS(g, e, g)
			VMULPS(sc, g, g)
			s.store(g, ds, h, masked)
		}
	})
	VZEROUPPER()
	RET()
}

// momentLanes is how many float64 partial sums expMoments keeps (expMomentsGo's order).
const momentLanes = 8

// expMoments returns, in float64, s = Σ expf(x[i] − shift) and sz = Σ expf(x[i] − shift)·(x[i] −
// shift) over x[:n]: the sums of the LM head's log-sum-exp and entropy. Each float32 block
// becomes float64 lanes (element i into lane i mod 8, in order); the product of two float32 is
// exact in float64, so only the adds round. Masked-off lanes of the tail add +0.
func expMoments(s *isa) {
	name := "expMoments" + s.name
	TEXT(name, NOSPLIT, "func(x *float32, n int, shift float32) (s float64, sz float64)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s returns the float64 sums of e = expf(x[i] - shift) and of e·(x[i] - shift) for i < n, in expMomentsGo's order (%s).", name, s.name))
	x := Load(Param("x"), GP64())
	n := Load(Param("n"), GP64())
	s.loadConsts("log2e", "half", "ln2hi", "ln2lo", "c0", "c1", "c2", "c3", "c4", "c5", "one", "hi", "lo", "inf")
	shift := s.vec()
	VBROADCASTSS(addr("shift"), shift)
	// momentLanes float64 lanes: one zmm, or two ymm, per sum.
	pdPerAcc := momentLanes * 8 / (4 * s.width) // registers of float64 lanes per sum
	acc := [2][]reg.VecVirtual{}
	for k := range acc {
		for range pdPerAcc {
			r := s.vec()
			VXORPS(r.AsY(), r.AsY(), r.AsY())
			acc[k] = append(acc[k], r)
		}
	}
	// add converts the float32 vector v (s.width lanes) to float64 and adds it to acc[k],
	// lanes in order.
	add := func(k int, v reg.VecVirtual, prod reg.VecVirtual) {
		if s.name == "avx512" {
			lo, hi := ZMM(), ZMM()
			VCVTPS2PD(v.AsY(), lo)
			t := YMM()
			VEXTRACTF64X4(Imm(1), v, t)
			VCVTPS2PD(t, hi)
			if prod != nil {
				plo, phi := ZMM(), ZMM()
				VCVTPS2PD(prod.AsY(), plo)
				VEXTRACTF64X4(Imm(1), prod, t)
				VCVTPS2PD(t, phi)
				VMULPD(plo, lo, lo)
				VMULPD(phi, hi, hi)
			}
			// Elements 0–7 then 8–15 of the block land on lanes 0–7 in turn.
			VADDPD(lo, acc[k][0], acc[k][0])
			VADDPD(hi, acc[k][0], acc[k][0])
			return
		}
		lo, hi := YMM(), YMM()
		VCVTPS2PD(v.AsX(), lo)
		t := XMM()
		VEXTRACTF128(Imm(1), v, t)
		VCVTPS2PD(t, hi)
		if prod != nil {
			plo, phi := YMM(), YMM()
			VCVTPS2PD(prod.AsX(), plo)
			VEXTRACTF128(Imm(1), prod, t)
			VCVTPS2PD(t, phi)
			VMULPD(plo, lo, lo)
			VMULPD(phi, hi, hi)
		}
		VADDPD(lo, acc[k][0], acc[k][0])
		VADDPD(hi, acc[k][1], acc[k][1])
	}
	s.loop(name, n.(reg.GPVirtual), []reg.GPVirtual{x.(reg.GPVirtual)}, func(masked bool) {
		for h := 0; h < block/s.width; h++ {
			d := s.load(x, h, masked)
			VSUBPS(shift, d, d)
			e := s.exp(d)
			if masked {
				if s.name == "avx512" {
					VMOVAPS_Z(e, s.masks[0], e)
					VMOVAPS_Z(d, s.masks[0], d)
				} else {
					VANDPS(s.masks[h], e, e)
					VANDPS(s.masks[h], d, d)
				}
			}
			add(0, e, nil)
			add(1, e, d)
		}
	})
	// Pairwise: lanes l += l+4, l += l+2, l += l+1.
	for k := range acc {
		var lo reg.VecVirtual
		if s.name == "avx512" {
			lo = acc[k][0].AsY().(reg.VecVirtual)
			hi := YMM()
			VEXTRACTF64X4(Imm(1), acc[k][0], hi)
			VADDPD(hi, lo, lo)
		} else {
			lo = acc[k][0]
			VADDPD(acc[k][1], lo, lo)
		}
		xr, t := lo.AsX(), XMM()
		if s.name == "avx512" {
			VEXTRACTF32X4(Imm(1), lo, t) // the EVEX form: the registers may be X16–X31
		} else {
			VEXTRACTF128(Imm(1), lo, t)
		}
		VADDPD(t, xr, xr)
		VUNPCKHPD(xr, xr, t)
		VADDSD(t, xr, xr)
		ret, err := ReturnIndex(k).Resolve()
		if err != nil {
			panic(err)
		}
		VMOVSD(xr, ret.Addr) // Store's MOVSD cannot name X16–X31
	}
	VZEROUPPER()
	RET()
}

func scale(s *isa) {
	name := "scale" + s.name
	TEXT(name, NOSPLIT, "func(x *float32, n int, a float32)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s multiplies x[:n] by a (%s).", name, s.name))
	x := Load(Param("x"), GP64())
	n := Load(Param("n"), GP64())
	a := s.vec()
	VBROADCASTSS(addr("a"), a)
	s.loop(name, n.(reg.GPVirtual), []reg.GPVirtual{x.(reg.GPVirtual)}, func(masked bool) {
		for h := 0; h < block/s.width; h++ {
			v := s.load(x, h, masked)
			VMULPS(a, v, v)
			s.store(v, x, h, masked)
		}
	})
	VZEROUPPER()
	RET()
}

// rmsScale is RMSNormForward's scaling of a row: out[j] = x[j]·r·w[j], the first product
// rounded before the second (rmsScaleGo).
func rmsScale(s *isa) {
	name := "rmsScale" + s.name
	TEXT(name, NOSPLIT, "func(out, x, w *float32, n int, r float32)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s writes out[j] = x[j]·r·w[j] for j < n (%s).", name, s.name))
	out := Load(Param("out"), GP64())
	x := Load(Param("x"), GP64())
	w := Load(Param("w"), GP64())
	n := Load(Param("n"), GP64())
	r := s.vec()
	VBROADCASTSS(addr("r"), r)
	ptrs := []reg.GPVirtual{out.(reg.GPVirtual), x.(reg.GPVirtual), w.(reg.GPVirtual)}
	s.loop(name, n.(reg.GPVirtual), ptrs, func(masked bool) {
		for h := 0; h < block/s.width; h++ {
			v := s.load(x, h, masked)
			VMULPS(r, v, v)
			wv := s.load(w, h, masked)
			VMULPS(wv, v, v)
			s.store(v, out, h, masked)
		}
	})
	VZEROUPPER()
	RET()
}

// rmsBackward is RMSNormBackward's update of one row given the row's r and k
// (rmsBackwardGo): dx[j] += r·w[j]·dy[j] − x[j]·k and dw[j] += dy[j]·x[j]·r, every product
// rounded before the operation that follows it.
func rmsBackward(s *isa) {
	name := "rmsBackward" + s.name
	TEXT(name, NOSPLIT, "func(dx, dw, dy, x, w *float32, n int, r, k float32)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s adds r·w[j]·dy[j] − x[j]·k to dx[j] and dy[j]·x[j]·r to dw[j] for j < n (%s).", name, s.name))
	dx := Load(Param("dx"), GP64())
	dw := Load(Param("dw"), GP64())
	dy := Load(Param("dy"), GP64())
	x := Load(Param("x"), GP64())
	w := Load(Param("w"), GP64())
	n := Load(Param("n"), GP64())
	r, k := s.vec(), s.vec()
	VBROADCASTSS(addr("r"), r)
	VBROADCASTSS(addr("k"), k)
	var ptrs []reg.GPVirtual
	for _, p := range []reg.Register{dx, dw, dy, x, w} {
		ptrs = append(ptrs, p.(reg.GPVirtual))
	}
	s.loop(name, n.(reg.GPVirtual), ptrs, func(masked bool) {
		for h := 0; h < block/s.width; h++ {
			wv := s.load(w, h, masked)
			dyv := s.load(dy, h, masked)
			xv := s.load(x, h, masked)
			VMULPS(r, wv, wv)   // r·w
			VMULPS(dyv, wv, wv) // ·dy
			xk := s.vec()
			VMULPS(k, xv, xk)  // x·k
			VSUBPS(xk, wv, wv) // r·w·dy − x·k
			d := s.load(dx, h, masked)
			VADDPS(wv, d, d)
			s.store(d, dx, h, masked)
			VMULPS(xv, dyv, dyv) // dy·x
			VMULPS(r, dyv, dyv)  // ·r
			e := s.load(dw, h, masked)
			VADDPS(dyv, e, e)
			s.store(e, dw, h, masked)
		}
	})
	VZEROUPPER()
	RET()
}

// adamW is kernels.AdamW's update of n parameters (adamWGo), each operation rounded as Go
// rounds it (no FMA): m = β1·m + (1−β1)·g, v = β2·v + ((1−β2)·g)·g, p = p·decay −
// (step·m)/(√(v·invBC2) + eps). VSQRTPS is the float32 square root correctly rounded, which is
// float32(math.Sqrt(float64(x))): the float64 root has enough bits that rounding it again to
// float32 gives the same value. k points at the eight constants in adamWConsts' order.
func adamW(s *isa) {
	name := "adamW" + s.name
	TEXT(name, NOSPLIT, "func(p, grad, m, v *float32, n int, k *float32)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s applies one AdamW update to p[:n], m[:n] and v[:n] given grad[:n] and the constants at k, in adamWConsts' order (%s).", name, s.name))
	p := Load(Param("p"), GP64())
	g := Load(Param("grad"), GP64()) // not "g": the Go assembler reads g+8(FP) as its g register
	m := Load(Param("m"), GP64())
	v := Load(Param("v"), GP64())
	n := Load(Param("n"), GP64())
	kp := Load(Param("k"), GP64())
	var c [8]reg.VecVirtual // β1, 1−β1, β2, 1−β2, decay, step, invBC2, eps
	for i := range c {
		c[i] = s.vec()
		VBROADCASTSS(Mem{Base: kp, Disp: 4 * i}, c[i])
	}
	var ptrs []reg.GPVirtual
	for _, r := range []reg.Register{p, g, m, v} {
		ptrs = append(ptrs, r.(reg.GPVirtual))
	}
	s.loop(name, n.(reg.GPVirtual), ptrs, func(masked bool) {
		for h := 0; h < block/s.width; h++ {
			gv := s.load(g, h, masked)
			mv := s.load(m, h, masked)
			t := s.vec()
			VMULPS(c[0], mv, mv) // β1·m
			VMULPS(c[1], gv, t)  // (1−β1)·g
			VADDPS(t, mv, mv)
			s.store(mv, m, h, masked)
			vv := s.load(v, h, masked)
			VMULPS(c[2], vv, vv) // β2·v
			VMULPS(c[3], gv, t)  // (1−β2)·g
			VMULPS(gv, t, t)     // ·g
			VADDPS(t, vv, vv)
			s.store(vv, v, h, masked)
			VMULPS(c[6], vv, t) // v·invBC2
			VSQRTPS(t, t)
			VADDPS(c[7], t, t)   // + eps
			VMULPS(c[5], mv, mv) // step·m
			VDIVPS(t, mv, mv)    // (step·m)/(√… + eps)
			pv := s.load(p, h, masked)
			VMULPS(c[4], pv, pv) // p·decay
			VSUBPS(mv, pv, pv)
			s.store(pv, p, h, masked)
		}
	})
	VZEROUPPER()
	RET()
}

// sumRows is how many rows rowSums sums side by side (kernels.normRows).
const sumRows = 8

// rowSums emits the norms' row sums over the first 8·blocks columns of eight rows of c floats
// (rows c apart): with square, sumSquares8 (Σ float64(x)², RMSNormForward's mean square), else
// normDots8 (Σ float64(y)·float64(w)·float64(x), RMSNormBackward's dot), each row added in
// index order as the Go loop adds it. The products are exact or rounded in float64 as Go rounds
// them, eight columns at a time in vector lanes; the adds, which fix the bits, stay scalar and
// in order, the eight rows' chains side by side so that they overlap. Products go through a
// stack buffer, from which each add reads its term.
func rowSums(s *isa, square bool) {
	name := "normDots8" + s.name
	sig := "func(dots *float64, y, x, w *float32, c, blocks int)"
	doc := "%s sets dots[r] to the sum, in index order, of float64(y)·float64(w)·float64(x) over the first 8·blocks columns of rows r < 8 of y and x (rows c floats apart) (%s)."
	if square {
		name = "sumSquares8" + s.name
		sig = "func(ss *float64, x *float32, c, blocks int)"
		doc = "%s sets ss[r] to the sum, in index order, of float64(x)² over the first 8·blocks columns of rows r < 8 of x (rows c floats apart) (%s)."
	}
	TEXT(name, NOSPLIT, sig)
	Pragma("noescape")
	Doc(fmt.Sprintf(doc, name, s.name))
	buf := AllocLocal(sumRows * 8 * 8)
	var out, x0, y0, w reg.Register
	if square {
		out = Load(Param("ss"), GP64())
	} else {
		out = Load(Param("dots"), GP64())
		y0 = Load(Param("y"), GP64())
		w = Load(Param("w"), GP64())
	}
	x0 = Load(Param("x"), GP64())
	ld := Load(Param("c"), GP64())
	n := Load(Param("blocks"), GP64())
	SHLQ(Imm(2), ld) // bytes between rows
	ld3 := GP64()
	LEAQ(Mem{Base: ld, Index: ld, Scale: 2}, ld3)
	x4 := GP64()
	LEAQ(Mem{Base: x0, Index: ld, Scale: 4}, x4)
	var y4 reg.GPVirtual
	if !square {
		y4 = GP64()
		LEAQ(Mem{Base: y0, Index: ld, Scale: 4}, y4)
	}
	row := func(base0, base4 reg.Register, r, disp int) Mem {
		base := base0
		if r >= 4 {
			base = base4
		}
		return rowaddr.Row(base, ld, ld3, r%4, disp)
	}
	acc := make([]reg.VecVirtual, sumRows)
	for r := range acc {
		acc[r] = XMM()
		VXORPD(acc[r], acc[r], acc[r])
	}
	// Eight columns are one zmm of float64, or two ymm.
	halves, lanes := 1, 8
	if s.name == "avx2" {
		halves, lanes = 2, 4
	}
	wide := func() reg.VecVirtual {
		if s.name == "avx512" {
			return ZMM()
		}
		return YMM()
	}
	Label(name + "_loop")
	TESTQ(n, n)
	JZ(LabelRef(name + "_done"))
	for h := 0; h < halves; h++ {
		var wv reg.VecVirtual
		if !square {
			wv = wide()
			VCVTPS2PD(Mem{Base: w, Disp: 16 * h}, wv)
		}
		for r := 0; r < sumRows; r++ {
			xv := wide()
			VCVTPS2PD(row(x0, x4, r, 16*h), xv)
			if square {
				VMULPD(xv, xv, xv)
			} else {
				yv := wide()
				VCVTPS2PD(row(y0, y4, r, 16*h), yv)
				VMULPD(wv, yv, yv) // y·w
				VMULPD(xv, yv, xv) // ·x
			}
			VMOVUPD(xv, buf.Offset(64*r+8*lanes*h))
		}
	}
	for l := 0; l < 8; l++ {
		for r := 0; r < sumRows; r++ {
			VADDSD(buf.Offset(64*r+8*l), acc[r], acc[r])
		}
	}
	ptrs := []reg.Register{x0, x4}
	if !square {
		ptrs = append(ptrs, y0, y4, w)
	}
	for _, p := range ptrs {
		ADDQ(Imm(32), p)
	}
	DECQ(n)
	JMP(LabelRef(name + "_loop"))
	Label(name + "_done")
	for r := 0; r < sumRows; r++ {
		VMOVSD(acc[r], Mem{Base: out, Disp: 8 * r})
	}
	VZEROUPPER()
	RET()
}

// rope emits RopeForward's rotation (or with inverse RopeBackward's) of n rows of nHead heads,
// ropeGo's arithmetic: x'_i = x_i·cos − x_{i+h}·sin and x'_{i+h} = x_{i+h}·cos + x_i·sin
// (inverse: x_i·cos + x_{i+h}·sin and x_{i+h}·cos − x_i·sin), each product rounded before the
// add or subtract, the halves of a head sixteen floats at a time with a masked tail.
func rope(s *isa, inverse bool) {
	name := "ropeForward" + s.name
	if inverse {
		name = "ropeBackward" + s.name
	}
	TEXT(name, NOSPLIT, "func(x *float32, ld int, pos *int32, cos, sin *float32, n, nHead, half int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s rotates n rows (ld floats apart) of nHead heads of 2·half floats by the angles of their positions, as ropeGo does with inverse %v (%s).", name, inverse, s.name))
	x := Load(Param("x"), GP64())
	ld := Load(Param("ld"), GP64())
	pos := Load(Param("pos"), GP64())
	n := Load(Param("n"), GP64())
	hb := Load(Param("half"), GP64())
	SHLQ(Imm(2), ld)
	SHLQ(Imm(2), hb)
	Label(name + "_row")
	TESTQ(n, n)
	JZ(LabelRef(name + "_done"))
	// The row's cos and sin: half floats at pos[r]·half.
	cp, sp := GP64(), GP64()
	MOVLQSX(Mem{Base: pos}, sp)
	IMULQ(hb, sp)
	Load(Param("cos"), cp)
	ADDQ(sp, cp)
	t := GP64()
	Load(Param("sin"), t)
	ADDQ(t, sp)
	xa := GP64()
	MOVQ(x, xa)
	h := GP64()
	Load(Param("nHead"), h)
	Label(name + "_head")
	TESTQ(h, h)
	JZ(LabelRef(name + "_nextrow"))
	xb := GP64()
	LEAQ(Mem{Base: xa, Index: hb, Scale: 1}, xb)
	off, cnt := GP64(), GP64()
	XORQ(off, off)
	MOVQ(hb, cnt)
	SHRQ(Imm(2), cnt)
	body := func(masked bool) {
		for q := 0; q < block/s.width; q++ {
			at := func(base reg.Register) Mem { return Mem{Base: base, Index: off, Scale: 1, Disp: 4 * q * s.width} }
			ld := func(base reg.Register) reg.VecVirtual {
				v := s.vec()
				switch {
				case !masked:
					VMOVUPS(at(base), v)
				case s.name == "avx512":
					VMOVUPS_Z(at(base), s.masks[0], v)
				default:
					VMASKMOVPS(at(base), s.masks[q], v)
				}
				return v
			}
			st := func(v reg.VecVirtual, base reg.Register) {
				switch {
				case !masked:
					VMOVUPS(v, at(base))
				case s.name == "avx512":
					VMOVUPS(v, s.masks[0], at(base))
				default:
					VMASKMOVPS(v, s.masks[q], at(base))
				}
			}
			a, b, c, sn := ld(xa), ld(xb), ld(cp), ld(sp)
			ac, bs, bc, as := s.vec(), s.vec(), s.vec(), s.vec()
			VMULPS(c, a, ac)
			VMULPS(sn, b, bs)
			VMULPS(c, b, bc)
			VMULPS(sn, a, as)
			if inverse {
				VADDPS(bs, ac, ac) // a·cos + b·sin
				VSUBPS(as, bc, bc) // b·cos − a·sin
			} else {
				VSUBPS(bs, ac, ac) // a·cos − b·sin
				VADDPS(as, bc, bc) // b·cos + a·sin
			}
			st(ac, xa)
			st(bc, xb)
		}
	}
	s.loop(name+"_head", cnt, []reg.GPVirtual{off}, body)
	LEAQ(Mem{Base: xa, Index: hb, Scale: 2}, xa)
	DECQ(h)
	JMP(LabelRef(name + "_head"))
	Label(name + "_nextrow")
	ADDQ(ld, x)
	ADDQ(Imm(4), pos)
	DECQ(n)
	JMP(LabelRef(name + "_row"))
	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// readStreamBlock is the bytes readStream reads per loop step: a 64-byte line from each of its
// readStreams streams.
const (
	readStreamBlock = 512
	readStreams     = 8
)

// readStream is the read kernel of kernels.ReadBandwidth, the physical limit a batch-1 decode
// step's weight stream is measured against (STREAM's idea with a read-only kernel): it adds
// blocks·512 bytes of floats into eight independent accumulators, with the adds reading memory
// directly, so that it is bound by how fast the memory system delivers lines and by nothing
// else. It reads the eight eighths of its range side by side, as the gemv kernels read their
// panels: a single stream stalls where the hardware prefetchers stop, at every 4 KiB page, and
// on the 2-vCPU Xeon one stream read DRAM up to three times slower than four, and four streams
// read a 13.7 MB buffer (in L3) slower than the gemv kernels' eight. It returns the sum, so that
// the reads have a use.
func readStream(s *isa) {
	name := "readStream" + s.name
	TEXT(name, NOSPLIT, "func(x *float32, blocks int) float32")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s returns the sum of x[:128*blocks] in an unspecified order, reading it as fast as it can (%s).", name, s.name))
	const streams = readStreams
	n := Load(Param("blocks"), GP64())
	quarter := GP64()
	MOVQ(n, quarter)
	SHLQ(Imm(6), quarter) // bytes per stream: blocks·512/8
	p := make([]reg.GPVirtual, streams)
	p[0] = GP64()
	Load(Param("x"), p[0])
	for q := 1; q < streams; q++ {
		p[q] = GP64()
		LEAQ(Mem{Base: p[q-1], Index: quarter, Scale: 1}, p[q])
	}
	acc := make([]reg.VecVirtual, 8)
	for i := range acc {
		acc[i] = s.vec()
		VXORPS(acc[i].AsY(), acc[i].AsY(), acc[i].AsY())
	}
	perStream := readStreamBlock / streams
	Label(name + "_loop")
	TESTQ(n, n)
	JZ(LabelRef(name + "_done"))
	i := 0
	for q := range p {
		for off := 0; off < perStream; off += 4 * s.width {
			a := acc[i%len(acc)]
			i++
			VADDPS(Mem{Base: p[q], Disp: off}, a, a)
		}
	}
	for q := range p {
		ADDQ(U32(perStream), p[q])
	}
	DECQ(n)
	JMP(LabelRef(name + "_loop"))
	Label(name + "_done")
	for i := 1; i < len(acc); i++ {
		VADDPS(acc[i], acc[0], acc[0])
	}
	lo := acc[0].AsY().(reg.VecVirtual)
	if s.name == "avx512" {
		hi := YMM()
		VEXTRACTF64X4(Imm(1), acc[0], hi)
		VADDPS(hi, lo, lo)
	}
	xl, t := lo.AsX(), XMM()
	VEXTRACTF128(Imm(1), lo, t)
	VADDPS(t, xl, xl)
	VMOVHLPS(xl, xl, t)
	VADDPS(t, xl, xl)
	VMOVSHDUP(xl, t)
	VADDSS(t, xl, xl)
	Store(xl, ReturnIndex(0))
	VZEROUPPER()
	RET()
}

// cpuid is the CPUID instruction, for the cache sizes (leaf 4 on Intel, 0x8000001D on AMD) and
// the processor's name (0x80000002–4) where the operating system does not report them
// (kernels.CPU).
func cpuid() {
	TEXT("cpuid", NOSPLIT, "func(leaf, sub uint32) (a, b, c, d uint32)")
	Doc("cpuid executes CPUID with EAX = leaf and ECX = sub and returns EAX, EBX, ECX and EDX.")
	Load(Param("leaf"), reg.EAX)
	Load(Param("sub"), reg.ECX)
	CPUID()
	Store(reg.EAX, ReturnIndex(0))
	Store(reg.EBX, ReturnIndex(1))
	Store(reg.ECX, ReturnIndex(2))
	Store(reg.EDX, ReturnIndex(3))
	RET()
}

// negate writes −x (the sign bit flipped, as Go's unary minus does) into dst.
func (s *isa) negate(x, dst reg.VecVirtual) {
	if s.name == "avx512" {
		// VXORPS on zmm needs AVX512DQ; the integer xor is the same bits.
		VPXORD(s.c("sign"), x, dst)
		return
	}
	VXORPS(s.c("sign"), x, dst)
}

// addr is the stack slot of a scalar parameter, for instructions that read it from memory.
func addr(name string) Mem {
	b, err := Param(name).Resolve()
	if err != nil {
		panic(err)
	}
	return b.Addr
}
