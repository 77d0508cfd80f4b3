package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"

	"github.com/agentrl/agentrl/model/kernels"
)

// Model is the transformer: its config, weights, gradients and the reusable workspaces of
// training and decoding. It is not safe for concurrent use.
type Model struct {
	Cfg    Config
	Params Params
	Grads  Params // same layout as Params; Backward adds into it, ZeroGrad clears it

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
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := newEmpty(cfg)
	rng := rand.New(rand.NewPCG(seed, 0x5eed_a9e7_0d31))
	resid := initStd / math.Sqrt(2*float64(cfg.Layers))
	for _, t := range m.Params.tensors {
		switch {
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
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return newEmpty(cfg), nil
}

func fillNormal(rng *rand.Rand, x []float32, std float64) {
	for i := range x {
		x[i] = float32(rng.NormFloat64() * std)
	}
}

// newEmpty allocates a model of a validated config with zero weights.
func newEmpty(cfg Config) *Model {
	n := numParams(cfg)
	m := &Model{
		Cfg:    cfg,
		Params: newParams(cfg, make([]float32, n)),
		Grads:  newParams(cfg, make([]float32, n)),
		par:    workers{n: runtime.GOMAXPROCS(0)},
	}
	half := cfg.HeadDim() / 2
	m.ropeCos = make([]float32, cfg.MaxSeq*half)
	m.ropeSin = make([]float32, cfg.MaxSeq*half)
	kernels.RopeTable(m.ropeCos, m.ropeSin, cfg.MaxSeq, cfg.HeadDim(), cfg.RopeTheta)
	return m
}

// NumParams is the number of distinct weights (a tied LM head counts once).
func (m *Model) NumParams() int { return len(m.Params.Data) }

// SetWorkers sets how many goroutines the model's own parallel loops use (default GOMAXPROCS).
// Results are bit-identical for every setting; kernels.Sgemm schedules its own goroutines.
func (m *Model) SetWorkers(n int) { m.par.n = max(n, 1) }

// ZeroGrad clears the gradients.
func (m *Model) ZeroGrad() { clear(m.Grads.Data) }

// Clone returns an independent copy of the weights with zero gradients and fresh workspaces,
// e.g. a frozen reference policy or an inference snapshot.
func (m *Model) Clone() *Model {
	c := newEmpty(m.Cfg)
	copy(c.Params.Data, m.Params.Data)
	c.par = m.par
	return c
}

// CopyWeightsFrom overwrites m's weights with src's; the configs must be equal.
func (m *Model) CopyWeightsFrom(src *Model) error {
	if src == nil {
		return fmt.Errorf("model: CopyWeightsFrom nil model")
	}
	if src.Cfg != m.Cfg {
		return fmt.Errorf("model: CopyWeightsFrom a different config: %+v into %+v", src.Cfg, m.Cfg)
	}
	copy(m.Params.Data, src.Params.Data)
	return nil
}
