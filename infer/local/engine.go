// Package local is the local batched inference engine over the built-in model: an
// infer.Generator with continuous batching over a preallocated KV cache, the token sampler, and
// warm KV-cache slots reused across the turns of an episode.
package local

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/model/kernels"
)

// ErrClosed is returned by Generate after the engine is closed.
var ErrClosed = errors.New("infer: engine closed")

// Limits of an engine's size, checked by NewEngine before it allocates: the KV cache
// (model.Config.KVCacheBytes) is preallocated whole.
const (
	MaxSlots      = 4096
	MaxCacheBytes = 8 << 30
)

// ErrNonFinite is infer.ErrNonFinite: Generate's error wraps it when the model's logits are NaN or
// infinite (broken weights), naming the policy version.
var ErrNonFinite = infer.ErrNonFinite

// EngineConfig sizes the local engine.
type EngineConfig struct {
	// Slots is how many sequences decode together (the continuous batch); further requests wait.
	Slots int
	// MaxLen is the most tokens (prompt + completion) one sequence may hold, at most the model's
	// MaxSeq; 0 means MaxSeq. The KV cache is preallocated for Slots × MaxLen and reused for the engine's life.
	MaxLen int
	// SwapAtCompletion switches to new weights only when no completion is in flight: once weights
	// are pending, the engine starts no new request and switches as soon as the running ones end,
	// so every completion is sampled by one version. Otherwise (the default) the switch happens
	// at the next decode step and sequences in flight continue under the new weights.
	SwapAtCompletion bool
	// Precision is the number formats the engine decodes in (zero value: float32 throughout).
	// With bfloat16 weights it samples from a copy of the weights rounded to bfloat16
	// (model.PackDecodeWeightsAs), with a bfloat16 KV cache from keys and values rounded as they
	// are stored (model.NewKVCacheAs): faster where a step is bound by streaming them, but the
	// logprobs it reports are then not the learner's, so a trainer must treat them as behaviour
	// logprobs of another policy (model.DecodePrecision.Exact says which).
	Precision model.DecodePrecision
}

// Engine is the local batched inference engine over the built-in model: continuous batching
// (requests join and leave between decode steps) over a preallocated KV cache, per-request seeds,
// temperature / top-k / top-p, stop tokens, and weight reloads between decode steps that change
// the reported policy version from the next token on. It is safe for concurrent use; one
// goroutine owns the model and the cache.
type Engine struct {
	cfg    EngineConfig
	mcfg   model.Config
	vocab  int
	submit chan *job
	wake   chan struct{} // a weight load for an idle loop (buffered: a wake-up is never lost)
	quit   chan struct{}
	wg     sync.WaitGroup

	mu      sync.Mutex   // protects pending, version and closed
	pending *model.Model // weights to load before the next decode step
	pendVer int32
	version int32
	applied chan struct{} // closed when pending weights are in use
	closed  bool

	steps atomic.Int64 // Stats
}

// Stats counts what an engine has decoded since it started.
type Stats struct {
	Steps int64 // batched decode steps: per generated token, how full the continuous batch was
}

// Stats returns the decode steps run so far.
func (e *Engine) Stats() Stats { return Stats{Steps: e.steps.Load()} }

// job is one request in flight; its fields after req are owned by the engine goroutine.
type job struct {
	ctx    context.Context
	req    infer.Request
	done   chan result
	onStep func(Step) // nil, or called with every sampled token (GenerateStream)
	con    Constraint // nil, or what the tokens must follow (GenerateConstrained)

	allowed []bool    // the constraint's mask, reused (con only)
	masked  []float32 // the logits under the mask, reused (con only)

	rng    *rand.Rand
	slot   int
	out    infer.Completion
	next   int32 // last sampled token, fed at the next decode step
	budget int   // completion tokens still allowed
}

type result struct {
	c   infer.Completion
	err error
}

// CheckSize refuses an engine over MaxSlots slots or whose KV cache would exceed MaxCacheBytes
// (cfg.MaxLen 0 meaning the model's max_seq), before anything is allocated.
func CheckSize(mc model.Config, cfg EngineConfig) error {
	if cfg.Slots > MaxSlots {
		return fmt.Errorf("infer: %d engine slots exceed the limit of %d (local.MaxSlots)", cfg.Slots, MaxSlots)
	}
	n := cfg.MaxLen
	if n == 0 {
		n = mc.MaxSeq
	}
	if b := mc.KVCacheBytesAs(max(cfg.Slots, 1), n, cfg.Precision.KVCache); b > MaxCacheBytes {
		return fmt.Errorf("infer: a KV cache of %d slots × %d tokens takes %.1f GiB, over the limit of %d GiB (local.MaxCacheBytes); use fewer slots or a shorter context",
			cfg.Slots, n, float64(b)/(1<<30), MaxCacheBytes>>30)
	}
	return nil
}

// NewEngine starts an engine over a private copy of m's weights at the given policy version,
// packed for decoding in cfg.Precision (model.PackDecodeWeightsAs) and repacked at every weight
// load.
func NewEngine(m *model.Model, version int32, cfg EngineConfig) (*Engine, error) {
	if m == nil {
		return nil, errors.New("infer: NewEngine needs a model")
	}
	if cfg.Slots < 1 {
		return nil, fmt.Errorf("infer: engine needs at least one slot, got %d", cfg.Slots)
	}
	if cfg.MaxLen < 0 || cfg.MaxLen > m.Cfg.MaxSeq {
		return nil, fmt.Errorf("infer: engine max length %d must be in [0, the model's max_seq %d] (0: max_seq)", cfg.MaxLen, m.Cfg.MaxSeq)
	}
	if cfg.MaxLen == 0 {
		cfg.MaxLen = m.Cfg.MaxSeq
	}
	if err := CheckSize(m.Cfg, cfg); err != nil {
		return nil, err
	}
	prec, err := cfg.Precision.Normalize()
	if err != nil {
		return nil, fmt.Errorf("infer: engine precision: %w", err)
	}
	cfg.Precision = prec
	e := &Engine{
		cfg:     cfg,
		mcfg:    m.Cfg,
		vocab:   m.Cfg.Vocab,
		submit:  make(chan *job),
		wake:    make(chan struct{}, 1),
		quit:    make(chan struct{}),
		version: version,
	}
	own := m.Clone()
	_ = own.PackDecodeWeightsAs(cfg.Precision.Weights) // checked above
	cache, _ := own.NewKVCacheAs(cfg.Slots, cfg.MaxLen, cfg.Precision.KVCache)
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		e.loop(own, cache)
	}()
	return e, nil
}

// Precision is the number formats the engine decodes in.
func (e *Engine) Precision() model.DecodePrecision { return e.cfg.Precision }

// Version is the policy version of the weights in use.
func (e *Engine) Version() int32 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.version
}

// LoadWeights copies src's weights and makes them current, as version, between two decode steps:
// tokens sampled after that carry the new version (sequences in flight continue under the new
// weights — partial rollouts). It returns once the copy is taken; the returned channel is closed
// when the engine has switched to them.
func (e *Engine) LoadWeights(src *model.Model, version int32) (<-chan struct{}, error) {
	if src == nil || src.Cfg != e.mcfg {
		return nil, errors.New("infer: LoadWeights needs a model of the engine's config")
	}
	snap := src.Clone()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, ErrClosed
	}
	if e.pending == nil {
		e.applied = make(chan struct{})
	}
	e.pending, e.pendVer = snap, version
	applied := e.applied
	// Wake an idle loop so the switch happens now rather than at the next request.
	select {
	case e.wake <- struct{}{}:
	default:
	}
	return applied, nil
}

// Close stops the engine; requests in flight fail with ErrClosed.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	e.mu.Unlock()
	close(e.quit)
	e.wg.Wait()
	return nil
}

// Generate implements Generator.
func (e *Engine) Generate(ctx context.Context, req infer.Request) (infer.Completion, error) {
	return e.generate(ctx, req, nil)
}

func (e *Engine) generate(ctx context.Context, req infer.Request, onStep func(Step)) (infer.Completion, error) {
	return e.generateJob(ctx, req, onStep, nil)
}

func (e *Engine) generateJob(ctx context.Context, req infer.Request, onStep func(Step), con Constraint) (infer.Completion, error) {
	if err := e.check(req); err != nil {
		return infer.Completion{}, err
	}
	j := &job{ctx: ctx, req: req, done: make(chan result, 1), onStep: onStep, con: con}
	select {
	case e.submit <- j:
	case <-ctx.Done():
		return infer.Completion{}, ctx.Err()
	case <-e.quit:
		return infer.Completion{}, ErrClosed
	}
	select {
	case r := <-j.done:
		return r.c, r.err
	case <-e.quit:
		return infer.Completion{}, ErrClosed
	}
}

func (e *Engine) check(req infer.Request) error {
	if len(req.Prompt) == 0 {
		return errors.New("infer: empty prompt")
	}
	if req.MaxTokens < 1 {
		return fmt.Errorf("infer: max_tokens must be at least 1, got %d", req.MaxTokens)
	}
	if len(req.Prompt) >= e.cfg.MaxLen {
		return fmt.Errorf("infer: prompt of %d tokens leaves no room in a sequence of %d", len(req.Prompt), e.cfg.MaxLen)
	}
	if err := req.Sampling.Validate(); err != nil {
		return err
	}
	for i, t := range req.Prompt {
		if t < 0 || int(t) >= e.vocab {
			return fmt.Errorf("infer: prompt token %d is %d, outside the vocabulary of %d", i, t, e.vocab)
		}
	}
	for _, t := range req.Stop {
		if t < 0 || int(t) >= e.vocab {
			return fmt.Errorf("infer: stop token %d is outside the vocabulary of %d", t, e.vocab)
		}
	}
	return nil
}

// loop owns the model and the cache: it admits waiting requests into free slots, runs one
// batched decode step for every active sequence, and retires finished ones.
func (e *Engine) loop(m *model.Model, cache *model.KVCache) {
	slots := make([]*job, e.cfg.Slots)
	var queue []*job
	var sp sampler
	var samplers []*sampler // one per part of a parallel emit
	var emitted []emitResult
	logits := make([]float32, e.cfg.Slots*e.vocab)
	stepSlots := make([]int, 0, e.cfg.Slots)
	stepToks := make([]int32, 0, e.cfg.Slots)
	stepJobs := make([]*job, 0, e.cfg.Slots)
	active := 0

	warm := newWarmSlots(len(slots))
	finish := func(j *job, err error) {
		if j.slot >= 0 {
			slots[j.slot] = nil
			active--
			if err != nil {
				warm.forget(j.slot)
			} else {
				// Every completion token but the last went through the model; the next turn of
				// the episode will start with exactly these tokens.
				warm.extend(j.slot, j.out.Tokens[:len(j.out.Tokens)-1])
			}
		}
		if err != nil {
			j.done <- result{err: err}
			return
		}
		j.done <- result{c: j.out}
	}
	defer func() {
		for _, j := range slots {
			if j != nil {
				j.done <- result{err: ErrClosed}
			}
		}
		for _, j := range queue {
			j.done <- result{err: ErrClosed}
		}
	}()
	enqueue := func(j *job) {
		if j != nil {
			queue = append(queue, j)
		}
	}
	for {
		// Wait for work when idle; otherwise take whatever has arrived without blocking.
		if active == 0 && len(queue) == 0 {
			e.applyWeights(m)
			select {
			case j := <-e.submit:
				enqueue(j)
			case <-e.wake:
				continue
			case <-e.quit:
				return
			}
		}
	drain:
		for {
			select {
			case j := <-e.submit:
				enqueue(j)
			case <-e.quit:
				return
			default:
				break drain
			}
		}
		hold := false // new weights wait for the completions in flight
		if e.cfg.SwapAtCompletion && active > 0 {
			hold = e.hasPending()
		} else {
			e.applyWeights(m)
		}
		version := e.Version()

		// Admit queued requests into free slots: prefill the prompt, sample the first token.
		for len(queue) > 0 && active < len(slots) && !hold {
			j := queue[0]
			queue = queue[1:]
			if err := j.ctx.Err(); err != nil {
				j.slot = -1
				finish(j, err)
				continue
			}
			free, reuse := warm.pick(slots, j.req.Prompt, version)
			j.slot = free
			slots[free] = j
			active++
			j.rng = rand.New(rand.NewPCG(j.req.Seed, j.req.Seed^0x6A09E667F3BCC909))
			j.budget = min(j.req.MaxTokens, e.cfg.MaxLen-len(j.req.Prompt))
			if reuse == 0 {
				cache.Reset(free)
			}
			row := logits[:e.vocab]
			if err := m.Prefill(cache, free, j.req.Prompt[reuse:], row); err != nil {
				warm.forget(free)
				finish(j, fmt.Errorf("infer: prefill: %w", err))
				continue
			}
			warm.start(free, j.req.Prompt, version)
			if done, err := e.emit(j, row, version, &sp); done {
				finish(j, err)
			}
		}

		// One decode step for every sequence that continues.
		stepSlots, stepToks, stepJobs = stepSlots[:0], stepToks[:0], stepJobs[:0]
		for s, j := range slots {
			if j == nil {
				continue
			}
			if err := j.ctx.Err(); err != nil {
				finish(j, err)
				continue
			}
			stepSlots = append(stepSlots, s)
			stepToks = append(stepToks, j.next)
			stepJobs = append(stepJobs, j)
		}
		if len(stepJobs) == 0 {
			continue
		}
		out := logits[:len(stepJobs)*e.vocab]
		if err := m.Step(cache, stepSlots, stepToks, out); err != nil {
			for _, j := range stepJobs {
				finish(j, fmt.Errorf("infer: decode step: %w", err))
			}
			continue
		}
		e.steps.Add(1)
		// Every job draws from its own rng, so sampling the slots in parallel gives the same
		// tokens as one after another; finishing touches the shared slot table, so it stays here.
		emitted = slices.Grow(emitted[:0], len(stepJobs))[:len(stepJobs)]
		parts := 1
		if len(stepJobs) >= parallelEmitMin {
			parts = min(kernels.Workers(), len(stepJobs))
		}
		for len(samplers) < parts {
			samplers = append(samplers, &sampler{})
		}
		kernels.FanOut(parts, func(part int) {
			for i := part * len(stepJobs) / parts; i < (part+1)*len(stepJobs)/parts; i++ {
				done, err := e.emit(stepJobs[i], out[i*e.vocab:(i+1)*e.vocab], version, samplers[part])
				emitted[i] = emitResult{done, err}
			}
		})
		for i, j := range stepJobs {
			if emitted[i].done {
				finish(j, emitted[i].err)
			}
		}
	}
}

// parallelEmitMin is the number of sequences in a decode step from which their next tokens are
// sampled in parallel: a draw over a 2,048-token vocabulary costs ~30 µs (float64 exponentials),
// about a third of a batch-32 step's time when done one after another.
const parallelEmitMin = 4

type emitResult struct {
	done bool
	err  error
}

// emit samples the next token of j from row and reports whether j is finished.
func (e *Engine) emit(j *job, row []float32, version int32, sp *sampler) (bool, error) {
	for i, l := range row {
		if math.IsNaN(float64(l)) || math.IsInf(float64(l), 0) {
			return true, fmt.Errorf("infer: %w at version %d: weights are broken (the logit of token %d is %v after %d prompt and %d generated tokens)",
				infer.ErrNonFinite, version, i, l, len(j.req.Prompt), len(j.out.Tokens))
		}
	}
	sampling := j.req.Sampling
	if j.con != nil {
		var err error
		if row, sampling, err = j.constrain(row); err != nil {
			return true, err
		}
	}
	tok, lp := sp.sample(row, sampling, j.rng)
	if j.con != nil {
		if err := j.con.Advance(tok); err != nil {
			return true, fmt.Errorf("infer: constraint: %w", err)
		}
	}
	j.out.Tokens = append(j.out.Tokens, tok)
	j.out.Logprobs = append(j.out.Logprobs, lp)
	j.out.Versions = append(j.out.Versions, version)
	j.next = tok
	j.budget--
	if j.onStep != nil {
		j.onStep(Step{Token: tok, Logprob: lp, Version: version, Logits: row})
	}
	for _, s := range j.req.Stop {
		if tok == s {
			j.out.Finish = infer.FinishStop
			return true, nil
		}
	}
	if j.budget <= 0 {
		j.out.Finish = infer.FinishLength
		return true, nil
	}
	return false, nil
}

// hasPending reports whether weights wait to be applied.
func (e *Engine) hasPending() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.pending != nil
}

// applyWeights switches to pending weights, if any. Called only between decode steps.
func (e *Engine) applyWeights(m *model.Model) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.pending == nil {
		return
	}
	// LoadWeights checked the config, so the copy cannot fail.
	_ = m.CopyWeightsFrom(e.pending)
	_ = m.PackDecodeWeightsAs(e.cfg.Precision.Weights) // NewEngine checked it
	e.version = e.pendVer
	e.pending = nil
	close(e.applied)
}
