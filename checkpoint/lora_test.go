package checkpoint

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/model"
)

var allTargets = []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}

// withAdapters loads the checkpoint in dir and gives it adapters on targets with random A and B.
func withAdapters(t *testing.T, dir string, targets []string, seed uint64) *model.Model {
	t.Helper()
	m, err := LoadModel(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.AddLoRA(model.LoRAConfig{Rank: 4, Alpha: 8, Targets: targets}, seed); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 5))
	for i := range m.LoRA.Data {
		m.LoRA.Data[i] = float32(rng.NormFloat64() * 0.05)
	}
	return m
}

// loraCases are the families the LoRA comparison runs on, with float32 bases (the merge is
// then the only rounding).
func loraCases() []familyCase {
	var cases []familyCase
	for _, fc := range familyCases() {
		switch fc.name {
		case "llama3.2", "qwen2.5", "qwen3", "mistral":
			fc.dtype, fc.shard = "F32", 0
			cases = append(cases, fc)
		}
	}
	return cases
}

// TestLoRAMatchesPyTorch saves random adapters in PEFT's format beside a family checkpoint; the
// PyTorch reference merges them into the base weights as PEFT defines them (W += alpha/r·B·A,
// modeling.load_adapter) and computes logits and the gradient of the summed token log
// probabilities with respect to the merged weights. The engine, running the adapters unmerged,
// must give the same logits, and adapter gradients equal to the chain rule through the merge:
// dA = alpha/r·Bᵀ·dW, dB = alpha/r·dW·Aᵀ.
func TestLoRAMatchesPyTorch(t *testing.T) {
	fix := torchFixture(t)
	cases, dirs, tokens, models := fix.lora, fix.loraDirs, fix.loraTokens, fix.loraModels
	for ci, fc := range cases {
		t.Run(fc.name, func(t *testing.T) {
			m := models[ci]
			ref, _, err := ReadSafetensors(filepath.Join(dirs[ci], "torch_out.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			// Logits and log probabilities, then a Backward into the adapters' gradients.
			compareFamily(t, m, tokens[ci], ref)
			// Adapter gradients from the merged weights' gradients.
			r, s := m.LoRA.Cfg.Rank, m.LoRA.Cfg.Scale()
			grads := m.LoRA.GradTensors()
			tens := m.LoRA.Tensors()
			var worst float64
			for i := 0; i < len(tens); i += 2 {
				A, Bm := tens[i], tens[i+1]
				module := strings.TrimSuffix(strings.TrimPrefix(A.Name, "base_model.model."), ".lora_A.weight")
				G := ref["grad."+module+".weight"]
				out, in := Bm.Shape[0], A.Shape[1]
				wantA := make([]float32, r*in)
				wantB := make([]float32, out*r)
				for k := range r {
					for j := range in {
						var acc float64
						for o := range out {
							acc += float64(Bm.Data[o*r+k]) * float64(G.Data[o*in+j])
						}
						wantA[k*in+j] = float32(float64(s) * acc)
					}
				}
				for o := range out {
					for k := range r {
						var acc float64
						for j := range in {
							acc += float64(G.Data[o*in+j]) * float64(A.Data[k*in+j])
						}
						wantB[o*r+k] = float32(float64(s) * acc)
					}
				}
				for _, pair := range []struct {
					name      string
					got, want []float32
				}{{A.Name, grads[i].Data, wantA}, {Bm.Name, grads[i+1].Data, wantB}} {
					d, at := closeTo(pair.got, pair.want)
					worst = math.Max(worst, d)
					if d > 5*tolerance {
						t.Errorf("gradient of %s differs from PyTorch's chain rule by %.3g at %d: %v vs %v", pair.name, d, at, pair.got[at], pair.want[at])
					}
				}
			}
			t.Logf("worst relative difference of adapter gradients: %.2g", worst)

			// The adapter folder loads back onto the base.
			base, err := LoadModel(dirs[ci])
			if err != nil {
				t.Fatal(err)
			}
			info, err := LoadAdapter(filepath.Join(dirs[ci], "adapter"), base)
			if err != nil {
				t.Fatal(err)
			}
			if info.BaseModel != fc.name || firstDiff(base.LoRA.Data, m.LoRA.Data) >= 0 {
				t.Fatalf("adapter read back as %+v, differing weights", info)
			}
		})
	}
}

func TestAdapterRefusals(t *testing.T) {
	fc := familyCases()[0]
	dir := filepath.Join(t.TempDir(), "base")
	writeFamilyCheckpoint(t, dir, fc, 1)
	m := withAdapters(t, dir, allTargets, 1)
	ad := filepath.Join(dir, "adapter")
	if err := SaveAdapter(ad, m, "base"); err != nil {
		t.Fatal(err)
	}
	// An adapter of another base: a model with twice the MLP width.
	other := fc
	other.name, other.cfg.Hidden = "other", fc.cfg.Hidden*2
	odir := filepath.Join(t.TempDir(), "other")
	writeFamilyCheckpoint(t, odir, other, 2)
	om, err := LoadModel(odir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = LoadAdapter(ad, om)
	expectErr(t, err, "gate_proj.lora_B.weight", "has shape", "another base")
	if om.LoRA != nil {
		t.Fatal("a refused adapter stayed on the model")
	}
	cases := []struct {
		name string
		edit func(map[string]any)
		want string
	}{
		{"dora", func(c map[string]any) { c["use_dora"] = true }, "use_dora"},
		{"rslora", func(c map[string]any) { c["use_rslora"] = true }, "use_rslora"},
		{"regex targets", func(c map[string]any) { c["target_modules"] = ".*proj" }, "target_modules"},
		{"unknown target", func(c map[string]any) { c["target_modules"] = []string{"lm_head"} }, "lm_head"},
		{"rank pattern", func(c map[string]any) { c["rank_pattern"] = map[string]any{"q_proj": 8} }, "rank_pattern"},
		{"other peft", func(c map[string]any) { c["peft_type"] = "IA3" }, "IA3"},
		{"fewer targets than tensors", func(c map[string]any) { c["target_modules"] = []string{"q_proj"} }, "unexpected tensors"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bad := filepath.Join(t.TempDir(), "adapter")
			os.MkdirAll(bad, 0o755)
			data, _ := os.ReadFile(filepath.Join(ad, adapterConfigFile))
			var cfg map[string]any
			json.Unmarshal(data, &cfg)
			c.edit(cfg)
			data, _ = json.Marshal(cfg)
			os.WriteFile(filepath.Join(bad, adapterConfigFile), data, 0o644)
			w, _ := os.ReadFile(filepath.Join(ad, adapterWeightsFile))
			os.WriteFile(filepath.Join(bad, adapterWeightsFile), w, 0o644)
			base, err := LoadModel(dir)
			if err != nil {
				t.Fatal(err)
			}
			_, err = LoadAdapter(bad, base)
			expectErr(t, err, c.want)
		})
	}
}

func FuzzParseAdapterConfig(f *testing.F) {
	f.Add([]byte(`{"peft_type": "LORA", "r": 8, "lora_alpha": 16, "lora_dropout": 0.05, "target_modules": ["q_proj", "v_proj"], "bias": "none"}`))
	f.Add([]byte(`{"peft_type": "LORA", "r": 8, "lora_alpha": 16, "target_modules": "all-linear"}`))
	f.Add([]byte(`{"peft_type": "LORA", "r": 0}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		l, _, err := parseAdapterConfig(b)
		if err != nil {
			return
		}
		if err := l.Validate(model.Config{}); err != nil {
			t.Fatalf("accepted %+v: %v", l, err)
		}
	})
}

// A checkpoint of a model with adapters holds the base weights, the adapters in PEFT's format
// beside them and the optimizer's moments of the adapters: Load gives all three back, and the
// merged export saves plain weights that compute the same.
func TestLoRACheckpointResume(t *testing.T) {
	m := newModel(t, tinyConfig(true), 4)
	if err := m.AddLoRA(model.LoRAConfig{Rank: 2, Alpha: 4, Targets: []string{"q_proj", "down_proj"}}, 3); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range m.LoRA.Data {
		m.LoRA.Data[i] = float32(rng.NormFloat64() * 0.1)
	}
	st := &State{Optimizer: randomState(len(m.LoRA.Data), 5), Extra: json.RawMessage(`{"step":3}`)}
	dir := filepath.Join(t.TempDir(), "step-3")
	mustSave(t, dir, m, st)
	for _, f := range []string{adapterConfigFile, adapterWeightsFile, weightsFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	ck, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !ck.Model.HasLoRA() || firstDiff(ck.Model.LoRA.Data, m.LoRA.Data) >= 0 || firstDiff(ck.Model.Params.Data, m.Params.Data) >= 0 {
		t.Fatal("weights or adapters differ after the round trip")
	}
	o := ck.State.Optimizer
	if o == nil || o.Step != st.Optimizer.Step || firstDiff(o.M, st.Optimizer.M) >= 0 || firstDiff(o.V, st.Optimizer.V) >= 0 {
		t.Fatal("the adapters' optimizer state differs after the round trip")
	}
	// Moments sized for the full model are refused for a model with adapters.
	if err := Save(filepath.Join(t.TempDir(), "bad"), m, testTokenizer(t), &State{Optimizer: randomState(m.NumParams(), 1)}); err == nil {
		t.Fatal("saved full-model moments with a model of adapters")
	}
	// The merged export is a plain checkpoint of the same function.
	mdir := filepath.Join(t.TempDir(), "merged")
	mustSave(t, mdir, m.Merged(), nil)
	if _, err := os.Stat(filepath.Join(mdir, adapterConfigFile)); err == nil {
		t.Fatal("the merged export has adapter files")
	}
	merged, err := LoadModel(mdir)
	if err != nil {
		t.Fatal(err)
	}
	seq := []int32{1, 5, 2, 7, 3}
	a, b := decodeAll(t, m, seq), decodeAll(t, merged, seq)
	for i := range a {
		if math.Abs(float64(a[i]-b[i])) > 1e-5 {
			t.Fatalf("logit %d: %v with adapters, %v merged", i, a[i], b[i])
		}
	}
}

func decodeAll(t *testing.T, m *model.Model, seq []int32) []float32 {
	t.Helper()
	c := m.NewKVCache(1, len(seq))
	out := make([]float32, m.Cfg.Vocab)
	if err := m.Prefill(c, 0, seq, out); err != nil {
		t.Fatal(err)
	}
	return out
}
