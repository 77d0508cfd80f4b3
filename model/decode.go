package model

import (
	"fmt"
	"time"

	"github.com/agentrl/agentrl/model/kernels"
)

// decodeWorkspace is the scratch of Step and Prefill, grown to the largest call and reused.
type decodeWorkspace struct {
	runs    []run
	pos     []int32
	x, ln   []float32 // (n, C)
	rstd    []float32 // (n)
	qkv     []float32 // (n, qkvDim)
	atty    []float32 // (n, Heads·HeadDim)
	gu      []float32 // (n, 2·Hidden)
	sw      []float32 // (n, Hidden)
	scratch [][]float32
	own     []ownNorm      // per goroutine: its copy of a few rows' norm (decodeStep.normed)
	prep    [][]float32    // per goroutine: the q/k norms' inputs and factors (prepHeads), when QKNorm
	packed  *decodeWeights // nil until PackDecodeWeights
	step    decodeStep
}

// ownNorm is one goroutine's copy of the normed rows of a step of few rows, and the phase that
// computed it.
type ownNorm struct {
	ln, rstd []float32
	phase    int
}

// decodeWeights is a snapshot of the weight matrices in the decode kernels' layout.
type decodeWeights struct {
	layers []packedLayer
	head   decodeMatrix
	bytes  int                 // of all the matrices: what a batch-1 step reads
	tune   *kernels.SplitTuner // tunes' tuner for the precision packed
	// tunes decide whether batch-1 steps are split among the cores, one per precision (float32,
	// bfloat16); see stepTuneOn.
	tunes [2]kernels.SplitTuner
}

type packedLayer struct{ qkv, o, gateUp, down decodeMatrix }

// PackDecodeWeights copies the weight matrices into the layout of the decode kernels
// (kernels.PackedWeights), and Step and Prefill read them from that copy from then on; call it
// again after every change of the weights. The results are bit for bit those of the unpacked
// weights; a batch-1 step streams each matrix once instead of transposing it in registers, and a
// batched step skips packing every matrix on every call. The copy takes as much memory as the
// matrices (13.6 MB for DefaultConfig(2048)). PackDecodeWeightsAs packs them in another precision.
func (m *Model) PackDecodeWeights() { m.packDecodeWeights(F32) }

func (m *Model) packDecodeWeights(prec Precision) {
	cfg := m.Cfg
	C, H := cfg.Dim, cfg.Hidden
	w := m.dec.packed
	if w == nil {
		w = &decodeWeights{layers: make([]packedLayer, cfg.Layers)}
	}
	grouped := make([]float32, len(m.Params.Layers[0].QKV))
	src := m
	if m.LoRA != nil {
		src = m.Merged() // decoding reads the base weights with the adapters merged in
	}
	for l := range cfg.Layers {
		p, pl := &src.Params.Layers[l], &w.layers[l]
		cfg.groupQKV(grouped, p.QKV)
		pl.qkv.pack(prec, grouped, cfg.qkvDim(), C)
		pl.o.pack(prec, p.O, C, cfg.attnDim())
		pl.gateUp.pack(prec, p.GateUp, 2*H, C)
		pl.down.pack(prec, p.Down, C, H)
	}
	w.head.pack(prec, m.Params.LMHead, cfg.Vocab, C)
	size := 4 // bytes a weight
	w.tune = &w.tunes[0]
	if !prec.Exact() {
		size, w.tune = 2, &w.tunes[1]
	}
	w.bytes = size * (len(m.Params.LMHead) + cfg.Layers*(cfg.qkvDim()*C+C*cfg.attnDim()+2*H*C+C*H))
	m.dec.packed = w
}

// groupQKV copies the rows of a q/k/v weight (qkvDim×Dim: the query heads, then the key heads,
// then the value heads) into dst grouped by key/value head: for each g, the queries of the heads
// that share it, its key and its value (qkvAt). The packed decode weights hold them in this
// order, so that a decode step of few rows cuts the product by key/value head and each part
// goes on to the attention that reads it (phQKVAttn).
func (c Config) groupQKV(dst, src []float32) {
	hd, nRep, C := c.HeadDim(), c.Heads/c.KVHeads, c.Dim
	for g := range c.KVHeads {
		q, k, v := c.qkvAt(true, g)
		copy(dst[q*C:(q+nRep*hd)*C], src[g*nRep*hd*C:(g+1)*nRep*hd*C])
		kSrc, vSrc := (c.Heads+g)*hd, (c.Heads+c.KVHeads+g)*hd
		copy(dst[k*C:(k+hd)*C], src[kSrc*C:(kSrc+hd)*C])
		copy(dst[v*C:(v+hd)*C], src[vSrc*C:(vSrc+hd)*C])
	}
}

// qkvAt returns where, in a row of the q/k/v product, the queries of the heads that share
// key/value head g start (nRep heads, HeadDim apart), and where its key and its value start:
// grouped by key/value head (groupQKV, the packed decode weights' order) or as the weights are
// stored (all the queries, then the keys, then the values).
func (c Config) qkvAt(grouped bool, g int) (q, k, v int) {
	hd, nRep := c.HeadDim(), c.Heads/c.KVHeads
	if grouped {
		q = g * (nRep + 2) * hd
		return q, q + nRep*hd, q + (nRep+1)*hd
	}
	return g * nRep * hd, (c.Heads + g) * hd, (c.Heads + c.KVHeads + g) * hd
}

// run is a stretch of consecutive tokens of one call that extend one slot.
type run struct{ slot, first, L, past int }

// Step appends tokens[i] to slot slots[i] for every i — one token per slot, slots distinct — in
// one batched pass, and writes the logits of the next token of each into
// logits[i·Vocab:(i+1)·Vocab]. Batching across slots turns every projection into one GEMM, which
// is what makes continuous batching pay. A slot's logits are bit for bit the same whichever
// other slots share the step, and the same as after prefilling its tokens (kernels.Sgemm's
// small-m path, kernels.AttentionCached).
func (m *Model) Step(c *KVCache, slots []int, tokens []int32, logits []float32) error {
	if err := m.checkCache(c); err != nil {
		return err
	}
	if len(slots) != len(tokens) {
		return fmt.Errorf("model: Step got %d slots and %d tokens", len(slots), len(tokens))
	}
	if len(logits) != len(tokens)*m.Cfg.Vocab {
		return fmt.Errorf("model: Step needs %d logits (tokens×Vocab), got %d", len(tokens)*m.Cfg.Vocab, len(logits))
	}
	if len(tokens) == 0 {
		return nil
	}
	runs := m.dec.runs[:0]
	for i, s := range slots {
		if s < 0 || s >= c.slots {
			return fmt.Errorf("model: Step slot %d outside [0, %d)", s, c.slots)
		}
		for _, r := range runs {
			if r.slot == s {
				return fmt.Errorf("model: Step lists slot %d twice", s)
			}
		}
		runs = append(runs, run{slot: s, first: i, L: 1, past: c.lens[s]})
	}
	m.dec.runs = runs
	return m.extend(c, runs, tokens, logits, true)
}

// Prefill appends a run of tokens to slot (a prompt, processed as a batch over positions) and
// writes the logits of the token after the last one into logits (Vocab entries).
func (m *Model) Prefill(c *KVCache, slot int, tokens []int32, logits []float32) error {
	if err := m.checkCache(c); err != nil {
		return err
	}
	if slot < 0 || slot >= c.slots {
		return fmt.Errorf("model: Prefill slot %d outside [0, %d)", slot, c.slots)
	}
	if len(tokens) == 0 {
		return fmt.Errorf("model: Prefill needs at least one token")
	}
	if len(logits) != m.Cfg.Vocab {
		return fmt.Errorf("model: Prefill needs %d logits, got %d", m.Cfg.Vocab, len(logits))
	}
	m.dec.runs = append(m.dec.runs[:0], run{slot: slot, first: 0, L: len(tokens), past: c.lens[slot]})
	return m.extend(c, m.dec.runs, tokens, logits, false)
}

func (m *Model) checkCache(c *KVCache) error {
	switch {
	case c == nil:
		return fmt.Errorf("model: nil KV cache")
	case c.err != nil:
		return c.err
	case c.cfg != m.Cfg:
		return fmt.Errorf("model: KV cache was made for a different config")
	}
	return nil
}

// extend runs the new tokens through the model, appends their keys and values to the cache and
// writes logits: after every token (allRows) or after the last one only. Every input is checked
// before anything is written, so an error leaves the cache as it was.
//
// The layers run as one parallel region of phases (kernels.Phases, decodeStep): per layer the
// norm, the q/k/v product, attention (each (run, key/value head) task rotating its own queries
// and key, storing its key and value, attending), the output product, the norm, the gate/up
// product, SwiGLU and the down product; then the final norm and the LM head (with few rows the
// norms are done inside the products, normed). A phase waits for the one before it, as each
// kernel call used to wait for the one before, so every value gets the same operations: only
// the number of parallel regions changed, from five or more a layer to one a call. A batch-1
// step is bound by the weights' memory traffic, and what came around the products (attention,
// norms, 21 regions) was a fifth of it. With few rows the q/k/v product and attention are one
// phase, cut by key/value head (phQKVAttn, qkvByHead).
func (m *Model) extend(c *KVCache, runs []run, tokens []int32, logits []float32, allRows bool) error {
	cfg := m.Cfg
	for _, r := range runs {
		if r.past+r.L > c.maxLen {
			return fmt.Errorf("model: slot %d holds %d tokens, %d more exceed its length %d", r.slot, r.past, r.L, c.maxLen)
		}
	}
	for i, t := range tokens {
		if t < 0 || int(t) >= cfg.Vocab {
			return fmt.Errorf("model: token %d at index %d is outside the vocabulary of %d", t, i, cfg.Vocab)
		}
	}
	n, C := len(tokens), cfg.Dim
	if m.LoRA != nil && m.dec.packed == nil {
		m.PackDecodeWeights() // the adapters are merged into the packed weights
	}
	d := m.sizeDecode(n, c.maxLen)
	for _, r := range runs {
		for j := 0; j < r.L; j++ {
			d.pos[r.first+j] = int32(r.past + j)
		}
	}
	kernels.EmbeddingForward(d.x[:n*C], tokens, m.Params.Embed, n, C)
	st := &d.step
	// The phase lists keep their storage from step to step (plan refills them), and the method
	// value the region calls is made once for this workspace: either would be an allocation a
	// step.
	*st = decodeStep{m: m, c: c, d: d, runs: runs, n: n, logits: logits, nw: m.par.n,
		phases: st.phases, parts: st.parts, f: st.f, bound: st.bound}
	if st.bound != st {
		st.f, st.bound = st.run, st
	}
	if !allRows {
		st.head = n - 1
	}
	// A batch-1 step over packed weights reads every weight once: whether splitting it among
	// the cores pays depends on what else the machine runs, so it is timed both ways.
	var split, timed bool
	tuned := n == 1 && st.nw > 1 && d.packed != nil && stepTuneOn
	if tuned {
		split, timed = d.packed.tune.Split()
		if !split {
			st.nw = 1
		}
	}
	if d.packed == nil {
		// kernels.Sgemm runs its own parallel regions, which need the helpers to themselves.
		st.nw = 1
	}
	st.plan()
	var t0 time.Time
	if timed {
		t0 = time.Now()
	}
	kernels.Phases(st.nw, st.parts, st.f)
	if timed {
		d.packed.tune.Record(split, d.packed.bytes, time.Since(t0))
	}
	for _, r := range runs {
		c.lens[r.slot] += r.L
	}
	return nil
}

// stepTuneOn turns the step tuners on; it is false only in tests and benchmarks that force one
// way. Whether a model's batch-1 decode steps are split among the cores is decided by a
// kernels.SplitTuner (split unless one core has been faster by a fifth, both ways probed) that
// belongs to the model's packed weights, one for float32 weights and one for bfloat16 ones. A
// step's time per KiB of weight differs between the two precisions, and between models of
// different sizes: a split step's fixed cost (waking a helper, the waits between its phases) is
// spread over 13.7 MB of weights at 3.4 M parameters and over 0.5 MB at 0.13 M, where one core
// is the faster way. A tuner shared by every model of a process compared one model's split
// steps with another's unsplit ones: after the 0.13 M model had decoded in the same process,
// the 3.4 M model's tuned steps stayed on one core at 0.46 of the read bandwidth where split
// steps read at 0.84 (BenchmarkDecodeRoofline on the 2-vCPU Xeon). The tuners live as long as
// the model's packed weights, across weight updates.
var stepTuneOn = true

// phaseKind is what a phase of a decode step computes.
type phaseKind uint8

const (
	phAttnNorm   phaseKind = iota // ln = RMSNorm(x)·AttnNorm, in chunks of rows
	phQKV                         // qkv = ln·QKVᵀ
	phAttn                        // RoPE, the cache and attention of one (run, key/value head) task a part
	phQKVAttn                     // phQKV's columns of one key/value head, then its phAttn tasks of every run
	phO                           // x += atty·Oᵀ
	phMLPNorm                     // ln = RMSNorm(x)·MLPNorm
	phGateUp                      // gu = ln·GateUpᵀ
	phSwiGLU                      // sw = SwiGLU(gu), in chunks of rows or of columns
	phDown                        // x += sw·Downᵀ
	phOBias                       // x += o_proj's bias
	phGateUpBias                  // gu += gate_proj's and up_proj's biases
	phDownBias                    // x += down_proj's bias
	phNorm                        // the final norm of the rows whose logits are wanted
	phHead                        // logits = ln·LMHeadᵀ
)

// decodeStep is one extend call as a chain of phases (kernels.Phases); it lives in the
// workspace so that a step allocates nothing but the region's bookkeeping.
type decodeStep struct {
	m      *Model
	c      *KVCache
	d      *decodeWorkspace
	runs   []run
	n      int       // new tokens
	head   int       // first row whose logits are wanted (the rest of the n rows)
	logits []float32 // (n-head, Vocab)
	nw     int       // goroutines
	phases []stepPhase
	parts  []int
	f      func(worker, phase, part int) // bound.run
	bound  *decodeStep
	// ownNorm: every goroutine norms the few rows a product reads itself (normed); otherwise
	// norm phases write ln.
	ownNorm bool
}

type stepPhase struct {
	kind  phaseKind
	layer int
}

// plan lists the phases and cuts each into parts for nw goroutines.
func (s *decodeStep) plan() {
	cfg := s.m.Cfg
	C, H, n := cfg.Dim, cfg.Hidden, s.n
	s.phases, s.parts = s.phases[:0], s.parts[:0]
	add := func(k phaseKind, l, parts int) {
		s.phases = append(s.phases, stepPhase{k, l})
		s.parts = append(s.parts, max(parts, 1))
	}
	// With few rows every goroutine norms them itself, as the first thing it does in the
	// product that reads them: a norm of one row takes a fraction of a microsecond, less than a
	// phase of its own, which made the other goroutines wait for it.
	s.ownNorm = n < minRows
	for i := range s.d.own {
		s.d.own[i].phase = -1
	}
	norm := func(k phaseKind, l, rows int) {
		if !s.ownNorm {
			add(k, l, s.elemParts(rows*C, normPartFloats))
		}
	}
	fused := s.ownNorm && s.qkvByHead()
	for l := range cfg.Layers {
		norm(phAttnNorm, l, n)
		if fused {
			add(phQKVAttn, l, cfg.KVHeads)
		} else {
			add(phQKV, l, s.productParts(n, l, phQKV))
			add(phAttn, l, len(s.runs)*cfg.KVHeads)
		}
		add(phO, l, s.productParts(n, l, phO))
		bias := func(k phaseKind, b []float32) {
			if b != nil {
				add(k, l, min(n, s.elemParts(n*len(b), normPartFloats)))
			}
		}
		p := &s.m.Params.Layers[l]
		bias(phOBias, p.OBias)
		norm(phMLPNorm, l, n)
		add(phGateUp, l, s.productParts(n, l, phGateUp))
		bias(phGateUpBias, p.GateUpBias)
		add(phSwiGLU, l, s.elemParts(n*H, swigluPartFloats))
		add(phDown, l, s.productParts(n, l, phDown))
		bias(phDownBias, p.DownBias)
	}
	out := n - s.head
	norm(phNorm, 0, out)
	add(phHead, 0, s.productParts(out, 0, phHead))
}

// qkvByHead reports whether the q/k/v product can be cut at key/value heads: packed weights
// (grouped by head, groupQKV) whose panels do not straddle two heads' columns, so that part g of
// KVHeads parts is head g's (kernels.SgemmPackedPart). A step of few rows then runs the product
// and attention as one phase (phQKVAttn): each goroutine attends with the queries, key and value
// it has just computed, with one wait on the other goroutines a layer fewer.
func (s *decodeStep) qkvByHead() bool {
	w := s.packed(0, phQKV)
	if w == nil {
		return false
	}
	cfg := s.m.Cfg
	group := (cfg.Heads/cfg.KVHeads + 2) * cfg.HeadDim()
	return group%w.panelWidth() == 0
}

// normed returns the rows [r0, r0+rows) of x normed by weight for a product of phase i: ln,
// which a norm phase wrote, or, for a step of few rows, the goroutine's own copy, which it
// computes at its first part of the phase. Either way every row gets RMSNormForward's bits.
func (s *decodeStep) normed(worker, i int, weight []float32, r0, rows int) []float32 {
	d := s.d
	if !s.ownNorm {
		return d.ln
	}
	o := &d.own[worker]
	if o.phase != i {
		s.m.normRows(o.ln, o.rstd, d.x[r0*s.m.Cfg.Dim:], weight, 0, rows, 0, 1)
		o.phase = i
	}
	return o.ln
}

// The least output floats a part of a norm (RMSNorm: a sum of squares and a scale, cheap per
// float: minRows rows of the default model) and of SwiGLU (an exponential a float) takes.
const (
	normPartFloats   = minRows * 256
	swigluPartFloats = 256
)

// elemParts is how many parts a row-wise phase writing floats outputs is cut into: at least
// least floats a part, at most four a goroutine.
func (s *decodeStep) elemParts(floats, least int) int {
	if s.nw <= 1 {
		return 1
	}
	return min(s.nw*4, floats/least)
}

// productParts is how many parts the product of phase k takes: the packed weights' own split
// (kernels.PackedWeights.Parts, kernels.PackedBF16.Parts), or one call of kernels.Sgemm,
// which splits itself.
func (s *decodeStep) productParts(rows, l int, k phaseKind) int {
	if w := s.packed(l, k); w != nil {
		return w.parts(rows, s.nw)
	}
	return 1
}

// packed returns the packed weights of the product of phase k in layer l, nil without them.
func (s *decodeStep) packed(l int, k phaseKind) *decodeMatrix {
	pw := s.d.packed
	if pw == nil {
		return nil
	}
	switch k {
	case phQKV, phQKVAttn:
		return &pw.layers[l].qkv
	case phO:
		return &pw.layers[l].o
	case phGateUp:
		return &pw.layers[l].gateUp
	case phDown:
		return &pw.layers[l].down
	case phHead:
		return &pw.head
	}
	return nil
}

// run computes part of phase i, on the goroutine named worker.
func (s *decodeStep) run(worker, i, part int) {
	m, d := s.m, s.d
	cfg := m.Cfg
	C, Q, H, n := cfg.Dim, cfg.qkvDim(), cfg.Hidden, s.n
	ph, parts := s.phases[i], s.parts[i]
	var p *LayerParams
	if ph.kind < phNorm {
		p = &m.Params.Layers[ph.layer]
	}
	switch ph.kind {
	case phAttnNorm:
		m.normRows(d.ln, d.rstd, d.x, p.AttnNorm, 0, n, part, parts)
	case phQKV:
		s.project(part, parts, n, Q, C, s.normed(worker, i, p.AttnNorm, 0, n), p.QKV, ph, 0, d.qkv)
	case phAttn:
		m.attendTask(s.c, ph.layer, s.runs[part/cfg.KVHeads], part%cfg.KVHeads, d, worker)
	case phQKVAttn:
		s.project(part, parts, n, Q, C, s.normed(worker, i, p.AttnNorm, 0, n), p.QKV, ph, 0, d.qkv)
		for _, r := range s.runs {
			m.attendTask(s.c, ph.layer, r, part, d, worker)
		}
	case phO:
		s.project(part, parts, n, C, cfg.attnDim(), d.atty, p.O, ph, 1, d.x)
	case phOBias:
		lo, hi := chunk(n, part, parts, 1)
		addBias(d.x, p.OBias, lo, hi)
	case phGateUpBias:
		lo, hi := chunk(n, part, parts, 1)
		addBias(d.gu, p.GateUpBias, lo, hi)
	case phDownBias:
		lo, hi := chunk(n, part, parts, 1)
		addBias(d.x, p.DownBias, lo, hi)
	case phMLPNorm:
		m.normRows(d.ln, d.rstd, d.x, p.MLPNorm, 0, n, part, parts)
	case phGateUp:
		s.project(part, parts, n, 2*H, C, s.normed(worker, i, p.MLPNorm, 0, n), p.GateUp, ph, 0, d.gu)
	case phSwiGLU:
		if n < parts {
			// Fewer rows than parts: cut the columns.
			lo, hi := chunk(H, part, parts, 16)
			kernels.SwiGLUForwardCols(d.sw, d.gu, n, H, lo, hi)
		} else {
			lo, hi := chunk(n, part, parts, 1)
			kernels.SwiGLUForward(d.sw[lo*H:hi*H], d.gu[lo*2*H:hi*2*H], hi-lo, H)
		}
	case phDown:
		s.project(part, parts, n, C, H, d.sw, p.Down, ph, 1, d.x)
	case phNorm:
		m.normRows(d.ln, d.rstd, d.x[s.head*C:], m.Params.Norm, 0, n-s.head, part, parts)
	case phHead:
		ln := s.normed(worker, i, m.Params.Norm, s.head, n-s.head)
		s.project(part, parts, n-s.head, cfg.Vocab, C, ln, m.Params.LMHead, ph, 0, s.logits)
	}
}

// chunk returns part (of parts) of [0, n), cut at multiples of align.
func chunk(n, part, parts, align int) (lo, hi int) {
	units := (n + align - 1) / align
	lo, hi = units*part/parts*align, units*(part+1)/parts*align
	return min(lo, n), min(hi, n)
}

// project computes part of y = x·Wᵀ + beta·y for rows rows, W out×in, from the packed weights
// of the phase when there are any.
func (s *decodeStep) project(part, parts, rows, out, in int, x, w []float32, ph stepPhase, beta float32, y []float32) {
	if packed := s.packed(ph.layer, ph.kind); packed != nil {
		packed.part(part, parts, rows, in, x, beta, y, out)
		return
	}
	kernels.Sgemm(false, true, rows, out, in, 1, x, in, w, in, beta, y, out)
}

// normRows applies RMSNorm to chunk part (of parts) of rows [r0, r0+rows) of x.
func (m *Model) normRows(out, rstd, x, weight []float32, r0, rows, part, parts int) {
	C := m.Cfg.Dim
	lo, hi := chunk(rows, part, parts, 1)
	lo, hi = r0+lo, r0+hi
	kernels.RMSNormForward(out[lo*C:hi*C], rstd[lo:hi], x[lo*C:hi*C], weight, hi-lo, C, m.Cfg.NormEps)
}

// attendTask is attention for key/value head g of run r in layer l: it rotates the run's
// queries of the heads that share g and its keys (RoPE), stores its keys and values in the
// cache, and attends every new token over its slot. Tasks write disjoint parts of qkv, the
// cache and atty; kernels.AttentionCached gives a token the same result in a prefill as in a
// decode step.
func (m *Model) attendTask(c *KVCache, l int, r run, g int, d *decodeWorkspace, worker int) {
	cfg := m.Cfg
	Q, hd, nRep := cfg.qkvDim(), cfg.HeadDim(), cfg.Heads/cfg.KVHeads
	qOff, kOff, vOff := cfg.qkvAt(d.packed != nil, g)
	qkv, pos := d.qkv[r.first*Q:], d.pos[r.first:r.first+r.L]
	scratch := d.scratch[worker]
	if !cfg.plainLlama() && (cfg.QKVBias || cfg.QKNorm) {
		var raw, rstd []float32
		if cfg.QKNorm {
			QK := (cfg.Heads + cfg.KVHeads) * hd
			raw, rstd = d.prep[worker][:QK], d.prep[worker][QK:]
		}
		m.prepHeads(l, g, r.L, qkv, Q, qOff, kOff, vOff, raw, 0, rstd, 0)
	}
	kernels.RopeForward(qkv[qOff:], Q, pos, m.ropeCos, m.ropeSin, r.L, nRep, hd)
	kernels.RopeForward(qkv[kOff:], Q, pos, m.ropeCos, m.ropeSin, r.L, 1, hd)
	if c.k16 != nil {
		m.attendTaskBF16(c, l, r, g, d, scratch) // decode_precision.go
		return
	}
	ckb, cv := c.headSlot(l, r.slot, g)
	for j := 0; j < r.L; j++ {
		row := qkv[j*Q:]
		kernels.StoreKey(ckb, r.past+j, row[kOff:kOff+hd])
		copy(cv[(r.past+j)*hd:(r.past+j+1)*hd], row[vOff:vOff+hd])
	}
	kernels.AttentionCachedWindow(d.atty[r.first*cfg.attnDim()+g*nRep*hd:], cfg.attnDim(), scratch,
		qkv[qOff:], Q, ckb, cv, hd, r.L, r.past, nRep, hd, cfg.Window(l))
}

// sizeDecode grows the decode workspace to n tokens over slots of up to maxLen.
func (m *Model) sizeDecode(n, maxLen int) *decodeWorkspace {
	d, cfg := &m.dec, m.Cfg
	C := cfg.Dim
	d.pos = growInt(d.pos, n)
	d.x = grow(d.x, n*C)
	d.ln = grow(d.ln, n*C)
	d.rstd = grow(d.rstd, n)
	d.qkv = grow(d.qkv, n*cfg.qkvDim())
	d.atty = grow(d.atty, n*cfg.attnDim())
	if cfg.QKNorm {
		for len(d.prep) < m.par.n {
			d.prep = append(d.prep, nil)
		}
		for i := range d.prep {
			d.prep[i] = grow(d.prep[i], (cfg.Heads+cfg.KVHeads)*(cfg.HeadDim()+1))
		}
	}
	d.gu = grow(d.gu, n*2*cfg.Hidden)
	d.sw = grow(d.sw, n*cfg.Hidden)
	for len(d.scratch) < m.par.n {
		d.scratch = append(d.scratch, nil)
	}
	for i := range d.scratch {
		// kernels.AttentionCachedScratch of any run of these n tokens in a slot of maxLen.
		d.scratch[i] = grow(d.scratch[i], max(min(n, 64), cfg.Heads/cfg.KVHeads)*kernels.KeyBlocksLen(maxLen, 1))
	}
	for len(d.own) < m.par.n {
		d.own = append(d.own, ownNorm{})
	}
	if n < minRows {
		for i := range d.own {
			d.own[i].ln = grow(d.own[i].ln, n*C)
			d.own[i].rstd = grow(d.own[i].rstd, n)
		}
	}
	return d
}
