package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/learn"
	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/model/kernels"
	"github.com/agentrl/agentrl/optim"
)

// ModelOptions says what Model measures; `agentrl bench model` documents each field.
type ModelOptions struct {
	Vocab   int    // vocabulary size
	Rows    int    // rows per training batch
	Seq     int    // tokens per row
	Steps   int    // timed training steps (after one warm-up step)
	Prompt  int    // prompt tokens prefilled per decode slot
	Decode  int    // tokens decoded per slot
	Engine  int    // rounds of engineSlots concurrent requests through infer.Engine (0: none)
	EngLen  int    // tokens per engine sequence (0: the model's MaxSeq)
	Configs string // extra model sizes, DIMxLAYERS[,...]
	Rounds  int    // decode rounds (batch 1, then batch 32), and training rounds (steps, then the step's GEMMs)
	Seed    uint64 // seed for weights and data
	Preset  string // measure the model this preset trains instead of model.DefaultConfig
	// Shape measures a published model's shape with random weights instead: a name of
	// NamedShapes or a folder whose config.json gives the shape (checkpoint.ReadConfig).
	Shape string
	// Precisions lists the decode precisions to time ("f32", "bf16", "bf16-kv"; empty: all;
	// "none": no decoding figures).
	Precisions string
	// Batch1Only decodes at batch 1 alone (no batch-32 figures).
	Batch1Only bool
	// LoRA, when positive, makes the training figure the LoRA RL step of adapters of this rank
	// on all seven projections, the base frozen (loraBench), instead of full training.
	LoRA int
}

// Model measures the built-in model: a full training step (forward, backward, AdamW), the
// GEMMs of that step alone (so the ratio of the two shows what the non-GEMM work costs),
// decoding throughput with the KV cache at batch 1 and batch 32, and peak resident memory. It
// prints one line per figure to w.
func Model(ctx context.Context, w io.Writer, c ModelOptions) error {
	if c.Rows <= 0 || c.Seq <= 1 || c.Steps < 0 || c.Prompt <= 0 || c.Decode <= 0 || c.Vocab <= 1 || c.LoRA < 0 {
		return fmt.Errorf("bench model: rows, seq (>1), prompt, decode and vocab (>1) must be positive, steps and lora not negative")
	}
	if c.Rounds <= 0 {
		return fmt.Errorf("bench model: rounds must be positive")
	}
	if c.Engine < 0 || c.EngLen < 0 {
		return fmt.Errorf("bench model: engine rounds and engine-len must not be negative")
	}
	cfg := model.DefaultConfig(c.Vocab)
	if c.Preset != "" {
		p, err := config.Preset(c.Preset)
		if err != nil {
			return fmt.Errorf("bench model: %w", err)
		}
		cfg = p.Model
		cfg.Vocab = p.Tokenizer.VocabSize
	}
	if c.Shape != "" {
		if c.Preset != "" {
			return fmt.Errorf("bench model: --shape and --preset are exclusive")
		}
		var err error
		if cfg, err = shapeConfig(c.Shape); err != nil {
			return err
		}
	}
	variants, err := c.variants()
	if err != nil {
		return err
	}
	cfg.MaxSeq = max(cfg.MaxSeq, c.Seq, c.Prompt+c.Decode+1)
	var alts []model.Config
	if c.Configs != "" {
		for _, spec := range strings.Split(c.Configs, ",") {
			alt, err := sizedConfig(cfg, spec)
			if err != nil {
				return err
			}
			alts = append(alts, alt)
		}
	}
	if c.Engine > 0 {
		if err := c.engineBench(ctx, w, cfg); err != nil {
			return err
		}
	}
	if c.Shape != "" {
		fmt.Fprintf(w, "shape %s: %s; memory estimate for decoding: %s\n", c.Shape, describeConfig(cfg),
			cfg.EstimateMemory(model.MemoryUse{DecodeWeights: model.BF16, CacheSlots: 32, CacheLen: c.Prompt + c.Decode + 1}))
	}
	if c.Steps > 0 {
		train := c.trainBench
		if c.LoRA > 0 {
			train = c.loraBench
		}
		if err := train(w, cfg, true); err != nil {
			return err
		}
		if peak, err := peakRSS(); err == nil {
			fmt.Fprintf(w, "peak resident memory after training steps (VmHWM): %.1f MiB\n", float64(peak)/(1<<20))
		}
		runtime.GC()
		debug.FreeOSMemory()
	}
	if len(variants) > 0 {
		if err := c.decodeRounds(ctx, w, cfg, variants); err != nil {
			return err
		}
	}
	for _, alt := range alts {
		if c.Steps > 0 {
			if err := c.trainBench(w, alt, false); err != nil {
				return err
			}
		}
		if len(variants) > 0 {
			if err := c.decodeRounds(ctx, w, alt, variants); err != nil {
				return err
			}
		}
	}
	return nil
}

// variants are the decodeVariants that c.Precisions names, in their order.
func (c *ModelOptions) variants() ([]decodeVariant, error) {
	switch strings.TrimSpace(c.Precisions) {
	case "":
		return decodeVariants, nil
	case "none":
		return nil, nil
	}
	names := map[string]bool{}
	for _, p := range strings.Split(c.Precisions, ",") {
		p = strings.TrimSpace(p)
		if !slices.ContainsFunc(decodeVariants, func(v decodeVariant) bool { return v.key == p }) {
			return nil, fmt.Errorf("bench model: precision %q is none of f32, bf16, bf16-kv", p)
		}
		names[p] = true
	}
	var vs []decodeVariant
	for _, v := range decodeVariants {
		if names[v.key] {
			vs = append(vs, v)
		}
	}
	return vs, nil
}

// decodeVariant is one precision decodeRounds measures decoding in.
type decodeVariant struct {
	key      string // its name in --precision
	name     string // "" for float32 throughout
	prec     model.DecodePrecision
	roofline bool // print the batch-1 roofline (what the weights' bytes allow)
}

// decodeVariants are float32 throughout, then what rollout.precision samples with: bfloat16
// weights, and bfloat16 weights and KV cache.
var decodeVariants = []decodeVariant{
	{"f32", "", model.DecodePrecision{}, true},
	{"bf16", "bf16 weights", model.DecodePrecision{Weights: model.BF16}, true},
	{"bf16-kv", "bf16 weights and KV cache", model.DecodePrecision{Weights: model.BF16, KVCache: model.BF16}, false},
}

// decodeRounds alternates batch-1 and batch-32 decoding for c.Rounds rounds, so both see the
// same load, each in every decodeVariant, and prints the median of the rounds' throughput ratios:
// batch 32 over batch 1, and each bfloat16 variant over float32. Before and after each round's
// batch 1 it measures the machine's read bandwidth over a buffer of the weights' size in each
// precision (kernels.ReadBandwidth, the same goroutines; the faster of the two counts): a
// batch-1 step reads every weight once, so the
// weights streamed per second over that rate is the fraction of the physical limit that
// decoding reaches, a ratio taken in one run under one load. It is printed twice: from the
// tokens per second over all steps, and from the median step, which is what the read bandwidth
// is too (the median pass, kernels.ReadBandwidth). On a machine shared with other processes a
// step that lost its core for a time slice weighs on the mean by its length; on the median
// only as one step. Each precision and batch decodes with one model in every round
// (newDecoder).
func (c *ModelOptions) decodeRounds(ctx context.Context, w io.Writer, cfg model.Config, decodeVariants []decodeVariant) error {
	params := matmulParams(cfg)
	fmt.Fprintf(w, "  cpu: %s; kernels %s, GOMAXPROCS %d\n", kernels.CPU(), kernels.SgemmKernel(), runtime.GOMAXPROCS(0))
	weightBytes := func(v decodeVariant) float64 {
		if v.prec.Weights.Exact() {
			return 4 * params
		}
		return 2 * params
	}
	nv := len(decodeVariants)
	// Per variant: batch 32 / batch 1; batch-1 weights streamed (bytes/s), its fraction of the read
	// bandwidth, and that bandwidth; batch-1 and batch-32 throughput over float32's.
	ratios, streams, fractions, reads := make([][]float64, nv), make([][]float64, nv), make([][]float64, nv), make([][]float64, nv)
	medFractions := make([][]float64, nv)
	speedups := make([][2][]float64, nv)
	decoders := make([][2]*decoder, nv)
	models := make([]*model.Model, nv) // one per variant, shared by its batch-1 and batch-32 caches
	for range c.Rounds {
		rate := make([][2]float64, nv)
		medStep := make([][2]time.Duration, nv)
		batches := []int{1, 32}
		if c.Batch1Only {
			batches = batches[:1]
		}
		for b, slots := range batches {
			for i, v := range decodeVariants {
				if err := ctx.Err(); err != nil {
					return err
				}
				if decoders[i][b] == nil {
					d, err := c.newDecoder(cfg, models[i], slots, v)
					if err != nil {
						return err
					}
					decoders[i][b], models[i] = d, d.m
				}
				if slots == 1 && v.roofline {
					reads[i] = append(reads[i], kernels.ReadBandwidth(int(weightBytes(v)), 150*time.Millisecond))
				}
				r, med, err := c.decodeBench(w, decoders[i][b], slots, v)
				if err != nil {
					return err
				}
				rate[i][b], medStep[i][b] = r, med
				if slots == 1 && v.roofline {
					// And after: a read disturbed by another process reads slower, which would
					// make decoding look closer to the limit than it is; the faster of the two
					// is the limit.
					at := len(reads[i]) - 1
					reads[i][at] = max(reads[i][at], kernels.ReadBandwidth(int(weightBytes(v)), 150*time.Millisecond))
				}
			}
		}
		for i, v := range decodeVariants {
			ratios[i] = append(ratios[i], rate[i][1]/rate[i][0])
			if v.roofline {
				read := reads[i][len(reads[i])-1]
				streams[i] = append(streams[i], rate[i][0]*weightBytes(v))
				fractions[i] = append(fractions[i], rate[i][0]*weightBytes(v)/read)
				medFractions[i] = append(medFractions[i], weightBytes(v)/medStep[i][0].Seconds()/read)
			}
			for b := range 2 {
				speedups[i][b] = append(speedups[i][b], rate[i][b]/rate[0][b])
			}
		}
	}
	med := func(x []float64) (m, lo, hi float64) {
		x = slices.Clone(x)
		slices.Sort(x)
		return x[len(x)/2], x[0], x[len(x)-1]
	}
	for i, v := range decodeVariants {
		if !v.roofline {
			continue
		}
		what := "weights"
		if v.name != "" {
			what = v.name
		}
		f, flo, fhi := med(fractions[i])
		fm, fmlo, fmhi := med(medFractions[i])
		st, _, _ := med(streams[i])
		rd, _, _ := med(reads[i])
		fmt.Fprintf(w, "  decode roofline, batch 1: %s streamed at %.1f GB/s of %.1f MB weights = %.2f of the read bandwidth (median over %d rounds, %.2f–%.2f; read %.1f GB/s over a buffer of the weights' size, same run); by the median step %.2f (%.2f–%.2f)\n",
			what, st/1e9, weightBytes(v)/1e6, f, len(fractions[i]), flo, fhi, rd/1e9, fm, fmlo, fmhi)
	}
	if c.Batch1Only {
		if decodeVariants[0].key == "f32" {
			for i, v := range decodeVariants[1:] {
				s1, lo1, hi1 := med(speedups[i+1][0])
				fmt.Fprintf(w, "  decode speed-up of %s over f32: batch 1 median %.2f× (%.2f–%.2f) over %d rounds\n", v.name, s1, lo1, hi1, len(speedups[i+1][0]))
			}
		}
		return nil
	}
	for i, v := range decodeVariants {
		r, lo, hi := med(ratios[i])
		what := ""
		if v.name != "" {
			what = " with " + v.name
		}
		fmt.Fprintf(w, "  decode batch 32 / batch 1 throughput%s: median %.2f× over %d rounds (%.2f–%.2f)\n", what, r, len(ratios[i]), lo, hi)
	}
	if decodeVariants[0].key != "f32" {
		return nil
	}
	for i, v := range decodeVariants[1:] {
		s1, lo1, hi1 := med(speedups[i+1][0])
		s32, lo32, hi32 := med(speedups[i+1][1])
		fmt.Fprintf(w, "  decode speed-up of %s over f32: batch 1 median %.2f× (%.2f–%.2f), batch 32 median %.2f× (%.2f–%.2f) over %d rounds\n",
			v.name, s1, lo1, hi1, s32, lo32, hi32, len(speedups[i+1][0]))
	}
	return nil
}

// sizedConfig derives a config of another width and depth with the default's proportions.
func sizedConfig(base model.Config, spec string) (model.Config, error) {
	d, l, ok := strings.Cut(strings.TrimSpace(spec), "x")
	dim, err1 := strconv.Atoi(d)
	layers, err2 := strconv.Atoi(l)
	if !ok || err1 != nil || err2 != nil {
		return base, fmt.Errorf("bench model: size %q is not DIMxLAYERS", spec)
	}
	c := base
	c.Dim, c.Layers = dim, layers
	c.Heads = max(dim/32, 1)
	c.KVHeads = max(c.Heads/2, 1)
	c.Hidden = (dim*8/3 + 15) / 16 * 16
	if err := c.Validate(); err != nil {
		return base, fmt.Errorf("bench model: size %q: %w", spec, err)
	}
	return c, nil
}

// trainBench times training steps and, when detail is set, the step's GEMMs alone: then for
// c.Rounds rounds, each Steps steps followed by Steps runs of the GEMMs, so that a change in
// the machine's load between the two measurements biases no ratio; the figures of the median
// round (by ratio) are printed, with the ratio's range.
func (c *ModelOptions) trainBench(w io.Writer, cfg model.Config, detail bool) error {
	m, err := model.New(cfg, c.Seed)
	if err != nil {
		return err
	}
	opt, err := optim.NewAdamW(optim.DefaultConfig(), m.NumParams(), learn.DecaySegments(&m.Params))
	if err != nil {
		return err
	}
	b := benchBatch(cfg, c.Rows, c.Seq, c.Seed)
	step := func() (fwdBwd, adam time.Duration, err error) {
		t0 := time.Now()
		m.ZeroGrad()
		if _, err := m.TrainCE(b); err != nil {
			return 0, 0, err
		}
		t1 := time.Now()
		optim.ClipGradNorm(m.Grads.Data, 1)
		if err := opt.Step(m.Params.Data, m.Grads.Data, 1e-3); err != nil {
			return 0, 0, err
		}
		return t1.Sub(t0), time.Since(t1), nil
	}
	if _, _, err := step(); err != nil { // warm-up: sizes the workspace
		return err
	}
	type round struct{ fb, ad, cpu, gemm, ratio float64 }
	rounds := 1
	if detail {
		rounds = c.Rounds
	}
	flops := trainFLOPs(cfg, c.Rows, c.Seq)
	gemmFlops := stepGEMMFLOPs(cfg, c.Rows*c.Seq)
	var rs []round
	for range rounds {
		var fb, ad time.Duration
		cpu0 := cpuTime()
		for range c.Steps {
			f, a, err := step()
			if err != nil {
				return err
			}
			fb, ad = fb+f, ad+a
		}
		r := round{fb: fb.Seconds() / float64(c.Steps), ad: ad.Seconds() / float64(c.Steps),
			cpu: (cpuTime() - cpu0).Seconds() / float64(c.Steps)}
		if detail {
			r.gemm = timeStepGEMMs(cfg, c.Rows*c.Seq, c.Steps)
			r.ratio = (flops / (r.fb + r.ad)) / (gemmFlops / r.gemm)
		}
		rs = append(rs, r)
	}
	slices.SortStableFunc(rs, func(a, b round) int { return cmp.Compare(a.ratio, b.ratio) })
	r := rs[len(rs)/2]
	tokens := float64(c.Rows * c.Seq)
	per := r.fb + r.ad
	fmt.Fprintf(w, "config dim %d layers %d heads %d/%d hidden %d vocab %d: %.2f M params\n",
		cfg.Dim, cfg.Layers, cfg.Heads, cfg.KVHeads, cfg.Hidden, cfg.Vocab, float64(m.NumParams())/1e6)
	if c.Shape != "" {
		fmt.Fprintf(w, "  memory estimate of full training at %d tokens: %s\n", c.Rows*c.Seq,
			cfg.EstimateMemory(model.MemoryUse{Train: true, TrainTokens: c.Rows * c.Seq}))
	}
	fmt.Fprintf(w, "  train step %d×%d tokens: %.1f ms/step (fwd+bwd %.1f, clip+AdamW %.1f), %.0f tokens/s, %.1f GFLOP/s model FLOPs; %.2f CPU-s/step\n",
		c.Rows, c.Seq, per*1e3, r.fb*1e3, r.ad*1e3, tokens/per, flops/per/1e9, r.cpu)
	if !detail {
		return nil
	}
	fmt.Fprintf(w, "  sgemm at the step's shapes (all %d projection GEMMs of one step): %.1f ms, %.1f GFLOP/s; step rate / GEMM rate = %.2f (median of %d rounds alternating steps and GEMMs, %.2f–%.2f)\n",
		len(stepGEMMs(cfg, c.Rows*c.Seq)), r.gemm*1e3, gemmFlops/r.gemm/1e9, r.ratio, len(rs), rs[0].ratio, rs[len(rs)-1].ratio)
	return nil
}

// benchBatch packs random sequences of 32 to Seq tokens into rows; every position but each
// sequence's last has a target.
func benchBatch(cfg model.Config, rows, T int, seed uint64) *model.Batch {
	rng := rand.New(rand.NewPCG(seed, 3))
	n := rows * T
	b := &model.Batch{Rows: rows, T: T, Tokens: make([]int32, n), Targets: make([]int32, n), Pos: make([]int32, n), Seg: make([]int32, n)}
	for r := 0; r < rows; r++ {
		col, seg := 0, int32(0)
		for col < T {
			l := min(T-col, 32+rng.IntN(max(T-31, 1)))
			for j := 0; j < l; j++ {
				i := r*T + col + j
				b.Tokens[i] = int32(rng.IntN(cfg.Vocab))
				b.Pos[i], b.Seg[i] = int32(j), seg
			}
			for j := 0; j < l; j++ {
				i := r*T + col + j
				b.Targets[i] = -1
				if j+1 < l {
					b.Targets[i] = b.Tokens[i+1]
				}
			}
			col += l
			seg++
		}
	}
	return b
}

// matmulParams counts the weights that take part in a matrix product per token (everything but
// the embedding lookup and the norm gains; a tied head is counted as the head).
func matmulParams(cfg model.Config) float64 {
	hd := cfg.HeadDim()
	layer := (cfg.Heads+2*cfg.KVHeads)*hd*cfg.Dim + cfg.Heads*hd*cfg.Dim + 3*cfg.Hidden*cfg.Dim
	return float64(cfg.Layers*layer + cfg.Vocab*cfg.Dim)
}

// trainFLOPs is the model FLOPs of one training step: 6 per matmul weight per token (forward 2,
// backward 4; Kaplan et al. 2020) plus causal attention, whose forward costs 4·Dim FLOPs per
// visible key and whose rows see (T+1)/2 keys on average: 6·Layers·Dim·(T+1) per token for
// forward and backward. Packing shortens the visible context, so this overstates the attention
// work of packed batches slightly; the figure is conservative for the model, generous for none.
func trainFLOPs(cfg model.Config, rows, T int) float64 {
	tokens := float64(rows * T)
	return tokens * (6*matmulParams(cfg) + 6*float64(cfg.Layers*cfg.Heads*cfg.HeadDim()*(T+1)))
}

// gemmShape is one Sgemm call of a training step.
type gemmShape struct {
	ta, tb  bool
	m, n, k int
}

// stepGEMMs lists the projection GEMMs of one training step over n tokens (all with targets):
// per layer forward X·Wᵀ, backward dX = dY·W and dW += dYᵀ·X for qkv, o, gate/up and down, and
// the same three for the LM head.
func stepGEMMs(cfg model.Config, n int) []gemmShape { return stepGEMMsOf(cfg, n, true) }

// stepGEMMsOf lists stepGEMMs, without the weight gradients dW when weightGrads is false (a
// LoRA step, whose base weights are frozen).
func stepGEMMsOf(cfg model.Config, n int, weightGrads bool) []gemmShape {
	hd := cfg.HeadDim()
	type lin struct{ out, in int }
	lins := []lin{{(cfg.Heads + 2*cfg.KVHeads) * hd, cfg.Dim}, {cfg.Dim, cfg.Heads * hd}, {2 * cfg.Hidden, cfg.Dim}, {cfg.Dim, cfg.Hidden}}
	var s []gemmShape
	add := func(l lin) {
		s = append(s, gemmShape{false, true, n, l.out, l.in}, gemmShape{false, false, n, l.in, l.out})
		if weightGrads {
			s = append(s, gemmShape{true, false, l.out, l.in, n})
		}
	}
	for range cfg.Layers {
		for _, l := range lins {
			add(l)
		}
	}
	add(lin{cfg.Vocab, cfg.Dim})
	return s
}

func stepGEMMFLOPs(cfg model.Config, n int) float64 { return gemmFLOPs(stepGEMMs(cfg, n)) }

func gemmFLOPs(shapes []gemmShape) float64 {
	var f float64
	for _, g := range shapes {
		f += 2 * float64(g.m) * float64(g.n) * float64(g.k)
	}
	return f
}

// timeStepGEMMs runs the step's GEMMs reps times through kernels.Sgemm and returns the seconds
// per step.
func timeStepGEMMs(cfg model.Config, n, reps int) float64 { return timeGEMMs(stepGEMMs(cfg, n), reps) }

// timeGEMMs runs shapes reps times through kernels.Sgemm (after one untimed run) and returns
// the seconds per run.
func timeGEMMs(shapes []gemmShape, reps int) float64 {
	size := 0
	for _, g := range shapes {
		size = max(size, g.m*g.k, g.k*g.n, g.m*g.n)
	}
	rng := rand.New(rand.NewPCG(5, 5))
	a, b, c := make([]float32, size), make([]float32, size), make([]float32, size)
	for i := range a {
		a[i], b[i] = rng.Float32()-0.5, rng.Float32()-0.5
	}
	run := func() {
		for _, g := range shapes {
			lda, ldb := g.k, g.n
			if g.ta {
				lda = g.m
			}
			if g.tb {
				ldb = g.k
			}
			kernels.Sgemm(g.ta, g.tb, g.m, g.n, g.k, 1, a, lda, b, ldb, 0, c, g.n)
		}
	}
	run()
	t0 := time.Now()
	for range reps {
		run()
	}
	return time.Since(t0).Seconds() / float64(reps)
}

// decoder is one model and KV cache that decodeBench decodes with in every round: a model's
// batch-1 step tuner (model.Step) lives as long as its packed weights, so the rounds after the
// first see it settled, as a run that decodes with one model for hours does. The batch-1 and
// batch-32 decoders of a precision share the model (a published shape's weights take
// gigabytes), each with its own KV cache.
type decoder struct {
	m     *model.Model
	cache *model.KVCache
}

// newDecoder builds the model of cfg with its decode weights packed in v's precision (as
// infer.Engine decodes), unless m is that model already, and a KV cache of slots for the
// benchmark's context, and decodes warm untimed steps at batch 1: the step tuner's first probe
// window, run once per model.
func (c *ModelOptions) newDecoder(cfg model.Config, m *model.Model, slots int, v decodeVariant) (*decoder, error) {
	if m == nil {
		var err error
		if m, err = model.New(cfg, c.Seed); err != nil {
			return nil, err
		}
		if err := m.PackDecodeWeightsAs(v.prec.Weights); err != nil {
			return nil, err
		}
	}
	cache, err := m.NewKVCacheAs(slots, c.Prompt+c.Decode+1, v.prec.KVCache)
	if err != nil {
		return nil, err
	}
	d := &decoder{m: m, cache: cache}
	if slots == 1 {
		logits := make([]float32, cfg.Vocab)
		if err := m.Prefill(cache, 0, []int32{1}, logits); err != nil {
			return nil, err
		}
		for range min(decodeWarm, c.Prompt+c.Decode-1) {
			if err := m.Step(cache, []int{0}, []int32{argmax(logits)}, logits); err != nil {
				return nil, err
			}
		}
	}
	return d, nil
}

// decodeWarm is the untimed batch-1 steps of a new decoder: the step tuner's first window of
// unsplit steps and the steps after it (kernels.SplitTuner).
const decodeWarm = 32

// decodeBench prefills slots with Prompt tokens each, then decodes Decode tokens per slot with
// batched Steps in v's precision, and reports generated tokens per second and the median
// step's time.
func (c *ModelOptions) decodeBench(w io.Writer, d *decoder, slots int, v decodeVariant) (rate float64, median time.Duration, err error) {
	m, cache, cfg := d.m, d.cache, d.m.Cfg
	name := fmt.Sprintf("decode batch %d", slots)
	if v.name != "" {
		name = fmt.Sprintf("decode %s, batch %d", v.name, slots)
	}
	rng := rand.New(rand.NewPCG(c.Seed, 9))
	logits := make([]float32, slots*cfg.Vocab)
	t0 := time.Now()
	for s := 0; s < slots; s++ {
		prompt := make([]int32, c.Prompt)
		for i := range prompt {
			prompt[i] = int32(rng.IntN(cfg.Vocab))
		}
		cache.Reset(s)
		if err := m.Prefill(cache, s, prompt, logits[:cfg.Vocab]); err != nil {
			return 0, 0, err
		}
	}
	prefill := time.Since(t0)
	ids := make([]int, slots)
	toks := make([]int32, slots)
	for i := range ids {
		ids[i] = i
	}
	steps := make([]time.Duration, c.Decode)
	t0 = time.Now()
	for k := range c.Decode {
		for i := range toks {
			toks[i] = argmax(logits[i*cfg.Vocab : (i+1)*cfg.Vocab])
		}
		s0 := time.Now()
		if err := m.Step(cache, ids, toks, logits); err != nil {
			return 0, 0, err
		}
		steps[k] = time.Since(s0)
	}
	dec := time.Since(t0)
	rate = float64(slots*c.Decode) / dec.Seconds()
	slices.Sort(steps)
	median = steps[len(steps)/2]
	fmt.Fprintf(w, "  %s (KV cache, context %d→%d): %.0f tokens/s (%s per Step, median %s); prefill %.0f tokens/s\n",
		name, c.Prompt, c.Prompt+c.Decode, rate, stepTime(dec/time.Duration(c.Decode)), stepTime(median), float64(slots*c.Prompt)/prefill.Seconds())
	return rate, median, nil
}

// stepTime prints a step's time in milliseconds, or in microseconds below one.
func stepTime(d time.Duration) string {
	if d < time.Millisecond {
		return fmt.Sprintf("%.1f µs", float64(d.Nanoseconds())/1e3)
	}
	return fmt.Sprintf("%.2f ms", d.Seconds()*1e3)
}

func argmax(x []float32) int32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return int32(best)
}
