package checkpoint

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"testing"
)

// python3 returns the interpreter's path, skipping the test when there is none: the peer
// scripts are the only part of the suite that needs it.
func python3(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found; the peer tests need it")
	}
	return p
}

type peerListing struct {
	Metadata  map[string]string `json:"metadata"`
	HeaderLen int               `json:"header_len"`
	Tensors   []struct {
		Name   string `json:"name"`
		DType  string `json:"dtype"`
		Shape  []int  `json:"shape"`
		SHA256 string `json:"sha256"`
	} `json:"tensors"`
}

func peerRead(t *testing.T, path string) peerListing {
	t.Helper()
	out, err := exec.Command(python3(t), filepath.Join("testdata", "read_safetensors.py"), path).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("peer reader rejected %s: %s", path, ee.Stderr)
		}
		t.Fatal(err)
	}
	var l peerListing
	if err := json.Unmarshal(out, &l); err != nil {
		t.Fatalf("peer output %q: %v", out, err)
	}
	return l
}

func floatSHA(x []float32) string {
	b := make([]byte, 0, 4*len(x))
	for _, v := range x {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestPeerReadsOurFiles has an independent reader parse the weights and optimizer files and
// compares every tensor's name, dtype, shape and bytes with what was saved.
func TestPeerReadsOurFiles(t *testing.T) {
	python3(t)
	m := newModel(t, tinyConfig(false), 11)
	st := &State{Optimizer: randomState(m.NumParams(), 12)}
	dir := filepath.Join(t.TempDir(), "ckpt")
	mustSave(t, dir, m, st)

	want := map[string]Tensor{}
	for _, p := range m.Params.Tensors() {
		want[p.Name] = Tensor{Shape: p.Shape, Data: p.Data}
	}
	comparePeer(t, peerRead(t, filepath.Join(dir, weightsFile)), want, map[string]string{"format": "pt"})

	want = map[string]Tensor{}
	for _, tn := range optimizerTensors(m.Params.Tensors(), st.Optimizer) {
		want[tn.Name] = tn
	}
	comparePeer(t, peerRead(t, filepath.Join(dir, optimizerFile)), want, optimizerMetadata(st.Optimizer))
}

func comparePeer(t *testing.T, got peerListing, want map[string]Tensor, meta map[string]string) {
	t.Helper()
	if got.HeaderLen%8 != 0 {
		t.Errorf("header length %d is not a multiple of 8", got.HeaderLen)
	}
	if len(got.Metadata) != len(meta) {
		t.Errorf("peer sees metadata %v, want %v", got.Metadata, meta)
	}
	for k, v := range meta {
		if got.Metadata[k] != v {
			t.Errorf("peer sees metadata %v, want %v", got.Metadata, meta)
		}
	}
	if len(got.Tensors) != len(want) {
		t.Fatalf("peer sees %d tensors, we wrote %d", len(got.Tensors), len(want))
	}
	for _, g := range got.Tensors {
		w, ok := want[g.Name]
		switch {
		case !ok:
			t.Fatalf("peer sees unexpected tensor %q", g.Name)
		case g.DType != "F32" || !slices.Equal(g.Shape, w.Shape):
			t.Fatalf("%s: peer sees %s %v, we wrote F32 %v", g.Name, g.DType, g.Shape, w.Shape)
		case g.SHA256 != floatSHA(w.Data):
			t.Fatalf("%s: peer's bytes differ from ours", g.Name)
		}
	}
}

// peerConfig is the architecture write_llama.py builds.
var peerConfig = map[string]int{"vocab": 300, "dim": 16, "layers": 2, "heads": 4, "kv_heads": 2, "hidden": 24, "max_seq": 64}

func writePeerFolder(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "peer")
	cfg, _ := json.Marshal(peerConfig)
	cmd := exec.Command(python3(t), filepath.Join("testdata", "write_llama.py"), dir, string(cfg))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("peer writer: %v\n%s", err, out)
	}
	return dir
}

// peerValue mirrors write_llama.py's formula for tensor t (index in sorted names), element i.
func peerValue(name string, t, i int) float32 {
	if name == "model.norm.weight" || name == "model.layers.0.input_layernorm.weight" {
		return float32(1 + float64(i%8)/128)
	}
	return float32(float64((i*7919+t*31)%1000-500) / 1000 * 0.05)
}

func TestLoadForeignLlamaFolder(t *testing.T) {
	dir := writePeerFolder(t)
	m, err := LoadModel(dir)
	if err != nil {
		t.Fatal(err)
	}
	c := m.Cfg
	if c.Vocab != 300 || c.Dim != 16 || c.Layers != 2 || c.Heads != 4 || c.KVHeads != 2 || c.Hidden != 24 ||
		c.MaxSeq != 64 || c.TieEmbeddings || c.RopeTheta != 500000 || c.NormEps != 1e-6 {
		t.Fatalf("config read as %+v", c)
	}
	params := m.Params.Tensors()
	names := make([]string, len(params))
	for i, p := range params {
		names[i] = p.Name
	}
	sort.Strings(names)
	for _, p := range params {
		ti := sort.SearchStrings(names, p.Name)
		for i, v := range p.Data {
			if want := peerValue(p.Name, ti, i); math.Float32bits(v) != math.Float32bits(want) {
				t.Fatalf("%s[%d] = %v, the peer wrote %v", p.Name, i, v, want)
			}
		}
	}

	// With a tokenizer beside it the folder loads as a full checkpoint without resume state.
	if err := testTokenizer(t).Save(dir); err != nil {
		t.Fatal(err)
	}
	ck, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if ck.State != nil || firstDiff(ck.Model.Params.Data, m.Params.Data) >= 0 {
		t.Fatal("Load and LoadModel disagree on the peer folder")
	}
}

func TestForeignConfigRefusals(t *testing.T) {
	dir := writePeerFolder(t)
	cases := []struct {
		name string
		edit func(map[string]any)
		want []string
	}{
		{"rope_scaling", func(c map[string]any) { c["rope_scaling"] = map[string]any{"rope_type": "linear", "factor": 2.0} }, []string{"rope_scaling", "linear"}},
		{"hidden_act", func(c map[string]any) { c["hidden_act"] = "gelu" }, []string{"hidden_act", "gelu"}},
		{"rope_parameters", func(c map[string]any) {
			c["rope_parameters"] = map[string]any{"rope_type": "llama3", "rope_theta": 5e5}
		}, []string{"rope_type", "llama3"}},
		{"quantized", func(c map[string]any) { c["quantization_config"] = map[string]any{"quant_method": "awq"} }, []string{"quantization_config"}},
		{"attention bias on mistral", func(c map[string]any) {
			c["model_type"], c["architectures"], c["attention_bias"] = "mistral", []string{"MistralForCausalLM"}, true
		}, []string{"attention_bias", "mistral"}},
		{"mlp bias on qwen3", func(c map[string]any) {
			c["model_type"], c["architectures"], c["mlp_bias"] = "qwen3", []string{"Qwen3ForCausalLM"}, true
		}, []string{"mlp_bias", "qwen3"}},
		{"architecture contradicts model_type", func(c map[string]any) { c["model_type"] = "mistral" }, []string{"architectures", "MistralForCausalLM"}},
		{"other model", func(c map[string]any) { c["model_type"] = "gemma" }, []string{"model_type", "gemma"}},
		{"mixture of experts", func(c map[string]any) { c["num_local_experts"] = 8 }, []string{"num_local_experts"}},
		{"window on llama", func(c map[string]any) { c["sliding_window"] = 4 }, []string{"sliding_window", "llama"}},
		{"qwen layer types", func(c map[string]any) {
			c["model_type"], c["architectures"] = "qwen2", []string{"Qwen2ForCausalLM"}
			c["use_sliding_window"], c["sliding_window"], c["max_window_layers"] = true, 4, 1
			c["layer_types"] = []string{"sliding_attention", "full_attention"}
		}, []string{"layer_types"}},
		{"llama3 scaling incomplete", func(c map[string]any) {
			c["rope_scaling"] = map[string]any{"rope_type": "llama3", "factor": 8.0}
		}, []string{"rope_scaling", "low_freq_factor"}},
		{"other architecture", func(c map[string]any) { c["architectures"] = []string{"LlamaForSequenceClassification"} }, []string{"architectures"}},
		{"head_dim", func(c map[string]any) { c["head_dim"] = 8 }, []string{"q_proj.weight", "has shape [16 16], config.json implies [32 16]"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			editConfig(t, dir, c.edit)
			_, err := LoadModel(dir)
			expectErr(t, err, append([]string{"config.json"}, c.want...)...)
		})
	}
}
