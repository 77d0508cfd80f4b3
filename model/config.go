package model

import (
	"errors"
	"fmt"
	"math"

	"github.com/agentrl/agentrl/model/kernels"
)

// Config fixes the architecture. Field meanings follow Hugging Face's LlamaConfig: Dim is
// hidden_size, Hidden is intermediate_size, Heads/KVHeads are num_attention_heads and
// num_key_value_heads, MaxSeq bounds positions (max_position_embeddings). The YAML names are the
// run configuration's `model` block; the vocabulary is not among them, since a run's tokenizer
// decides it.
type Config struct {
	Vocab         int     `yaml:"-"`
	Dim           int     `yaml:"dim"`
	Layers        int     `yaml:"layers"`
	Heads         int     `yaml:"heads"`
	KVHeads       int     `yaml:"kv_heads"`
	Hidden        int     `yaml:"hidden"`
	MaxSeq        int     `yaml:"max_seq"`
	RopeTheta     float32 `yaml:"rope_theta"`
	NormEps       float32 `yaml:"norm_eps"` // RMSNorm's epsilon (rms_norm_eps)
	TieEmbeddings bool    `yaml:"tie_embeddings"`
}

// HeadDim is the width of one attention head, Dim/Heads.
func (c Config) HeadDim() int { return c.Dim / c.Heads }

// qkvDim is the width of the fused q/k/v projection output.
func (c Config) qkvDim() int { return (c.Heads + 2*c.KVHeads) * c.HeadDim() }

// DefaultNormEps is RMSNorm's ε in DefaultConfig and where a configuration does not set norm_eps
// (configurations written before it was a setting).
const DefaultNormEps = 1e-5

// Validate reports the first setting that cannot describe a model, by its YAML name.
func (c Config) Validate() error {
	var errs []error
	positive := func(name string, v int) {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %d", name, v))
		}
	}
	positive("vocabulary size", c.Vocab)
	positive("dim", c.Dim)
	positive("layers", c.Layers)
	positive("heads", c.Heads)
	positive("kv_heads", c.KVHeads)
	positive("hidden", c.Hidden)
	positive("max_seq", c.MaxSeq)
	atMost := func(name string, v, limit int) {
		if v > limit {
			errs = append(errs, fmt.Errorf("%s %d exceeds the limit of %d", name, v, limit))
		}
	}
	atMost("vocabulary size", c.Vocab, MaxVocab)
	atMost("dim", c.Dim, MaxDim)
	atMost("layers", c.Layers, MaxLayers)
	atMost("hidden", c.Hidden, MaxHidden)
	atMost("max_seq", c.MaxSeq, MaxSeqLen)
	if len(errs) > 0 {
		return fmt.Errorf("model: %w", errors.Join(errs...))
	}
	switch {
	case c.Dim%c.Heads != 0:
		return fmt.Errorf("model: dim %d is not a multiple of heads %d", c.Dim, c.Heads)
	case c.HeadDim()%2 != 0:
		return fmt.Errorf("model: head dimension %d must be even for RoPE", c.HeadDim())
	case c.KVHeads > c.Heads || c.Heads%c.KVHeads != 0:
		return fmt.Errorf("model: kv_heads %d must divide heads %d", c.KVHeads, c.Heads)
	case !(c.RopeTheta > 1) || math.IsInf(float64(c.RopeTheta), 0):
		return fmt.Errorf("model: rope_theta must be a finite number above 1, got %v", c.RopeTheta)
	case !(c.NormEps > 0) || c.NormEps > 1:
		return fmt.Errorf("model: norm_eps must be in (0, 1], got %v", c.NormEps)
	case int64(c.Vocab)*int64(c.Dim) > math.MaxInt32:
		return fmt.Errorf("model: vocabulary × dim %d×%d is too large", c.Vocab, c.Dim)
	}
	if n := c.NumParams(); n > MaxParams {
		return fmt.Errorf("model: %d parameters (dim %d, layers %d, hidden %d, vocabulary %d) exceed the limit of %d (model.MaxParams): training keeps 16 bytes a parameter (weights, gradients, AdamW moments)",
			n, c.Dim, c.Layers, c.Hidden, c.Vocab, MaxParams)
	}
	return nil
}

// Limits of the sizes a Config may give, checked by Validate before anything is allocated (a
// checkpoint's config.json included). MaxParams bounds the training state: weights, gradients
// and AdamW's two moments take 16 bytes a parameter, 4 GiB at the limit, about 80 times the
// default model at a 2k vocabulary.
const (
	MaxDim    = 1 << 14
	MaxLayers = 1 << 10
	MaxHidden = 1 << 16
	MaxSeqLen = 1 << 17
	MaxVocab  = 1 << 21
	MaxParams = 1 << 28
)

// NumParams is the number of weights a model of c has (a tied LM head counts once), computed
// without allocating; c must hold positive sizes within the limits above.
func (c Config) NumParams() int64 {
	hd := int64(c.Dim / c.Heads)
	dim, vocab := int64(c.Dim), int64(c.Vocab)
	layer := 2*dim + int64(c.Heads+2*c.KVHeads)*hd*dim + dim*int64(c.Heads)*hd + 3*int64(c.Hidden)*dim
	n := vocab*dim + int64(c.Layers)*layer + dim
	if !c.TieEmbeddings {
		n += vocab * dim
	}
	return n
}

// KVCacheBytes is the memory of a KV cache of slots sequences of maxLen tokens (NewKVCache),
// computed without allocating.
func (c Config) KVCacheBytes(slots, maxLen int) int64 {
	hd := c.Dim / c.Heads
	keys := int64(kernels.KeyBlocksLen(maxLen, hd))
	vals := int64(maxLen) * int64(hd)
	return 4 * int64(c.Layers) * int64(slots) * int64(c.KVHeads) * (keys + vals)
}

// DefaultConfig is the model for built-in tasks: Dim 256, 4 layers, 8 query / 4 key-value
// heads, about 3.4 M parameters at a 2k vocabulary (tied embeddings). BENCHMARKS.md ("Model
// training step and decoding") records the measurements it was chosen by: it is the largest
// size whose 2,048-token training step stays near one CPU-second on the 2-core machine; a
// smaller width saved little time, a wider or deeper one cost 40–50% more per step.
func DefaultConfig(vocab int) Config {
	return Config{
		Vocab: vocab, Dim: 256, Layers: 4, Heads: 8, KVHeads: 4, Hidden: 688, MaxSeq: 1024,
		RopeTheta: 10000, NormEps: DefaultNormEps, TieEmbeddings: true,
	}
}
