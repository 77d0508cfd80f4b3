package model

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/agentrl/agentrl/model/kernels"
)

// LoRAConfig is a run's `lora` block: low-rank adapters (Hu et al. 2021) beside the frozen
// weights of the listed projections. A target projection W (out×in) computes
// x·Wᵀ + (alpha/rank)·(x·Aᵀ)·Bᵀ with A (rank×in) and B (out×rank) trained, as PEFT's LoRA layers
// do; B starts at zero, so a fresh adapter changes nothing.
type LoRAConfig struct {
	Rank    int      `yaml:"rank"`
	Alpha   float64  `yaml:"alpha"`
	Dropout float64  `yaml:"dropout"`
	Targets []string `yaml:"targets"`
}

// The projections an adapter may target, by their Hugging Face module names.
var loraTargets = []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}

const (
	tQ = iota
	tK
	tV
	tO
	tGate
	tUp
	tDown
	numTargets
)

// MaxLoRARank bounds the rank of an adapter.
const MaxLoRARank = 1024

// Validate reports the first setting that cannot describe adapters of a model of c.
func (l LoRAConfig) Validate(c Config) error {
	switch {
	case l.Rank < 1 || l.Rank > MaxLoRARank:
		return fmt.Errorf("lora: rank must be in [1, %d], got %d", MaxLoRARank, l.Rank)
	case !(l.Alpha > 0) || math.IsInf(l.Alpha, 0):
		return fmt.Errorf("lora: alpha must be a positive number, got %v", l.Alpha)
	case l.Dropout != 0:
		return fmt.Errorf("lora: dropout %v is not implemented (only 0)", l.Dropout)
	case len(l.Targets) == 0:
		return fmt.Errorf("lora: targets must name at least one of %v", loraTargets)
	}
	seen := map[string]bool{}
	for _, t := range l.Targets {
		if !slices.Contains(loraTargets, t) {
			return fmt.Errorf("lora: target %q is not one of %v", t, loraTargets)
		}
		if seen[t] {
			return fmt.Errorf("lora: target %q is listed twice", t)
		}
		seen[t] = true
	}
	return nil
}

// Scale is the factor of the adapters' product, alpha/rank.
func (l LoRAConfig) Scale() float32 { return float32(l.Alpha / float64(l.Rank)) }

// Adapters are the LoRA weights of a model: A and B of every targeted projection of every
// layer in one flat slice, Data, with gradients in Grads (same layout), so an optimizer is one
// loop over one slice as for the full weights.
type Adapters struct {
	Cfg   LoRAConfig
	Data  []float32
	Grads []float32
	// a and b are the views of layer l's target t (nil where t is not targeted).
	a, b    [][numTargets][]float32
	tensors []NamedTensor
	gtens   []NamedTensor
	scale   float32
}

// loraShape is target t's output and input widths (B is out×rank, A rank×in) and where its
// output columns start in the product it belongs to (the fused q/k/v or gate/up one).
func (c Config) loraShape(t int) (out, in, col int) {
	hd := c.HeadDim()
	switch t {
	case tQ:
		return c.Heads * hd, c.Dim, 0
	case tK:
		return c.KVHeads * hd, c.Dim, c.Heads * hd
	case tV:
		return c.KVHeads * hd, c.Dim, (c.Heads + c.KVHeads) * hd
	case tO:
		return c.Dim, c.attnDim(), 0
	case tGate:
		return c.Hidden, c.Dim, 0
	case tUp:
		return c.Hidden, c.Dim, c.Hidden
	}
	return c.Dim, c.Hidden, 0
}

// loraModule is target t's module path within a layer.
func loraModule(t int) string {
	if t <= tO {
		return "self_attn." + loraTargets[t]
	}
	return "mlp." + loraTargets[t]
}

// AddLoRA gives m adapters of cfg on every layer's targeted projections, A drawn as PEFT draws
// it (Kaiming-uniform with a = √5: uniform in ±1/√in) from seed and B zero; the base weights are
// frozen from then on (Backward adds no gradient into Grads). Forward, Backward and decoding
// include the adapters. Their tensors are named as PEFT names them in adapter_model.safetensors
// (base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight).
func (m *Model) AddLoRA(cfg LoRAConfig, seed uint64) error {
	if m.LoRA != nil {
		return errors.New("model: the model has adapters already")
	}
	if err := cfg.Validate(m.Cfg); err != nil {
		return fmt.Errorf("model: %w", err)
	}
	cfg.Targets = slices.Clone(cfg.Targets)
	c := m.Cfg
	on := [numTargets]bool{}
	n := 0
	for _, name := range cfg.Targets {
		t := slices.Index(loraTargets, name)
		on[t] = true
		out, in, _ := c.loraShape(t)
		n += cfg.Rank * (out + in)
	}
	n *= c.Layers
	ad := &Adapters{Cfg: cfg, Data: make([]float32, n), Grads: make([]float32, n), scale: cfg.Scale(),
		a: make([][numTargets][]float32, c.Layers), b: make([][numTargets][]float32, c.Layers)}
	off := 0
	r := cfg.Rank
	for l := range c.Layers {
		for t := range numTargets {
			if !on[t] {
				continue
			}
			out, in, _ := c.loraShape(t)
			pre := fmt.Sprintf("base_model.model.model.layers.%d.%s.", l, loraModule(t))
			ad.a[l][t] = ad.Data[off : off+r*in : off+r*in]
			ad.tensors = append(ad.tensors, NamedTensor{Name: pre + "lora_A.weight", Shape: []int{r, in}, Offset: off, Data: ad.a[l][t]})
			ad.gtens = append(ad.gtens, NamedTensor{Name: pre + "lora_A.weight", Shape: []int{r, in}, Offset: off, Data: ad.Grads[off : off+r*in]})
			off += r * in
			ad.b[l][t] = ad.Data[off : off+out*r : off+out*r]
			ad.tensors = append(ad.tensors, NamedTensor{Name: pre + "lora_B.weight", Shape: []int{out, r}, Offset: off, Data: ad.b[l][t]})
			ad.gtens = append(ad.gtens, NamedTensor{Name: pre + "lora_B.weight", Shape: []int{out, r}, Offset: off, Data: ad.Grads[off : off+out*r]})
			off += out * r
		}
	}
	rng := rand.New(rand.NewPCG(seed, 0x10ba))
	for l := range c.Layers {
		for t := range numTargets {
			if a := ad.a[l][t]; a != nil {
				_, in, _ := c.loraShape(t)
				bound := 1 / math.Sqrt(float64(in))
				for i := range a {
					a[i] = float32((rng.Float64()*2 - 1) * bound)
				}
			}
		}
	}
	m.LoRA = ad
	m.dec.packed = nil // decode weights merge the adapters: pack again
	return nil
}

// Tensors lists the adapters' weights in storage order under PEFT's names; GradTensors their
// gradients alike.
func (a *Adapters) Tensors() []NamedTensor     { return slices.Clone(a.tensors) }
func (a *Adapters) GradTensors() []NamedTensor { return slices.Clone(a.gtens) }

// ZeroGrad clears the adapters' gradients.
func (a *Adapters) ZeroGrad() { clear(a.Grads) }

// HasLoRA reports whether m has adapters (its base weights are then frozen).
func (m *Model) HasLoRA() bool { return m.LoRA != nil }

// Merged returns a copy of m without adapters whose weights are the base weights plus each
// adapter's product, W + (alpha/rank)·B·A: what a merged export saves, computing what m
// computes up to rounding.
func (m *Model) Merged() *Model {
	c := m.Clone()
	c.MergeLoRA()
	return c
}

// targetWeight is the rows of target t's weight in layer l (out×in, row-major) within its
// stored matrix, and that matrix's row stride.
func (m *Model) targetWeight(l, t int) ([]float32, int) {
	c, p := m.Cfg, &m.Params.Layers[l]
	_, in, col := c.loraShape(t)
	switch t {
	case tQ, tK, tV:
		return p.QKV[col*in:], in
	case tO:
		return p.O, in
	case tGate, tUp:
		return p.GateUp[col*in:], in
	}
	return p.Down, in
}

// mergeInto adds scale·B·A of layer l's target t to w (out×in, row stride ld).
func (a *Adapters) mergeInto(c Config, l, t int, w []float32, ld int) {
	A, B := a.a[l][t], a.b[l][t]
	if A == nil {
		return
	}
	out, in, _ := c.loraShape(t)
	kernels.Sgemm(false, false, out, in, a.Cfg.Rank, a.scale, B, a.Cfg.Rank, A, in, 1, w, ld)
}

// loraWorkspace keeps, per layer and target, u = x·Aᵀ of the last Forward (rows×rank) for
// Backward, and the gradient scratch du.
type loraWorkspace struct {
	u  [][numTargets][]float32
	du []float32
}

// loraForward adds the adapters of the targets of product lin in layer l to its output y (n
// rows of ldy floats) from its input x: y[:, col:col+out] += scale·(x·Aᵀ)·Bᵀ, keeping x·Aᵀ.
func (m *Model) loraForward(l, lin, n int, x, y []float32, ldy int) {
	ad := m.LoRA
	w := &m.train.lora
	for len(w.u) < m.Cfg.Layers {
		w.u = append(w.u, [numTargets][]float32{})
	}
	r := ad.Cfg.Rank
	for _, t := range linTargets[lin] {
		A, B := ad.a[l][t], ad.b[l][t]
		if A == nil {
			continue
		}
		out, in, col := m.Cfg.loraShape(t)
		u := grow(w.u[l][t], n*r)
		w.u[l][t] = u
		kernels.Sgemm(false, true, n, r, in, 1, x, in, A, in, 0, u, r)
		kernels.Sgemm(false, true, n, out, r, ad.scale, u, r, B, r, 1, y[col:], ldy)
	}
}

// linTargets lists the adapter targets of each fused product.
var linTargets = [numLinear][]int{linQKV: {tQ, tK, tV}, linO: {tO}, linGateUp: {tGate, tUp}, linDown: {tDown}}

// loraBackward adds the adapters' gradients for product lin of layer l given its output
// gradient dy (n rows of ldy) and input x, and their share of the input gradient into dx (n×in,
// already holding the base product's): with u = x·Aᵀ and du = scale·dy·B,
// dB += scale·dyᵀ·u, dA += duᵀ·x, dx += du·A.
func (m *Model) loraBackward(l, lin, n int, x, dy []float32, ldy int, dx []float32) {
	ad := m.LoRA
	w := &m.train.lora
	r := ad.Cfg.Rank
	w.du = grow(w.du, n*r)
	for _, t := range linTargets[lin] {
		A, B := ad.a[l][t], ad.b[l][t]
		if A == nil {
			continue
		}
		out, in, col := m.Cfg.loraShape(t)
		dA, dB := ad.gradA(l, t), ad.gradB(l, t)
		u := w.u[l][t][:n*r]
		kernels.Sgemm(true, false, out, r, n, ad.scale, dy[col:], ldy, u, r, 1, dB, r)
		kernels.Sgemm(false, false, n, r, out, ad.scale, dy[col:], ldy, B, r, 0, w.du, r)
		kernels.Sgemm(true, false, r, in, n, 1, w.du, r, x, in, 1, dA, in)
		kernels.Sgemm(false, false, n, in, r, 1, w.du, r, A, in, 1, dx, in)
	}
}

// gradA and gradB are the gradients of layer l's target t: the slices of Grads at A's and B's
// offsets in Data.
func (a *Adapters) gradA(l, t int) []float32 { return a.gradOf(a.a[l][t]) }
func (a *Adapters) gradB(l, t int) []float32 { return a.gradOf(a.b[l][t]) }

func (a *Adapters) gradOf(v []float32) []float32 {
	for i, tn := range a.tensors {
		if len(tn.Data) > 0 && &tn.Data[0] == &v[0] {
			return a.gtens[i].Data
		}
	}
	panic("model: adapter view not found")
}

// Trainable is what an optimizer updates: the weights, their gradients and their tensors
// (Params.Data, Grads.Data, Params.Tensors()), or, for a model with adapters, the adapters' (the
// base is frozen).
func (m *Model) Trainable() (data, grads []float32, tensors []NamedTensor) {
	if m.LoRA != nil {
		return m.LoRA.Data, m.LoRA.Grads, m.LoRA.Tensors()
	}
	return m.Params.Data, m.Grads.Data, m.Params.Tensors()
}

func sameLoRA(a, b LoRAConfig) bool {
	return a.Rank == b.Rank && a.Alpha == b.Alpha && a.Dropout == b.Dropout && slices.Equal(a.Targets, b.Targets)
}

// MergeLoRA adds each adapter's product into the base weights and drops the adapters (nothing
// without them): m then computes what it computed, up to rounding, and trains its weights.
func (m *Model) MergeLoRA() {
	if m.LoRA == nil {
		return
	}
	for l := range m.Cfg.Layers {
		for t := range numTargets {
			w, ld := m.targetWeight(l, t)
			m.LoRA.mergeInto(m.Cfg, l, t, w, ld)
		}
	}
	m.LoRA = nil
	m.dec.packed = nil
}

// LoRAParams is the number of adapter weights l gives a model of c, computed without
// allocating.
func (c Config) LoRAParams(l LoRAConfig) int64 {
	var n int64
	for _, name := range l.Targets {
		if t := slices.Index(loraTargets, name); t >= 0 {
			out, in, _ := c.loraShape(t)
			n += int64(l.Rank) * int64(out+in)
		}
	}
	return n * int64(c.Layers)
}
