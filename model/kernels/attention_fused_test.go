package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// attentionRef is causal attention and its gradients in float64, one query row and one head at
// a time, in the layouts of AttentionForward: out and lse as the forward writes them, dq, dk
// and dv as the backward adds them.
type attentionRef struct {
	out, lse, dq, dk, dv []float64
}

func refAttention(q []float32, ldq int, k, v []float32, ldkv int, dout []float32, ldo, L, past, nRep, hd int) attentionRef {
	nk := past + L
	ref := attentionRef{
		out: make([]float64, L*ldo), lse: make([]float64, L*nRep),
		dq: make([]float64, L*ldq), dk: make([]float64, nk*ldkv), dv: make([]float64, nk*ldkv),
	}
	scale := 1 / math.Sqrt(float64(hd))
	for r := 0; r < nRep; r++ {
		for i := 0; i < L; i++ {
			qi := q[i*ldq+r*hd:]
			n := past + i + 1
			p := make([]float64, n)
			m := math.Inf(-1)
			for j := range p {
				for d := 0; d < hd; d++ {
					p[j] += float64(qi[d]) * float64(k[j*ldkv+d])
				}
				p[j] *= scale
				m = math.Max(m, p[j])
			}
			var z float64
			for j := range p {
				p[j] = math.Exp(p[j] - m)
				z += p[j]
			}
			ref.lse[i*nRep+r] = m + math.Log(z)
			o := ref.out[i*ldo+r*hd:]
			for j := range p {
				p[j] /= z
				for d := 0; d < hd; d++ {
					o[d] += p[j] * float64(v[j*ldkv+d])
				}
			}
			// dv_j += p_j·do_i; dp_j = do_i·v_j; ds_j = p_j·(dp_j − Σ p·dp);
			// dq_i += scale·Σ ds_j·k_j; dk_j += scale·ds_j·q_i.
			g := dout[i*ldo+r*hd:]
			dp := make([]float64, n)
			var dsum float64
			for j := range p {
				for d := 0; d < hd; d++ {
					ref.dv[j*ldkv+d] += p[j] * float64(g[d])
					dp[j] += float64(g[d]) * float64(v[j*ldkv+d])
				}
				dsum += p[j] * dp[j]
			}
			for j := range p {
				ds := p[j] * (dp[j] - dsum) * scale
				for d := 0; d < hd; d++ {
					ref.dq[i*ldq+r*hd+d] += ds * float64(k[j*ldkv+d])
					ref.dk[j*ldkv+d] += ds * float64(qi[d])
				}
			}
		}
	}
	return ref
}

// attnCase is one attention call: L queries of nRep heads of hd dimensions after past keys.
type attnCase struct{ L, past, nRep, hd int }

// attnRun is the operands and results of one forward and backward call on strided buffers.
type attnRun struct {
	attnCase
	ldq, ldo, ldkv         int
	q, k, v, dout          []float32
	out, lse, dq, dk, dv   []float32
	dq0, dk0, dv0          []float32 // what dq, dk and dv held before the backward added to them
	fwdScratch, bwdScratch []float32
}

func newAttnRun(tc attnCase, seed uint64) *attnRun {
	rng := rand.New(rand.NewPCG(seed, uint64(tc.L*1000+tc.hd)))
	r := &attnRun{attnCase: tc}
	// Strides as in the model's fused qkv buffer, with some slack so no row ends at a buffer end.
	r.ldq = tc.nRep*tc.hd + 2*tc.hd + 3
	r.ldo = tc.nRep*tc.hd + 5
	r.ldkv = r.ldq
	nk := tc.past + tc.L
	r.q = randSlice(rng, tc.L*r.ldq, 1.5)
	r.k = randSlice(rng, nk*r.ldkv, 1.5)
	r.v = randSlice(rng, nk*r.ldkv, 1)
	r.dout = randSlice(rng, tc.L*r.ldo, 1)
	r.dq0 = randSlice(rng, len(r.q), 1)
	r.dk0 = randSlice(rng, len(r.k), 1)
	r.dv0 = randSlice(rng, len(r.v), 1)
	// Scratch starts as NaN, so a result that read scratch it had not written shows it.
	n := AttentionScratch(tc.L, tc.past, tc.hd)
	r.fwdScratch, r.bwdScratch = make([]float32, n), make([]float32, 2*n)
	return r
}

// run calls AttentionForward and then AttentionBackward on fresh outputs.
func (r *attnRun) run() {
	nan := float32(math.NaN())
	for i := range r.fwdScratch {
		r.fwdScratch[i] = nan
	}
	for i := range r.bwdScratch {
		r.bwdScratch[i] = nan
	}
	r.out = make([]float32, r.L*r.ldo)
	r.lse = make([]float32, r.L*r.nRep)
	AttentionForward(r.out, r.ldo, r.lse, r.nRep, r.fwdScratch, r.q, r.ldq, r.k, r.v, r.ldkv, r.L, r.past, r.nRep, r.hd)
	r.dq, r.dk, r.dv = slices.Clone(r.dq0), slices.Clone(r.dk0), slices.Clone(r.dv0)
	AttentionBackward(r.dq, r.dk, r.dv, r.bwdScratch, r.dout, r.ldo, r.out, r.lse, r.nRep,
		r.q, r.ldq, r.k, r.v, r.ldkv, r.L, r.past, r.nRep, r.hd)
}

// results lists what the calls wrote, named, for comparisons.
func (r *attnRun) results() map[string][]float32 {
	return map[string][]float32{"out": r.out, "lse": r.lse, "dq": r.dq, "dk": r.dk, "dv": r.dv}
}

// attnCases covers heads of 16 and 32 dimensions (the fused path) and others (Sgemm), odd
// lengths, lengths across the fused tiles (12 rows) and blocks (48 rows), across key panels
// (32) and k slices (384), cached keys before the queries, and grouped query heads.
var attnCases = []attnCase{
	{1, 0, 1, 16}, {2, 0, 2, 16}, {13, 0, 2, 16}, {37, 5, 1, 16}, {49, 0, 3, 16}, {131, 0, 2, 16},
	{1, 7, 2, 32}, {12, 0, 1, 32}, {33, 0, 2, 32}, {48, 31, 2, 32}, {97, 0, 1, 32}, {200, 0, 2, 32},
	{29, 3, 2, 48}, {70, 0, 1, 64},
	{30, 400, 2, 16}, {400, 0, 1, 32}, // more keys than one k slice of the kernels (384)
	{21, 0, 2, 8}, {40, 2, 1, 24},
}

// TestAttentionMatchesFloat64 holds the forward (output and log-sum-exp) and the backward (the
// gradients added into dq, dk, dv) to the float64 definition, on every microkernel this CPU
// runs: the fused path where it applies, the Sgemm path for the other head dimensions and on
// the Go kernel.
func TestAttentionMatchesFloat64(t *testing.T) {
	for _, kern := range availableKernels() {
		for _, tc := range attnCases {
			t.Run(fmt.Sprintf("%s/%+v", kern.name, tc), func(t *testing.T) {
				withKernel(t, kern, 2)
				r := newAttnRun(tc, 1)
				r.run()
				ref := refAttention(r.q, r.ldq, r.k, r.v, r.ldkv, r.dout, r.ldo, tc.L, tc.past, tc.nRep, tc.hd)
				for name, got := range r.results() {
					want := map[string][]float64{"out": ref.out, "lse": ref.lse, "dq": ref.dq, "dk": ref.dk, "dv": ref.dv}[name]
					base := map[string][]float32{"dq": r.dq0, "dk": r.dk0, "dv": r.dv0}[name]
					for i, w := range want {
						if base != nil {
							w += float64(base[i])
						}
						if g := float64(got[i]); !(math.Abs(g-w) <= 2e-5+2e-5*math.Abs(w)) {
							t.Fatalf("%s[%d] = %v, want %v", name, i, g, w)
						}
					}
				}
			})
		}
	}
}

// TestAttentionFusedTaken checks which path the cases above exercise: the fused one exactly for
// head dimensions that are multiples of 16 on the assembly kernels.
func TestAttentionFusedTaken(t *testing.T) {
	for _, kern := range availableKernels() {
		withKernel(t, kern, 2)
		for _, hd := range []int{8, 16, 24, 32, 48, 64} {
			want := kern != &goKernel && hd%16 == 0
			if got := fusedFamily(hd) != nil; got != want {
				t.Errorf("%s, head dimension %d: fused path %v, want %v", kern.name, hd, got, want)
			}
		}
	}
}

// TestAttentionFusedSameOnEveryKernel: the fused path gives the same bits on AVX-512 and AVX2
// (the small-m kernels of one generator do the same operations per element), and the fused
// forward does not depend on the lse output being asked for.
func TestAttentionFusedSameOnEveryKernel(t *testing.T) {
	var asm []*microKernel
	for _, k := range availableKernels() {
		if k != &goKernel {
			asm = append(asm, k)
		}
	}
	if len(asm) == 0 {
		t.Skip("no assembly kernels on this CPU")
	}
	for _, tc := range []attnCase{{131, 0, 2, 16}, {77, 9, 2, 32}, {50, 0, 1, 64}} {
		var want map[string][]float32
		for i, kern := range asm {
			withKernel(t, kern, 2)
			r := newAttnRun(tc, 2)
			r.run()
			got := r.results()
			noLSE := make([]float32, len(r.out))
			AttentionForward(noLSE, r.ldo, nil, 0, r.fwdScratch, r.q, r.ldq, r.k, r.v, r.ldkv, tc.L, tc.past, tc.nRep, tc.hd)
			if j := sameBits(noLSE, r.out); j >= 0 {
				t.Fatalf("%s %+v: forward without lse differs at %d", kern.name, tc, j)
			}
			if i == 0 {
				want = got
				continue
			}
			for name, g := range got {
				if j := sameBits(g, want[name]); j >= 0 {
					t.Fatalf("%+v: %s %s[%d] = %v, %s gives %v", tc, kern.name, name, j, g[j], asm[0].name, want[name][j])
				}
			}
		}
	}
}

// TestAttentionFusedGrad checks the fused backward against finite differences of the fused
// forward (TestAttentionGrad does the same for the Sgemm path).
func TestAttentionFusedGrad(t *testing.T) {
	for _, tc := range []attnCase{{13, 0, 2, 16}, {40, 3, 1, 32}} {
		if fusedFamily(tc.hd) == nil {
			t.Skip("no fused path on this CPU")
		}
		rng := rand.New(rand.NewPCG(9, uint64(tc.L)))
		ldq := tc.nRep * tc.hd
		ldkv := tc.hd
		nk := tc.past + tc.L
		q := randSlice(rng, tc.L*ldq, 1.5)
		k := randSlice(rng, nk*ldkv, 1.5)
		v := randSlice(rng, nk*ldkv, 1)
		dout := randSlice(rng, tc.L*ldq, 1)
		out := make([]float32, tc.L*ldq)
		lse := make([]float32, tc.L*tc.nRep)
		scratch := make([]float32, 2*AttentionScratch(tc.L, tc.past, tc.hd))
		loss := func() float64 {
			AttentionForward(out, ldq, lse, tc.nRep, scratch, q, ldq, k, v, ldkv, tc.L, tc.past, tc.nRep, tc.hd)
			return dotLoss(dout, out)
		}
		loss()
		dq := make([]float32, len(q))
		dk := make([]float32, len(k))
		dv := make([]float32, len(v))
		AttentionBackward(dq, dk, dv, scratch, dout, ldq, out, lse, tc.nRep, q, ldq, k, v, ldkv, tc.L, tc.past, tc.nRep, tc.hd)
		checkGrad(t, "fused attention dq", q, dq, loss)
		checkGrad(t, "fused attention dk", k, dk, loss)
		checkGrad(t, "fused attention dv", v, dv, loss)
	}
}
