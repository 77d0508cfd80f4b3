package model

import (
	"errors"
	"fmt"
	"math"
)

// Config fixes the architecture. Field meanings follow Hugging Face's LlamaConfig: Dim is
// hidden_size, Hidden is intermediate_size, Heads/KVHeads are num_attention_heads and
// num_key_value_heads, MaxSeq bounds positions (max_position_embeddings).
type Config struct {
	Vocab, Dim, Layers, Heads, KVHeads, Hidden, MaxSeq int
	RopeTheta, NormEps                                 float32
	TieEmbeddings                                      bool
}

// HeadDim is the width of one attention head, Dim/Heads.
func (c Config) HeadDim() int { return c.Dim / c.Heads }

// qkvDim is the width of the fused q/k/v projection output.
func (c Config) qkvDim() int { return (c.Heads + 2*c.KVHeads) * c.HeadDim() }

// Validate reports the first setting that cannot describe a model.
func (c Config) Validate() error {
	var errs []error
	positive := func(name string, v int) {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %d", name, v))
		}
	}
	positive("Vocab", c.Vocab)
	positive("Dim", c.Dim)
	positive("Layers", c.Layers)
	positive("Heads", c.Heads)
	positive("KVHeads", c.KVHeads)
	positive("Hidden", c.Hidden)
	positive("MaxSeq", c.MaxSeq)
	if len(errs) > 0 {
		return fmt.Errorf("model config: %w", errors.Join(errs...))
	}
	switch {
	case c.Dim%c.Heads != 0:
		return fmt.Errorf("model config: Dim %d is not a multiple of Heads %d", c.Dim, c.Heads)
	case c.HeadDim()%2 != 0:
		return fmt.Errorf("model config: head dimension %d must be even for RoPE", c.HeadDim())
	case c.KVHeads > c.Heads || c.Heads%c.KVHeads != 0:
		return fmt.Errorf("model config: KVHeads %d must divide Heads %d", c.KVHeads, c.Heads)
	case !(c.RopeTheta > 1) || math.IsInf(float64(c.RopeTheta), 0):
		return fmt.Errorf("model config: RopeTheta must be a finite number above 1, got %v", c.RopeTheta)
	case !(c.NormEps > 0) || c.NormEps > 1:
		return fmt.Errorf("model config: NormEps must be in (0, 1], got %v", c.NormEps)
	case int64(c.Vocab)*int64(c.Dim) > math.MaxInt32:
		return fmt.Errorf("model config: Vocab×Dim %d×%d is too large", c.Vocab, c.Dim)
	}
	return nil
}

// DefaultConfig is the model for built-in tasks: Dim 256, 4 layers, 8 query / 4 key-value
// heads, about 3.4 M parameters at a 2k vocabulary (tied embeddings). BENCHMARKS.md ("Model
// training step and decoding") records the measurements it was chosen by: it is the largest
// size whose 2,048-token training step stays near one CPU-second on the 2-core machine; a
// smaller width saved little time, a wider or deeper one cost 40–50% more per step.
func DefaultConfig(vocab int) Config {
	return Config{
		Vocab: vocab, Dim: 256, Layers: 4, Heads: 8, KVHeads: 4, Hidden: 688, MaxSeq: 1024,
		RopeTheta: 10000, NormEps: 1e-5, TieEmbeddings: true,
	}
}
