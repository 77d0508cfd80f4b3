package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/agentrl/agentrl/model"
)

// The files of a LoRA adapter folder, as PEFT writes them.
const (
	adapterConfigFile  = "adapter_config.json"
	adapterWeightsFile = "adapter_model.safetensors"
)

// peftConfig is adapter_config.json as PEFT's LoraConfig writes it, restricted to the keys
// that decide what the adapter computes.
type peftConfig struct {
	PeftType          string          `json:"peft_type"`
	TaskType          string          `json:"task_type"`
	BaseModel         string          `json:"base_model_name_or_path"`
	R                 int             `json:"r"`
	LoraAlpha         float64         `json:"lora_alpha"`
	LoraDropout       float64         `json:"lora_dropout"`
	TargetModules     json.RawMessage `json:"target_modules"`
	Bias              string          `json:"bias"`
	FanInFanOut       bool            `json:"fan_in_fan_out"`
	UseRSLoRA         bool            `json:"use_rslora"`
	UseDoRA           bool            `json:"use_dora"`
	ModulesToSave     json.RawMessage `json:"modules_to_save"`
	LayersToTransform json.RawMessage `json:"layers_to_transform"`
	RankPattern       json.RawMessage `json:"rank_pattern"`
	AlphaPattern      json.RawMessage `json:"alpha_pattern"`
	InferenceMode     bool            `json:"inference_mode"`
	InitLoraWeights   bool            `json:"init_lora_weights"`
}

// SaveAdapter writes m's adapters into dir in PEFT's format: adapter_config.json (peft_type
// LORA, r, lora_alpha, lora_dropout, target_modules, base_model_name_or_path base) and
// adapter_model.safetensors (float32, PEFT's tensor names), which PEFT's
// PeftModel.from_pretrained and vLLM's LoRA loading read. Existing files of those names are
// replaced, each atomically.
func SaveAdapter(dir string, m *model.Model, base string) error {
	if m == nil || m.LoRA == nil {
		return fmt.Errorf("checkpoint: save adapter %s: the model has no adapters", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("checkpoint: save adapter %s: %w", dir, err)
	}
	l := m.LoRA.Cfg
	targets, _ := json.Marshal(l.Targets)
	cfg := peftConfig{
		PeftType: "LORA", TaskType: "CAUSAL_LM", BaseModel: base, R: l.Rank, LoraAlpha: l.Alpha,
		LoraDropout: l.Dropout, TargetModules: targets, Bias: "none", InferenceMode: true, InitLoraWeights: true,
		ModulesToSave: json.RawMessage("null"), LayersToTransform: json.RawMessage("null"),
		RankPattern: json.RawMessage("{}"), AlphaPattern: json.RawMessage("{}"),
	}
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	var tensors []Tensor
	for _, t := range m.LoRA.Tensors() {
		tensors = append(tensors, Tensor{Name: t.Name, Shape: t.Shape, Data: t.Data})
	}
	if err := WriteSafetensors(filepath.Join(dir, adapterWeightsFile), tensors, map[string]string{"format": "pt"}); err != nil {
		return err
	}
	if err := writeFileSync(filepath.Join(dir, adapterConfigFile), data); err != nil {
		return fmt.Errorf("checkpoint: save adapter %s: %w", dir, err)
	}
	return nil
}

// parseAdapterConfig reads adapter_config.json: a LoRA adapter whose computation this model
// implements (plain LoRA on the listed projections: no DoRA, rsLoRA, per-module ranks, biases,
// extra trained modules or layer selection, each refused by name). lora_dropout is accepted
// and kept: it acts only while training.
func parseAdapterConfig(data []byte) (model.LoRAConfig, string, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return model.LoRAConfig{}, "", fmt.Errorf("%s: %w", adapterConfigFile, err)
	}
	var c peftConfig
	if err := json.Unmarshal(data, &c); err != nil {
		return model.LoRAConfig{}, "", fmt.Errorf("%s: %w", adapterConfigFile, err)
	}
	bad := func(format string, a ...any) (model.LoRAConfig, string, error) {
		return model.LoRAConfig{}, "", fmt.Errorf("%s: "+format, append([]any{adapterConfigFile}, a...)...)
	}
	set := func(v json.RawMessage) bool {
		s := strings.TrimSpace(string(v))
		return s != "" && s != "null" && s != "{}" && s != "[]"
	}
	switch {
	case c.PeftType != "LORA":
		return bad("peft_type %q is not supported (only LORA)", c.PeftType)
	case c.UseDoRA:
		return bad("use_dora is true: DoRA is not implemented")
	case c.UseRSLoRA:
		return bad("use_rslora is true: rank-stabilized scaling is not implemented")
	case c.FanInFanOut:
		return bad("fan_in_fan_out is true: this model's projections are not Conv1D")
	case c.Bias != "" && c.Bias != "none":
		return bad("bias %q is not supported (only none)", c.Bias)
	case set(c.ModulesToSave):
		return bad("modules_to_save %s is not supported", compact(c.ModulesToSave))
	case set(c.LayersToTransform):
		return bad("layers_to_transform %s is not supported", compact(c.LayersToTransform))
	case set(c.RankPattern):
		return bad("rank_pattern %s is not supported", compact(c.RankPattern))
	case set(c.AlphaPattern):
		return bad("alpha_pattern %s is not supported", compact(c.AlphaPattern))
	}
	for _, k := range []string{"megatron_config", "loftq_config", "layer_replication", "use_qalora", "target_parameters"} {
		if v, ok := raw[k]; ok && set(v) && strings.TrimSpace(string(v)) != "false" {
			return bad("%s %s is not supported", k, compact(v))
		}
	}
	var targets []string
	if err := json.Unmarshal(c.TargetModules, &targets); err != nil {
		return bad("target_modules must be a list of module names (a regular expression or \"all-linear\" is not supported): %s", compact(c.TargetModules))
	}
	sort.Strings(targets)
	l := model.LoRAConfig{Rank: c.R, Alpha: c.LoraAlpha, Targets: targets}
	if err := l.Validate(model.Config{}); err != nil {
		return bad("%v", err)
	}
	if c.LoraDropout < 0 || c.LoraDropout >= 1 {
		return bad("lora_dropout must be in [0, 1), got %v", c.LoraDropout)
	}
	return l, c.BaseModel, nil
}

// AdapterInfo describes an adapter folder: its LoRA settings (lora_dropout aside), what PEFT
// recorded as its base model, and the dropout it was trained with.
type AdapterInfo struct {
	Config    model.LoRAConfig
	BaseModel string
	Dropout   float64
}

// LoadAdapter gives m (without adapters) the adapters of the PEFT folder dir: every tensor
// adapter_config.json implies for m's layers, with the shapes m's config implies (an adapter for
// another base is refused, naming the tensor), finite, and no other tensor.
func LoadAdapter(dir string, m *model.Model) (*AdapterInfo, error) {
	wrap := func(err error) error { return fmt.Errorf("checkpoint: load adapter %s: %w", dir, err) }
	if m == nil || m.LoRA != nil {
		return nil, wrap(errors.New("needs a model without adapters"))
	}
	data, err := readLimited(filepath.Join(dir, adapterConfigFile), 1<<20)
	if err != nil {
		return nil, wrap(err)
	}
	l, base, err := parseAdapterConfig(data)
	if err != nil {
		return nil, wrap(err)
	}
	var raw struct {
		Dropout float64 `json:"lora_dropout"`
	}
	json.Unmarshal(data, &raw) // parsed above
	f, err := os.Open(filepath.Join(dir, adapterWeightsFile))
	if err != nil {
		return nil, wrap(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, wrap(err)
	}
	h, err := parseHeader(f, fi.Size())
	if err != nil {
		return nil, wrap(fmt.Errorf("%s: %w", adapterWeightsFile, err))
	}
	if err := m.AddLoRA(l, 0); err != nil {
		return nil, wrap(err)
	}
	fail := func(err error) (*AdapterInfo, error) {
		m.LoRA = nil
		return nil, wrap(fmt.Errorf("%s: %w", adapterWeightsFile, err))
	}
	var want []Tensor
	for _, t := range m.LoRA.Tensors() {
		want = append(want, Tensor{Name: t.Name, Shape: t.Shape, Data: t.Data})
	}
	if err := checkTensorSet(h, want, false); err != nil {
		return fail(fmt.Errorf("%w (is the adapter for another base model? %s names %q)", err, adapterConfigFile, base))
	}
	for _, t := range want {
		if err := h.readInto(f, h.entries[h.byName[t.Name]], t.Data); err != nil {
			return fail(err)
		}
		if err := checkFinite(t); err != nil {
			return fail(err)
		}
	}
	return &AdapterInfo{Config: l, BaseModel: base, Dropout: raw.Dropout}, nil
}
