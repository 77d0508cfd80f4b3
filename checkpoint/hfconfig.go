package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/tokenizer"
)

// llamaConfig is config.json as transformers' LlamaConfig writes it, restricted to what this
// model implements. Field order is the file's key order.
type llamaConfig struct {
	Architectures         []string  `json:"architectures"`
	ModelType             string    `json:"model_type"`
	AttentionBias         bool      `json:"attention_bias"`
	MLPBias               bool      `json:"mlp_bias"`
	BOSTokenID            *int32    `json:"bos_token_id"`
	EOSTokenID            *int32    `json:"eos_token_id"`
	PadTokenID            *int32    `json:"pad_token_id"`
	HeadDim               int       `json:"head_dim"`
	HiddenAct             string    `json:"hidden_act"`
	HiddenSize            int       `json:"hidden_size"`
	InitializerRange      float64   `json:"initializer_range"`
	IntermediateSize      int       `json:"intermediate_size"`
	MaxPositionEmbeddings int       `json:"max_position_embeddings"`
	NumAttentionHeads     int       `json:"num_attention_heads"`
	NumHiddenLayers       int       `json:"num_hidden_layers"`
	NumKeyValueHeads      int       `json:"num_key_value_heads"`
	RMSNormEps            float32   `json:"rms_norm_eps"`
	RopeScaling           *struct{} `json:"rope_scaling"` // always null: plain RoPE
	RopeTheta             float32   `json:"rope_theta"`
	TieWordEmbeddings     bool      `json:"tie_word_embeddings"`
	TorchDType            string    `json:"torch_dtype"`
	UseCache              bool      `json:"use_cache"`
	VocabSize             int       `json:"vocab_size"`
}

// specialIDs are the token ids config.json and generation_config.json carry. The chat format
// has no beginning-of-sequence token (tokenizer_config.json says bos_token null and
// add_bos_token false), so BOS stays null rather than borrowing another token.
type specialIDs struct {
	bos, eos, pad *int32
}

func tokenIDs(tok *tokenizer.Tokenizer) specialIDs {
	eos := tok.EndOfTurn()
	ids := specialIDs{eos: &eos}
	if pad, ok := tok.SpecialID(tokenizer.EndOfText); ok {
		ids.pad = &pad
	}
	return ids
}

func encodeConfig(c model.Config, ids specialIDs) ([]byte, error) {
	lc := llamaConfig{
		Architectures: []string{"LlamaForCausalLM"}, ModelType: "llama",
		BOSTokenID: ids.bos, EOSTokenID: ids.eos, PadTokenID: ids.pad,
		HeadDim: c.HeadDim(), HiddenAct: "silu", HiddenSize: c.Dim, InitializerRange: 0.02,
		IntermediateSize: c.Hidden, MaxPositionEmbeddings: c.MaxSeq,
		NumAttentionHeads: c.Heads, NumHiddenLayers: c.Layers, NumKeyValueHeads: c.KVHeads,
		RMSNormEps: c.NormEps, RopeTheta: c.RopeTheta, TieWordEmbeddings: c.TieEmbeddings,
		TorchDType: "float32", UseCache: true, VocabSize: c.Vocab,
	}
	return json.MarshalIndent(lc, "", "  ")
}

// encodeGenerationConfig renders generation_config.json: the stop and pad ids, and sampling at
// temperature 1 with no truncation, which is the distribution the policy is trained on.
func encodeGenerationConfig(ids specialIDs) ([]byte, error) {
	g := struct {
		BOSTokenID  *int32  `json:"bos_token_id,omitempty"`
		EOSTokenID  *int32  `json:"eos_token_id,omitempty"`
		PadTokenID  *int32  `json:"pad_token_id,omitempty"`
		DoSample    bool    `json:"do_sample"`
		Temperature float64 `json:"temperature"`
		TopK        int     `json:"top_k"`
		TopP        float64 `json:"top_p"`
	}{ids.bos, ids.eos, ids.pad, true, 1.0, 0, 1.0}
	return json.MarshalIndent(g, "", "  ")
}

// parseConfig reads a Llama config.json, whoever wrote it. Missing optional keys take
// LlamaConfig's defaults, so the model computes what transformers would; unknown keys are
// ignored (other tools add many harmless ones); anything that would change the computation in a
// way this model does not implement is refused, naming the key.
func parseConfig(data []byte) (model.Config, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return model.Config{}, fmt.Errorf("config.json: %w", err)
	}
	if raw == nil {
		return model.Config{}, errors.New("config.json: top level is not an object")
	}
	r := configReader{raw: raw}
	if err := r.refuseUnsupported(); err != nil {
		return model.Config{}, fmt.Errorf("config.json: %w", err)
	}
	c := model.Config{
		Dim:    r.int("hidden_size", 0),
		Hidden: r.int("intermediate_size", 0),
		Layers: r.int("num_hidden_layers", 0),
		Heads:  r.int("num_attention_heads", 0),
		Vocab:  r.int("vocab_size", 0),
		MaxSeq: r.int("max_position_embeddings", 2048),
	}
	c.KVHeads = r.int("num_key_value_heads", c.Heads) // null also means "as many as heads"
	c.NormEps = float32(r.float("rms_norm_eps", 1e-6))
	c.RopeTheta = float32(r.ropeTheta())
	c.TieEmbeddings = r.bool("tie_word_embeddings", false)
	if r.err != nil {
		return model.Config{}, fmt.Errorf("config.json: %w", r.err)
	}
	if err := c.Validate(); err != nil {
		return model.Config{}, fmt.Errorf("config.json: %w", err)
	}
	if hd := r.int("head_dim", c.HeadDim()); r.err == nil && hd != c.HeadDim() {
		return model.Config{}, fmt.Errorf("config.json: head_dim %d differs from hidden_size/num_attention_heads = %d, which this model assumes", hd, c.HeadDim())
	}
	// The RoPE tables are allocated up front (MaxSeq × head_dim/2 floats, twice); a corrupt
	// max_position_embeddings must not turn into a huge allocation.
	if int64(c.MaxSeq)*int64(c.HeadDim()) > 1<<28 {
		return model.Config{}, fmt.Errorf("config.json: max_position_embeddings %d is too large for head_dim %d", c.MaxSeq, c.HeadDim())
	}
	if r.err != nil {
		return model.Config{}, fmt.Errorf("config.json: %w", r.err)
	}
	return c, nil
}

// configReader decodes keys of a config, keeping the first error.
type configReader struct {
	raw map[string]json.RawMessage
	err error
}

// value decodes key into dst; it reports false when the key is absent or null.
func (r *configReader) value(key string, dst any) bool {
	v, ok := r.raw[key]
	if !ok || isNull(v) || r.err != nil {
		return false
	}
	if err := json.Unmarshal(v, dst); err != nil {
		r.err = fmt.Errorf("%s: %w", key, err)
		return false
	}
	return true
}

// int reads a positive-or-zero integer key; def 0 means the key is required.
func (r *configReader) int(key string, def int) int {
	var v int64
	if !r.value(key, &v) {
		if def == 0 && r.err == nil {
			r.err = fmt.Errorf("%s is missing", key)
		}
		return def
	}
	if v <= 0 || v > 1<<31-1 {
		r.err = fmt.Errorf("%s must be a positive 32-bit integer, got %d", key, v)
	}
	return int(v)
}

func (r *configReader) float(key string, def float64) float64 {
	var v float64
	if !r.value(key, &v) {
		return def
	}
	return v
}

func (r *configReader) bool(key string, def bool) bool {
	var v bool
	if !r.value(key, &v) {
		return def
	}
	return v
}

func (r *configReader) str(key, def string) string {
	var v string
	if !r.value(key, &v) {
		return def
	}
	return v
}

// ropeTheta reads rope_theta, or from newer transformers' rope_parameters, whose rope_type must
// then be "default" (plain RoPE).
func (r *configReader) ropeTheta() float64 {
	var p struct {
		RopeType  string   `json:"rope_type"`
		RopeTheta *float64 `json:"rope_theta"`
	}
	if r.value("rope_parameters", &p) {
		if p.RopeType != "" && p.RopeType != "default" {
			r.err = fmt.Errorf("rope_parameters.rope_type %q is not supported: this model computes plain RoPE", p.RopeType)
		}
		if p.RopeTheta != nil {
			return *p.RopeTheta
		}
	}
	return r.float("rope_theta", 10000)
}

// refuseUnsupported rejects settings under which transformers would compute something this
// model does not.
func (r *configReader) refuseUnsupported() error {
	if mt := r.str("model_type", ""); mt != "llama" {
		return fmt.Errorf("model_type is %q, want \"llama\"", mt)
	}
	var arch []string
	if r.value("architectures", &arch) && !(len(arch) == 1 && arch[0] == "LlamaForCausalLM") {
		return fmt.Errorf("architectures is %q, want [\"LlamaForCausalLM\"]", arch)
	}
	if act := r.str("hidden_act", "silu"); act != "silu" {
		return fmt.Errorf("hidden_act %q is not supported: this model's MLP is SwiGLU (silu)", act)
	}
	for _, u := range []struct{ key, why string }{
		{"rope_scaling", "this model computes plain RoPE"},
		{"quantization_config", "this model reads float weights only"},
	} {
		if v, ok := r.raw[u.key]; ok && !isNull(v) {
			return fmt.Errorf("%s is %s: not supported, %s", u.key, compact(v), u.why)
		}
	}
	for _, key := range []string{"attention_bias", "mlp_bias"} {
		if r.bool(key, false) {
			return fmt.Errorf("%s is true: this model has no biases", key)
		}
	}
	return r.err
}

func isNull(v json.RawMessage) bool { return strings.TrimSpace(string(v)) == "null" }

// compact shortens a JSON value for an error message.
func compact(v json.RawMessage) string {
	s := strings.Join(strings.Fields(string(v)), " ")
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}
