package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/tokenizer"
)

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

// families maps each model family to its Hugging Face architecture name.
var families = map[string]string{
	model.FamilyLlama:   "LlamaForCausalLM",
	model.FamilyMistral: "MistralForCausalLM",
	model.FamilyQwen2:   "Qwen2ForCausalLM",
	model.FamilyQwen3:   "Qwen3ForCausalLM",
}

// familyOf is the family of c, "" read as llama.
func familyOf(c model.Config) string {
	if c.Family == "" {
		return model.FamilyLlama
	}
	return c.Family
}

// torchDTypes names the safetensors dtypes as config.json's torch_dtype does.
var torchDTypes = map[string]string{"F32": "float32", "BF16": "bfloat16", "F16": "float16"}

// encodeConfig renders config.json as transformers' config class of c's family writes it, with
// the keys that family reads (keys in alphabetical order). dtype is the weights' safetensors
// dtype ("" is F32).
func encodeConfig(c model.Config, ids specialIDs, dtype string) ([]byte, error) {
	fam := familyOf(c)
	if dtype == "" {
		dtype = "F32"
	}
	k := map[string]any{
		"architectures": []string{families[fam]}, "model_type": fam,
		"bos_token_id": ids.bos, "eos_token_id": ids.eos, "pad_token_id": ids.pad,
		"hidden_act": "silu", "hidden_size": c.Dim, "initializer_range": 0.02,
		"intermediate_size": c.Hidden, "max_position_embeddings": c.MaxSeq,
		"num_attention_heads": c.Heads, "num_hidden_layers": c.Layers, "num_key_value_heads": c.KVHeads,
		"rms_norm_eps": c.NormEps, "rope_theta": c.RopeTheta, "tie_word_embeddings": c.TieEmbeddings,
		"torch_dtype": torchDTypes[dtype], "use_cache": true, "vocab_size": c.Vocab,
		"rope_scaling": nil,
	}
	if s := c.RopeScaling; s.Type != "" {
		k["rope_scaling"] = map[string]any{"rope_type": s.Type, "factor": s.Factor, "low_freq_factor": s.LowFreqFactor,
			"high_freq_factor": s.HighFreqFactor, "original_max_position_embeddings": s.OriginalMaxPositions}
	}
	switch fam {
	case model.FamilyLlama:
		k["attention_bias"], k["mlp_bias"], k["head_dim"] = c.OBias, c.MLPBias, c.HeadDim()
	case model.FamilyQwen3:
		k["attention_bias"], k["head_dim"] = c.OBias, c.HeadDim()
	case model.FamilyMistral:
		k["head_dim"] = c.HeadDim()
	}
	switch fam {
	case model.FamilyMistral:
		k["sliding_window"] = nil
		if c.SlidingWindow > 0 {
			k["sliding_window"] = c.SlidingWindow
		}
	case model.FamilyQwen2, model.FamilyQwen3:
		k["use_sliding_window"], k["sliding_window"], k["max_window_layers"] = c.SlidingWindow > 0, nil, c.Layers
		if c.SlidingWindow > 0 {
			k["sliding_window"], k["max_window_layers"] = c.SlidingWindow, c.WindowFrom
		}
	}
	return json.MarshalIndent(k, "", "  ")
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

// parseConfig reads the config.json of a Llama, Mistral, Qwen2 or Qwen3 model (SmolLM2 is
// Llama), whoever wrote it. Missing optional keys take transformers' defaults for the family, so
// the model computes what transformers would; unknown keys are ignored (other tools add many
// harmless ones); anything that would change the computation in a way this model does not
// implement is refused, naming the key.
func parseConfig(data []byte) (model.Config, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return model.Config{}, fmt.Errorf("config.json: %w", err)
	}
	if raw == nil {
		return model.Config{}, errors.New("config.json: top level is not an object")
	}
	r := configReader{raw: raw}
	fam, err := r.family()
	if err != nil {
		return model.Config{}, fmt.Errorf("config.json: %w", err)
	}
	if err := r.refuseUnsupported(fam); err != nil {
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
	if fam != model.FamilyLlama {
		c.Family = fam
	}
	c.KVHeads = r.int("num_key_value_heads", c.Heads) // null also means "as many as heads"
	c.NormEps = float32(r.float("rms_norm_eps", 1e-6))
	c.RopeTheta = float32(r.ropeTheta())
	c.RopeScaling = r.ropeScaling()
	c.TieEmbeddings = r.bool("tie_word_embeddings", false)
	if r.err != nil {
		return model.Config{}, fmt.Errorf("config.json: %w", r.err)
	}
	if c.Heads > 0 {
		// head_dim equal to hidden_size/num_attention_heads is the plain shape (HeadDimension 0).
		if hd := r.int("head_dim", c.Dim/c.Heads); r.err == nil && (hd != c.Dim/c.Heads || c.Dim%c.Heads != 0) {
			if fam == model.FamilyQwen2 {
				return model.Config{}, fmt.Errorf("config.json: head_dim %d differs from hidden_size/num_attention_heads = %d, which Qwen2 assumes", hd, c.Dim/c.Heads)
			}
			c.HeadDimension = hd
		}
	}
	switch fam {
	case model.FamilyLlama, model.FamilyQwen3:
		ab := r.bool("attention_bias", false)
		c.QKVBias, c.OBias = ab, ab
		c.MLPBias = r.bool("mlp_bias", false)
	case model.FamilyQwen2:
		c.QKVBias = true
	}
	c.QKNorm = fam == model.FamilyQwen3
	c.SlidingWindow, c.WindowFrom = r.window(fam, c.Layers)
	if r.err != nil {
		return model.Config{}, fmt.Errorf("config.json: %w", r.err)
	}
	if err := c.Validate(); err != nil {
		return model.Config{}, fmt.Errorf("config.json: %w", err)
	}
	// The RoPE tables are allocated up front (MaxSeq × head_dim/2 floats, twice); a corrupt
	// max_position_embeddings must not turn into a huge allocation.
	if int64(c.MaxSeq)*int64(c.HeadDim()) > 1<<28 {
		return model.Config{}, fmt.Errorf("config.json: max_position_embeddings %d is too large for head_dim %d", c.MaxSeq, c.HeadDim())
	}
	return c, nil
}

// family reads architectures and model_type, which must name the same supported family.
func (r *configReader) family() (string, error) {
	mt := r.str("model_type", "")
	var arch []string
	hasArch := r.value("architectures", &arch)
	if r.err != nil {
		return "", r.err
	}
	if _, ok := families[mt]; !ok {
		return "", fmt.Errorf("model_type is %q: supported are \"llama\", \"mistral\", \"qwen2\" and \"qwen3\"", mt)
	}
	if hasArch && !(len(arch) == 1 && arch[0] == families[mt]) {
		return "", fmt.Errorf("architectures is %q, want [%q] for model_type %q", arch, families[mt], mt)
	}
	return mt, nil
}

// window reads the sliding window as the family's transformers code applies it: Mistral's
// sliding_window in every layer; Qwen's only with use_sliding_window, in the layers from
// max_window_layers on (or as layer_types lists them).
func (r *configReader) window(fam string, layers int) (size, from int) {
	has := func(k string) bool { v, ok := r.raw[k]; return ok && !isNull(v) }
	switch fam {
	case model.FamilyMistral:
		if has("sliding_window") {
			return r.int("sliding_window", 0), 0
		}
		return 0, 0
	case model.FamilyQwen2, model.FamilyQwen3:
		if !r.bool("use_sliding_window", false) || !has("sliding_window") {
			if has("layer_types") {
				r.checkLayerTypes(layers, layers)
			}
			return 0, 0
		}
		size = r.int("sliding_window", 0)
		from = r.intZero("max_window_layers", 28)
		from = min(from, layers)
		if has("layer_types") {
			r.checkLayerTypes(layers, from)
		}
		if from == layers {
			return 0, 0
		}
		return size, from
	}
	for _, k := range []string{"sliding_window", "use_sliding_window", "layer_types"} {
		if has(k) && !(k == "use_sliding_window" && !r.bool(k, false)) {
			r.fail(fmt.Errorf("%s is set: %s has no sliding-window attention", k, fam))
		}
	}
	return 0, 0
}

// checkLayerTypes requires layer_types to be full_attention below layer from and
// sliding_attention from it on, the only pattern the window settings express.
func (r *configReader) checkLayerTypes(layers, from int) {
	var lt []string
	if !r.value("layer_types", &lt) {
		return
	}
	ok := len(lt) == layers
	for i := 0; ok && i < len(lt); i++ {
		want := "full_attention"
		if i >= from {
			want = "sliding_attention"
		}
		ok = lt[i] == want
	}
	if !ok {
		r.fail(fmt.Errorf("layer_types %q is not supported: it must be full_attention for the first %d layers and sliding_attention after, as use_sliding_window and max_window_layers say", lt, from))
	}
}

func (r *configReader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

// intZero is int for a key that may be 0.
func (r *configReader) intZero(key string, def int) int {
	var v int64
	if !r.value(key, &v) {
		return def
	}
	if v < 0 || v > 1<<31-1 {
		r.fail(fmt.Errorf("%s must be a non-negative 32-bit integer, got %d", key, v))
	}
	return int(v)
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

// ropeTheta reads rope_theta, or from newer transformers' rope_parameters.
func (r *configReader) ropeTheta() float64 {
	var p struct {
		RopeTheta *float64 `json:"rope_theta"`
	}
	if r.value("rope_parameters", &p) && p.RopeTheta != nil {
		return *p.RopeTheta
	}
	return r.float("rope_theta", 10000)
}

// ropeScaling reads rope_scaling (or newer transformers' rope_parameters): none, "default", or
// Llama 3's scaling; any other rope_type is refused by name.
func (r *configReader) ropeScaling() model.RopeScaling {
	var p struct {
		RopeType      string   `json:"rope_type"`
		Type          string   `json:"type"` // older transformers' name of rope_type
		Factor        *float64 `json:"factor"`
		LowFreq       *float64 `json:"low_freq_factor"`
		HighFreq      *float64 `json:"high_freq_factor"`
		OriginalMaxPE *int     `json:"original_max_position_embeddings"`
	}
	key := "rope_scaling"
	if !r.value(key, &p) {
		key = "rope_parameters"
		if !r.value(key, &p) {
			return model.RopeScaling{}
		}
	}
	typ := p.RopeType
	if typ == "" {
		typ = p.Type
	}
	switch typ {
	case "", "default":
		return model.RopeScaling{}
	case "llama3":
	default:
		r.fail(fmt.Errorf("%s rope_type %q is not supported (supported: default, llama3)", key, typ))
		return model.RopeScaling{}
	}
	if p.Factor == nil || p.LowFreq == nil || p.HighFreq == nil || p.OriginalMaxPE == nil {
		r.fail(fmt.Errorf("%s rope_type llama3 needs factor, low_freq_factor, high_freq_factor and original_max_position_embeddings", key))
		return model.RopeScaling{}
	}
	return model.RopeScaling{Type: "llama3", Factor: *p.Factor, LowFreqFactor: *p.LowFreq,
		HighFreqFactor: *p.HighFreq, OriginalMaxPositions: *p.OriginalMaxPE}
}

// refuseUnsupported rejects settings under which transformers would compute something this
// model does not, naming the key.
func (r *configReader) refuseUnsupported(fam string) error {
	if act := r.str("hidden_act", "silu"); act != "silu" {
		return fmt.Errorf("hidden_act %q is not supported: this model's MLP is SwiGLU (silu)", act)
	}
	set := func(k string) (json.RawMessage, bool) {
		v, ok := r.raw[k]
		if !ok || isNull(v) {
			return nil, false
		}
		switch strings.TrimSpace(string(v)) {
		case "0", "false", "[]", "{}":
			return nil, false
		}
		return v, true
	}
	for _, u := range []struct{ key, why string }{
		{"quantization_config", "this model reads float weights only"},
		{"num_experts", "mixture of experts is not implemented"},
		{"num_local_experts", "mixture of experts is not implemented"},
		{"num_experts_per_tok", "mixture of experts is not implemented"},
		{"moe_intermediate_size", "mixture of experts is not implemented"},
		{"shared_expert_intermediate_size", "mixture of experts is not implemented"},
		{"partial_rotary_factor", "this model rotates the whole head"},
		{"attn_logit_softcapping", "this model does not cap attention logits"},
		{"final_logit_softcapping", "this model does not cap logits"},
	} {
		if v, ok := set(u.key); ok {
			if u.key == "partial_rotary_factor" && strings.TrimSpace(string(v)) == "1" {
				continue
			}
			return fmt.Errorf("%s is %s: not supported, %s", u.key, compact(v), u.why)
		}
	}
	switch fam {
	case model.FamilyMistral, model.FamilyQwen2:
		if v, ok := set("attention_bias"); ok {
			return fmt.Errorf("attention_bias is %s: not an option of %s (%s)", compact(v), fam,
				map[string]string{model.FamilyMistral: "it has no biases", model.FamilyQwen2: "it always has q/k/v biases and no o_proj bias"}[fam])
		}
	}
	if fam != model.FamilyLlama {
		if v, ok := set("mlp_bias"); ok {
			return fmt.Errorf("mlp_bias is %s: not an option of %s", compact(v), fam)
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
