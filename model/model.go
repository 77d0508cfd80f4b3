package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/agentrl/agentrl/model/kernels"
)

// Model is the transformer: its config, weights, gradients and the reusable workspaces of
// training and decoding. It is not safe for concurrent use.
type Model struct {
	Cfg    Config
	Params Params
	Grads  Params // same layout as Params; Backward adds into it, ZeroGrad clears it
	// DType is the safetensors dtype of the checkpoint the weights were loaded from ("F32",
	// "BF16" or "F16"; "" is F32): the weights are float32 in memory whatever it is, and
	// checkpoints of the model are saved in it unless told otherwise.
	DType string
	// LoRA holds the model's low-rank adapters (AddLoRA), nil without; with them the base
	// weights are frozen.
	LoRA *Adapters

	ropeCos, ropeSin []float32 // (MaxSeq, HeadDim/2)
	par              workers
	train            trainWorkspace
	dec              decodeWorkspace
}

// initStd is the standard deviation of the weight matrices at initialization (HF Llama's
// initializer_range). The projections that write into the residual stream (o_proj, down_proj)
// are scaled by 1/sqrt(2·Layers) as in GPT-2, so the stream's variance does not grow with depth.
const initStd = 0.02

// New builds a model with weights drawn from a PCG generator seeded with seed; the same config
// and seed give bit-identical weights.
func New(cfg Config, seed uint64) (*Model, error) {
	if err := checkAlloc(cfg); err != nil {
		return nil, err
	}
	m := newEmpty(cfg, false)
	rng := rand.New(rand.NewPCG(seed, 0x5eed_a9e7_0d31))
	resid := initStd / math.Sqrt(2*float64(cfg.Layers))
	for _, t := range m.Params.tensors {
		switch {
		case t.Bias(): // biases start at 0
		case len(t.Shape) == 1: // norm gains start at 1: the identity scaling
			for i := range t.Data {
				t.Data[i] = 1
			}
		case strings.HasSuffix(t.Name, "o_proj.weight") || strings.HasSuffix(t.Name, "down_proj.weight"):
			fillNormal(rng, t.Data, resid)
		default:
			fillNormal(rng, t.Data, initStd)
		}
	}
	return m, nil
}

// NewZero builds a model whose weights are all zero, for loaders that overwrite every weight
// (a checkpoint): drawing New's random weights first costs ~90 ms at the default size.
func NewZero(cfg Config) (*Model, error) {
	if err := checkAlloc(cfg); err != nil {
		return nil, err
	}
	return newEmpty(cfg, false), nil
}

// checkAlloc validates cfg and refuses, before allocating, a model whose weights and gradients
// alone exceed the machine's memory (MachineMemory).
func checkAlloc(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	return cfg.EstimateMemory(MemoryUse{}).CheckMemory(0)
}

func fillNormal(rng *rand.Rand, x []float32, std float64) {
	for i := range x {
		x[i] = float32(rng.NormFloat64() * std)
	}
}

// newEmpty allocates a model of a validated config with zero weights, and a zero value head
// when value is true.
func newEmpty(cfg Config, value bool) *Model {
	n := numParams(cfg)
	if value {
		n += valueHeadParams(cfg)
	}
	m := &Model{
		Cfg:    cfg,
		Params: newParams(cfg, make([]float32, n), value),
		Grads:  newParams(cfg, make([]float32, n), value),
		par:    workers{n: kernels.Workers()},
	}
	half := cfg.HeadDim() / 2
	m.ropeCos = make([]float32, cfg.MaxSeq*half)
	m.ropeSin = make([]float32, cfg.MaxSeq*half)
	if cfg.RopeScaling.Type != "" {
		kernels.RopeTableFreqs(m.ropeCos, m.ropeSin, cfg.MaxSeq, cfg.ropeInvFreq())
	} else {
		kernels.RopeTable(m.ropeCos, m.ropeSin, cfg.MaxSeq, cfg.HeadDim(), cfg.RopeTheta)
	}
	return m
}

// NumParams is the number of distinct weights (a tied LM head counts once), the value head's
// included.
func (m *Model) NumParams() int { return len(m.Params.Data) }

// HasValueHead reports whether m has a value head (Params.Value).
func (m *Model) HasValueHead() bool { return m.Params.Value != nil }

// AddValueHead gives m a value head, V = value_head.weight · h + value_head.bias on the
// final-norm hidden state h, when it has none. The head starts at zero: every value is 0, and,
// since the gradient reaching the trunk from a value is the head's weight, the critic's loss moves
// only the head until the head has learned something, so a fresh critic does not disturb a
// trained policy. The weights and gradients move to new, longer slices (Params.Data grows by
// Dim+1): an optimizer over the old ones must be made again.
func (m *Model) AddValueHead() {
	if m.HasValueHead() {
		return
	}
	n := numParams(m.Cfg) + valueHeadParams(m.Cfg)
	data, grads := make([]float32, n), make([]float32, n)
	copy(data, m.Params.Data)
	copy(grads, m.Grads.Data)
	m.Params = newParams(m.Cfg, data, true)
	m.Grads = newParams(m.Cfg, grads, true)
}

// SetWorkers sets how many goroutines the model's own parallel loops use (default
// kernels.Workers(), GOMAXPROCS).
// Results are bit-identical for every setting; kernels.Sgemm schedules its own goroutines.
func (m *Model) SetWorkers(n int) { m.par.n = max(n, 1) }

// ZeroGrad clears the gradients, the adapters' included. With adapters the base is frozen and
// Backward writes none of its gradients but the value head's, so only those and the adapters'
// are cleared: clearing the base's would write every page of a buffer as large as the weights
// (gigabytes of resident memory a LoRA step never uses, and the time to write them each step).
func (m *Model) ZeroGrad() {
	if m.LoRA != nil {
		clear(m.LoRA.Grads)
		clear(m.Grads.Value)
		clear(m.Grads.ValueBias)
		return
	}
	clear(m.Grads.Data)
}

// Clone returns an independent copy of the weights with zero gradients and fresh workspaces,
// e.g. a frozen reference policy or an inference snapshot.
func (m *Model) Clone() *Model {
	c := newEmpty(m.Cfg, m.HasValueHead())
	copy(c.Params.Data, m.Params.Data)
	c.par = m.par
	c.DType = m.DType
	if m.LoRA != nil {
		c.AddLoRA(m.LoRA.Cfg, 0)
		copy(c.LoRA.Data, m.LoRA.Data)
	}
	return c
}

// CopyWeightsFrom overwrites m's weights with src's; the configs must be equal. The value head
// is copied when both have one; otherwise m keeps its own (or none): what decodes is the same.
// Adapters are copied too: m gets src's (made when m has none or others), or loses its own when
// src has none.
func (m *Model) CopyWeightsFrom(src *Model) error {
	if src == nil {
		return fmt.Errorf("model: CopyWeightsFrom nil model")
	}
	if src.Cfg != m.Cfg {
		return fmt.Errorf("model: CopyWeightsFrom a different config: %+v into %+v", src.Cfg, m.Cfg)
	}
	n := numParams(m.Cfg)
	if m.HasValueHead() && src.HasValueHead() {
		n = len(m.Params.Data)
	}
	copy(m.Params.Data[:n], src.Params.Data[:n])
	switch {
	case src.LoRA == nil:
		m.LoRA = nil
	case m.LoRA == nil || !sameLoRA(m.LoRA.Cfg, src.LoRA.Cfg):
		m.LoRA = nil
		if err := m.AddLoRA(src.LoRA.Cfg, 0); err != nil {
			return err
		}
		fallthrough
	default:
		copy(m.LoRA.Data, src.LoRA.Data)
	}
	return nil
}
