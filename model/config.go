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

	// The settings below make the one transformer each of the model families agentrl runs
	// (Llama 1/2/3.x, SmolLM2, Qwen2/2.5, Qwen3 dense, Mistral); their zero values are the
	// built-in model's Llama shape. A checkpoint's config.json sets them (package checkpoint).

	// Family is the Hugging Face model_type a checkpoint of the model is saved as: "" (llama),
	// "llama", "mistral", "qwen2" or "qwen3". It decides which of the options below a model may
	// have (those its architecture can express) and changes no computation itself.
	Family string `yaml:"family,omitempty"`
	// HeadDimension is the width of one attention head (head_dim); 0 is Dim/Heads. Qwen3 sets
	// it to a width that is not Dim/Heads: q_proj then has Heads·HeadDim outputs, not Dim.
	HeadDimension int `yaml:"head_dim,omitempty"`
	// QKVBias adds a bias to q_proj, k_proj and v_proj (Qwen2, attention_bias); OBias one to
	// o_proj (attention_bias of Llama and Qwen3); MLPBias to gate_proj, up_proj and down_proj
	// (Llama's mlp_bias).
	QKVBias bool `yaml:"qkv_bias,omitempty"`
	OBias   bool `yaml:"o_bias,omitempty"`
	MLPBias bool `yaml:"mlp_bias,omitempty"`
	// QKNorm applies RMSNorm (weights q_norm and k_norm, HeadDim wide) to every head of the
	// queries and keys before RoPE, as Qwen3 does.
	QKNorm bool `yaml:"qk_norm,omitempty"`
	// SlidingWindow, when positive, lets each query attend only to the SlidingWindow most recent
	// positions, its own included (Mistral; Qwen's use_sliding_window), in the layers from
	// WindowFrom on (Qwen's max_window_layers; 0 for Mistral: all layers).
	SlidingWindow int `yaml:"sliding_window,omitempty"`
	WindowFrom    int `yaml:"window_from_layer,omitempty"`
	// RopeScaling rescales RoPE's frequencies (config.json's rope_scaling).
	RopeScaling RopeScaling `yaml:"rope_scaling,omitempty"`
}

// RopeScaling is a rope_scaling of config.json. Type "" is plain RoPE; "llama3" is Llama 3.1's
// scaling: wavelengths above OriginalMaxPositions/LowFreqFactor are divided by Factor, those
// below OriginalMaxPositions/HighFreqFactor are kept, and those between are interpolated.
type RopeScaling struct {
	Type                 string  `yaml:"type"`
	Factor               float64 `yaml:"factor"`
	LowFreqFactor        float64 `yaml:"low_freq_factor"`
	HighFreqFactor       float64 `yaml:"high_freq_factor"`
	OriginalMaxPositions int     `yaml:"original_max_position_embeddings"`
}

// The model families (Config.Family).
const (
	FamilyLlama   = "llama"
	FamilyMistral = "mistral"
	FamilyQwen2   = "qwen2"
	FamilyQwen3   = "qwen3"
)

// HeadDim is the width of one attention head: HeadDimension, or Dim/Heads when that is 0.
func (c Config) HeadDim() int {
	if c.HeadDimension > 0 {
		return c.HeadDimension
	}
	return c.Dim / c.Heads
}

// attnDim is the width of the attention output, Heads·HeadDim: o_proj's input.
func (c Config) attnDim() int { return c.Heads * c.HeadDim() }

// qkvDim is the width of the fused q/k/v projection output.
func (c Config) qkvDim() int { return (c.Heads + 2*c.KVHeads) * c.HeadDim() }

// Window is the sliding window of layer l: the number of most recent positions a query sees,
// or 0 for all of them.
func (c Config) Window(l int) int {
	if c.SlidingWindow > 0 && l >= c.WindowFrom {
		return c.SlidingWindow
	}
	return 0
}

// ropeInvFreq is RoPE's inverse frequency of each pair of a head's dimensions,
// theta^(-2i/HeadDim), rescaled as RopeScaling says (Hugging Face's _compute_llama3_parameters).
func (c Config) ropeInvFreq() []float64 {
	hd := c.HeadDim()
	f := make([]float64, hd/2)
	for i := range f {
		f[i] = math.Pow(float64(c.RopeTheta), -float64(2*i)/float64(hd))
	}
	if s := c.RopeScaling; s.Type == "llama3" {
		old := float64(s.OriginalMaxPositions)
		lowWave, highWave := old/s.LowFreqFactor, old/s.HighFreqFactor
		for i, inv := range f {
			wave := 2 * math.Pi / inv
			switch {
			case wave < highWave:
			case wave > lowWave:
				f[i] = inv / s.Factor
			default:
				smooth := (old/wave - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
				f[i] = (1-smooth)*inv/s.Factor + smooth*inv
			}
		}
	}
	return f
}

// plainLlama reports whether c is the built-in model's shape, which none of the family options
// change.
func (c Config) plainLlama() bool {
	return c.HeadDimension == 0 && !c.QKVBias && !c.OBias && !c.MLPBias && !c.QKNorm && c.SlidingWindow == 0 && c.RopeScaling == RopeScaling{}
}

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
	if c.HeadDimension < 0 || c.HeadDimension > MaxDim {
		return fmt.Errorf("model: head_dim %d is outside [0, %d]", c.HeadDimension, MaxDim)
	}
	if err := c.validateFamily(); err != nil {
		return fmt.Errorf("model: %w", err)
	}
	switch {
	case c.HeadDimension == 0 && c.Dim%c.Heads != 0:
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
		return fmt.Errorf("model: %d parameters (dim %d, layers %d, hidden %d, vocabulary %d) exceed the limit of %d (model.MaxParams)",
			n, c.Dim, c.Layers, c.Hidden, c.Vocab, MaxParams)
	}
	return nil
}

// validateFamily checks the family options: each known, and each one the family's
// architecture can express, so that a checkpoint of the model loads elsewhere as that family.
func (c Config) validateFamily() error {
	attn := func() error {
		if c.QKVBias != c.OBias {
			return fmt.Errorf("%s has biases on all of q/k/v/o_proj or none (attention_bias): qkv_bias %v, o_bias %v", c.familyName(), c.QKVBias, c.OBias)
		}
		return nil
	}
	none := func(what string, set bool) error {
		if set {
			return fmt.Errorf("%s is not an option of %s", what, c.familyName())
		}
		return nil
	}
	var errs []error
	switch c.Family {
	case "", FamilyLlama:
		errs = append(errs, attn(), none("qk_norm", c.QKNorm), none("sliding_window", c.SlidingWindow != 0))
	case FamilyMistral:
		errs = append(errs, none("qkv_bias", c.QKVBias), none("o_bias", c.OBias), none("mlp_bias", c.MLPBias),
			none("qk_norm", c.QKNorm), none("window_from_layer", c.WindowFrom != 0))
	case FamilyQwen2:
		if !c.QKVBias {
			errs = append(errs, errors.New("qwen2 has biases on q/k/v_proj: qkv_bias must be set"))
		}
		errs = append(errs, none("o_bias", c.OBias), none("mlp_bias", c.MLPBias), none("qk_norm", c.QKNorm))
	case FamilyQwen3:
		if !c.QKNorm {
			errs = append(errs, errors.New("qwen3 normalizes q and k per head: qk_norm must be set"))
		}
		errs = append(errs, attn(), none("mlp_bias", c.MLPBias))
	default:
		return fmt.Errorf("family %q is not one of llama, mistral, qwen2, qwen3", c.Family)
	}
	if c.SlidingWindow < 0 {
		errs = append(errs, fmt.Errorf("sliding_window must not be negative, got %d", c.SlidingWindow))
	}
	if c.WindowFrom < 0 || c.WindowFrom > c.Layers {
		errs = append(errs, fmt.Errorf("window_from_layer %d is outside [0, layers=%d]", c.WindowFrom, c.Layers))
	}
	switch s := c.RopeScaling; s.Type {
	case "":
		if s != (RopeScaling{}) {
			errs = append(errs, errors.New("rope_scaling has settings but no type"))
		}
	case "llama3":
		ok := func(x float64) bool { return x > 0 && !math.IsInf(x, 0) }
		if !ok(s.Factor) || !ok(s.LowFreqFactor) || !ok(s.HighFreqFactor) || s.OriginalMaxPositions <= 0 || s.HighFreqFactor <= s.LowFreqFactor {
			errs = append(errs, fmt.Errorf("rope_scaling llama3 needs positive factor, low_freq_factor < high_freq_factor and original_max_position_embeddings, got %+v", s))
		}
	default:
		errs = append(errs, fmt.Errorf("rope_scaling type %q is not supported (only llama3)", s.Type))
	}
	return errors.Join(errs...)
}

func (c Config) familyName() string {
	if c.Family == "" {
		return FamilyLlama
	}
	return c.Family
}

// Limits of the sizes a Config may give, checked by Validate before anything is allocated (a
// checkpoint's config.json included). MaxParams is a sanity bound far above any model a CPU
// trains (16 G parameters, 256 GiB of training state); what bounds a model in practice is the
// machine's memory, which New and NewZero check against the weights and gradients they would
// allocate, and a run against EstimateMemory's full estimate before it starts.
const (
	MaxDim    = 1 << 14
	MaxLayers = 1 << 10
	MaxHidden = 1 << 16
	MaxSeqLen = 1 << 17
	MaxVocab  = 1 << 21
	MaxParams = 1 << 34
)

// NumParams is the number of weights a model of c has (a tied LM head counts once), computed
// without allocating; c must hold positive sizes within the limits above.
func (c Config) NumParams() int64 {
	hd := int64(c.HeadDim())
	dim, vocab := int64(c.Dim), int64(c.Vocab)
	layer := 2*dim + int64(c.Heads+2*c.KVHeads)*hd*dim + dim*int64(c.Heads)*hd + 3*int64(c.Hidden)*dim
	layer += c.layerExtras()
	n := vocab*dim + int64(c.Layers)*layer + dim
	if !c.TieEmbeddings {
		n += vocab * dim
	}
	return n
}

// layerExtras is the number of a layer's weights beyond the plain Llama block's: biases and the
// q/k norms.
func (c Config) layerExtras() int64 {
	var n int64
	if c.QKVBias {
		n += int64(c.qkvDim())
	}
	if c.QKNorm {
		n += 2 * int64(c.HeadDim())
	}
	if c.OBias {
		n += int64(c.Dim)
	}
	if c.MLPBias {
		n += 2*int64(c.Hidden) + int64(c.Dim)
	}
	return n
}

// KVCacheBytes is the memory of a KV cache of slots sequences of maxLen tokens (NewKVCache),
// computed without allocating.
func (c Config) KVCacheBytes(slots, maxLen int) int64 {
	hd := c.HeadDim()
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
