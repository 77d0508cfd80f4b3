package checkpoint

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agentrl/agentrl/model"
)

// torchPython is Debian's python3 with PyTorch, the peer of TestFamiliesMatchPyTorch; the test
// is skipped, saying why, where it is absent. AGENTRL_TORCH_PYTHON names another interpreter,
// and AGENTRL_REFERENCE=transformers makes the reference Hugging Face transformers (with PEFT
// for adapters) on AGENTRL_REFERENCE_DEVICE: scripts/gpu-check runs the tests so on a GPU machine.
var torchPython = cmp.Or(os.Getenv("AGENTRL_TORCH_PYTHON"), "/usr/bin/python3")

func requireTorch(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(torchPython); err != nil {
		t.Skipf("%s is absent: the PyTorch cross-check needs Debian's python3-torch", torchPython)
	}
	if out, err := exec.Command(torchPython, "-c", "import torch").CombinedOutput(); err != nil {
		t.Skipf("%s cannot import torch (%v: %s): the PyTorch cross-check needs Debian's python3-torch", torchPython, err, strings.TrimSpace(string(out)))
	}
}

// familyCase is a model family at its published shape's ratios, scaled down to two layers and a
// small width: grouped-query heads in the published proportion, head_dim apart from hidden/heads
// where the family does that (Qwen3), biases, tied or untied embeddings, Llama 3's rope scaling
// with an original context shorter than the sequences, and sliding windows shorter than them.
type familyCase struct {
	name  string
	cfg   model.Config
	dtype string // of the saved weights
	shard int64  // shard size, 0 for one file
}

func familyCases() []familyCase {
	base := func(dim, heads, kv, hidden int, theta float32, tied bool) model.Config {
		return model.Config{Vocab: 320, Dim: dim, Layers: 2, Heads: heads, KVHeads: kv, Hidden: hidden,
			MaxSeq: 64, RopeTheta: theta, NormEps: 1e-5, TieEmbeddings: tied}
	}
	// Llama 3.2 1B: 2048 wide, 32 heads over 8, head 64, MLP 8192, tied, llama3 scaling factor 32.
	llama32 := base(128, 8, 2, 512, 500000, true)
	llama32.RopeScaling = model.RopeScaling{Type: "llama3", Factor: 32, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 16}
	// Llama 3.1 8B: untied, llama3 scaling factor 8; here in sharded bf16, as published.
	llama31 := base(128, 8, 2, 448, 500000, false)
	llama31.RopeScaling = model.RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 12}
	// Llama 2 7B: multi-head attention (no grouping), untied, rope_theta 10000.
	llama2 := base(64, 4, 4, 172, 10000, false)
	// A Llama with attention_bias and mlp_bias.
	llamaBias := base(64, 4, 2, 160, 10000, false)
	llamaBias.QKVBias, llamaBias.OBias, llamaBias.MLPBias = true, true, true
	// SmolLM2 135M: 576 wide, 9 heads over 3, head 64, MLP 1536, tied.
	smol := base(72, 9, 3, 192, 100000, true)
	// Qwen2.5 0.5B: 896 wide, 14 heads over 2, head 64, MLP 4864, tied, q/k/v biases.
	qwen25 := base(112, 7, 1, 608, 1000000, true)
	qwen25.Family, qwen25.QKVBias = model.FamilyQwen2, true
	// Qwen2 with use_sliding_window from layer 1 (max_window_layers 1), window 5.
	qwen2w := base(64, 4, 2, 176, 1000000, false)
	qwen2w.Family, qwen2w.QKVBias, qwen2w.SlidingWindow, qwen2w.WindowFrom = model.FamilyQwen2, true, 5, 1
	// Qwen3 0.6B: 1024 wide, 16 heads over 8, head_dim 128 (not 64), MLP 3072, tied, q/k norms.
	qwen3 := base(64, 4, 2, 192, 1000000, true)
	qwen3.Family, qwen3.QKNorm, qwen3.HeadDimension = model.FamilyQwen3, true, 32
	qwen3.NormEps = 1e-6
	// Mistral 7B v0.1: 4096 wide, 32 heads over 8, head 128, MLP 14336, untied, window 4096
	// (here 5, shorter than the sequences).
	mistral := base(64, 4, 1, 224, 10000, false)
	mistral.Family, mistral.SlidingWindow = model.FamilyMistral, 5
	return []familyCase{
		{"llama3.2", llama32, "F32", 0},
		{"llama3.1-bf16-sharded", llama31, "BF16", 150_000},
		{"llama2", llama2, "F32", 0},
		{"llama-biases", llamaBias, "F16", 0},
		{"smollm2", smol, "F32", 0},
		{"qwen2.5", qwen25, "BF16", 0},
		{"qwen2-window", qwen2w, "F32", 60_000},
		{"qwen3", qwen3, "F32", 0},
		{"mistral", mistral, "F32", 0},
	}
}

// writeFamilyCheckpoint saves a model of fc's config with random weights (larger than at
// initialization, so that logits and their gradients are far from uniform) as a Hugging Face
// checkpoint: config.json and the weights in fc.dtype, sharded when fc.shard is set.
func writeFamilyCheckpoint(t *testing.T, dir string, fc familyCase, seed uint64) {
	t.Helper()
	m, err := model.New(fc.cfg, seed)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 99))
	var weights []Tensor
	for _, tn := range m.Params.Tensors() {
		for i := range tn.Data {
			switch {
			case tn.Bias():
				tn.Data[i] = float32(rng.NormFloat64() * 0.1)
			case len(tn.Shape) == 1:
				tn.Data[i] = 1 + float32(rng.NormFloat64()*0.1)
			default:
				tn.Data[i] = float32(rng.NormFloat64() * 0.08)
			}
		}
		weights = append(weights, Tensor{Name: tn.Name, Shape: tn.Shape, Data: tn.Data})
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	shard := fc.shard
	if shard == 0 {
		shard = DefaultMaxShardBytes
	}
	if err := writeWeights(dir, weights, fc.dtype, "", shard); err != nil {
		t.Fatal(err)
	}
	cfg, err := encodeConfig(fc.cfg, specialIDs{}, fc.dtype)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, configFile), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestFamiliesMatchPyTorch writes every family as a Hugging Face checkpoint with random weights,
// loads it here and in the plain-PyTorch implementation (learners/torch/agentrl_learner/
// modeling.py), and compares: the logits at every position (those of the KV-cache decode path),
// the training forward's log probabilities of the tokens, and the gradient of their sum with
// respect to every weight, to float32 rounding. It then checks the engine's own guarantees on
// the loaded model: greedy decoding with the KV cache equals recomputation from scratch, a
// prefill equals step-by-step decoding bit for bit, and a row's logits do not depend on the rows
// decoded beside it.
func TestFamiliesMatchPyTorch(t *testing.T) {
	fix := torchFixture(t)
	cases, dirs := fix.fam, fix.famDirs
	tokens := fix.famTokens
	for ci, fc := range cases {
		t.Run(fc.name, func(t *testing.T) {
			dir := dirs[ci]
			m, err := LoadModel(dir)
			if err != nil {
				t.Fatal(err)
			}
			if m.Cfg != fc.cfg {
				t.Fatalf("config.json read back as %+v, written from %+v", m.Cfg, fc.cfg)
			}
			if m.DType != fc.dtype {
				t.Errorf("DType %q, saved as %q", m.DType, fc.dtype)
			}
			ref, _, err := ReadSafetensors(filepath.Join(dir, "torch_out.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			compareFamily(t, m, tokens[ci], ref)
			checkDecodeGuarantees(t, m, tokens[ci])
		})
	}
}

// torchRun is the PyTorch reference's output for the family and LoRA tests, computed once
// for both in one interpreter (importing torch is most of its time).
type torchRun struct {
	fam        []familyCase
	famDirs    []string
	famTokens  [][][]int32
	lora       []familyCase
	loraDirs   []string
	loraTokens [][][]int32
	loraModels []*model.Model
}

var (
	torchOnce sync.Once
	torchFix  *torchRun
	torchErr  error
	torchRoot string // removed by TestMain
)

// torchFixture writes every case's checkpoint, tokens (and adapters) and runs the reference
// over all of them, once per test binary.
func torchFixture(t *testing.T) *torchRun {
	t.Helper()
	requireTorch(t)
	torchOnce.Do(func() {
		torchRoot, torchErr = os.MkdirTemp("", "agentrl-torch-")
		if torchErr != nil {
			return
		}
		f := &torchRun{}
		var all []string
		tokensFor := func(dir string, seed uint64, vocab, B, T int) [][]int32 {
			rng := rand.New(rand.NewPCG(seed, 7))
			toks := make([][]int32, B)
			for b := range toks {
				toks[b] = make([]int32, T)
				for i := range T {
					toks[b][i] = int32(rng.IntN(vocab))
				}
			}
			data, _ := json.Marshal(map[string]any{"tokens": toks})
			if err := os.WriteFile(filepath.Join(dir, "tokens.json"), data, 0o644); err != nil && torchErr == nil {
				torchErr = err
			}
			return toks
		}
		for ci, fc := range familyCases() {
			dir := filepath.Join(torchRoot, fc.name)
			writeFamilyCheckpoint(t, dir, fc, uint64(ci+1))
			f.fam, f.famDirs = append(f.fam, fc), append(f.famDirs, dir)
			f.famTokens = append(f.famTokens, tokensFor(dir, uint64(ci), fc.cfg.Vocab, 3, 20))
			all = append(all, dir)
		}
		for ci, fc := range loraCases() {
			dir := filepath.Join(torchRoot, "lora-"+fc.name)
			writeFamilyCheckpoint(t, dir, fc, uint64(ci+11))
			targets := allTargets
			if ci%2 == 1 {
				targets = []string{"q_proj", "v_proj", "down_proj"}
			}
			m := withAdapters(t, dir, targets, uint64(ci+1))
			if err := SaveAdapter(filepath.Join(dir, "adapter"), m, fc.name); err != nil {
				torchErr = err
				return
			}
			f.lora, f.loraDirs, f.loraModels = append(f.lora, fc), append(f.loraDirs, dir), append(f.loraModels, m)
			f.loraTokens = append(f.loraTokens, tokensFor(dir, uint64(ci), fc.cfg.Vocab, 2, 16))
			all = append(all, dir)
		}
		if torchErr != nil {
			return
		}
		cmd := exec.Command(torchPython, append([]string{filepath.Join("testdata", "torch_reference.py")}, all...)...)
		cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1") // nothing written into the source tree
		out, err := cmd.CombinedOutput()
		if err != nil {
			torchErr = fmt.Errorf("PyTorch reference failed: %v\n%s", err, out)
			return
		}
		if os.Getenv("AGENTRL_REFERENCE") != "" {
			t.Logf("the reference said: %s", strings.TrimSpace(string(out)))
		}
		torchFix = f
	})
	if torchErr != nil {
		t.Fatal(torchErr)
	}
	if torchFix == nil {
		t.Fatal("writing the PyTorch comparison's checkpoints failed in an earlier test")
	}
	return torchFix
}

func TestMain(m *testing.M) {
	code := m.Run()
	if torchRoot != "" {
		os.RemoveAll(torchRoot)
	}
	os.Exit(code)
}

// closeTo reports the worst |got-want| relative to the largest |want| of the tensor; float32
// rounding through a few layers stays around 1e-6 of it.
func closeTo(got, want []float32) (worst float64, at int) {
	var scale float64
	for _, w := range want {
		scale = math.Max(scale, math.Abs(float64(w)))
	}
	scale = math.Max(scale, 1e-3)
	at = -1
	for i := range want {
		if d := math.Abs(float64(got[i])-float64(want[i])) / scale; d > worst || math.IsNaN(d) {
			worst, at = d, i
		}
	}
	return worst, at
}

// tolerance is the relative error allowed against PyTorch: float32 rounding of two different
// summation orders through two layers.
const tolerance = 1e-5

func compareFamily(t *testing.T, m *model.Model, tokens [][]int32, ref map[string]Tensor) {
	t.Helper()
	B, T, V := len(tokens), len(tokens[0]), m.Cfg.Vocab
	// Logits at every position, decoding each row token by token through the KV cache.
	m.PackDecodeWeights()
	c := m.NewKVCache(B, T)
	got := make([]float32, B*T*V)
	step := make([]float32, B*V)
	slots := make([]int, B)
	for b := range slots {
		slots[b] = b
	}
	for i := range T {
		toks := make([]int32, B)
		for b := range B {
			toks[b] = tokens[b][i]
		}
		if err := m.Step(c, slots, toks, step); err != nil {
			t.Fatal(err)
		}
		for b := range B {
			copy(got[(b*T+i)*V:(b*T+i+1)*V], step[b*V:(b+1)*V])
		}
	}
	want := ref["logits"].Data
	worstLogit, _ := closeTo(got, want)
	var worstGrad float64
	defer func() {
		if m.HasLoRA() {
			t.Logf("worst relative difference from PyTorch: logits %.2g", worstLogit)
			return
		}
		t.Logf("worst relative differences from PyTorch: logits %.2g, gradients %.2g", worstLogit, worstGrad)
	}()
	if worst, at := closeTo(got, want); worst > tolerance {
		t.Errorf("logits differ from PyTorch by %.3g of their range at %d: %v vs %v", worst, at, got[at], want[at])
	}

	// The training forward's log probabilities of each next token, and their sum's gradient.
	batch := &model.Batch{Rows: B, T: T}
	n := B * T
	batch.Tokens, batch.Targets, batch.Pos, batch.Seg = make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n)
	for b := range B {
		for i := range T {
			batch.Tokens[b*T+i], batch.Pos[b*T+i], batch.Targets[b*T+i] = tokens[b][i], int32(i), -1
			if i+1 < T {
				batch.Targets[b*T+i] = tokens[b][i+1]
			}
		}
	}
	lp, ent := make([]float32, n), make([]float32, n)
	if err := m.Forward(batch, lp, ent); err != nil {
		t.Fatal(err)
	}
	var loss float64
	wantLP := make([]float32, n)
	gotLP := make([]float32, n)
	for b := range B {
		for i := 0; i+1 < T; i++ {
			row := want[(b*T+i)*V : (b*T+i+1)*V]
			mx := row[0]
			for _, v := range row {
				mx = max(mx, v)
			}
			var z float64
			for _, v := range row {
				z += math.Exp(float64(v - mx))
			}
			wantLP[b*T+i] = float32(float64(row[tokens[b][i+1]]-mx) - math.Log(z))
			gotLP[b*T+i] = lp[b*T+i]
			loss += float64(lp[b*T+i])
		}
	}
	if worst, at := closeTo(gotLP, wantLP); worst > tolerance {
		t.Errorf("log probabilities differ from PyTorch's by %.3g at %d: %v vs %v", worst, at, gotLP[at], wantLP[at])
	}
	if want := float64(ref["loss"].Data[0]); math.Abs(loss-want) > 1e-5*math.Abs(want) {
		t.Errorf("loss %v, PyTorch %v", loss, want)
	}
	ones := make([]float32, n)
	for i, tg := range batch.Targets {
		if tg >= 0 {
			ones[i] = 1
		}
	}
	m.ZeroGrad()
	if err := m.Backward(batch, ones, make([]float32, n)); err != nil {
		t.Fatal(err)
	}
	if m.HasLoRA() {
		return // the base is frozen: the caller checks the adapters' gradients
	}
	grads := m.Grads.Tensors()
	checked := 0
	for _, g := range grads {
		r, ok := ref["grad."+g.Name]
		if !ok {
			t.Errorf("PyTorch has no gradient of %s", g.Name)
			continue
		}
		worst, at := closeTo(g.Data, r.Data)
		worstGrad = math.Max(worstGrad, worst)
		if worst > tolerance*5 {
			t.Errorf("gradient of %s differs from PyTorch's by %.3g of its range at %d: %v vs %v", g.Name, worst, at, g.Data[at], r.Data[at])
		}
		checked++
	}
	if want := len(ref) - 2; checked != want {
		t.Errorf("compared %d gradients, PyTorch computed %d", checked, want)
	}
}

// checkDecodeGuarantees greedy-decodes from each row's first tokens with the KV cache, all rows
// stepping together, and checks each step against recomputation from scratch (a fresh cache
// prefilled with the whole sequence so far: bit for bit the same logits, so the same choice)
// and against the row decoded alone (bit for bit: rows do not affect each other), in float32
// and in bfloat16 weights and cache.
func checkDecodeGuarantees(t *testing.T, m *model.Model, tokens [][]int32) {
	t.Helper()
	B, V := len(tokens), m.Cfg.Vocab
	const prompt, gen = 4, 12
	for _, prec := range []model.Precision{model.F32, model.BF16} {
		if err := m.PackDecodeWeightsAs(prec); err != nil {
			t.Fatal(err)
		}
		c, _ := m.NewKVCacheAs(B, prompt+gen, prec)
		seqs := make([][]int32, B)
		logits := make([]float32, V)
		next := make([]int32, B)
		for b := range B {
			seqs[b] = append([]int32(nil), tokens[b][:prompt]...)
			if err := m.Prefill(c, b, seqs[b], logits); err != nil {
				t.Fatal(err)
			}
			next[b] = argmax(logits)
		}
		slots := []int{0, 1, 2}[:B]
		step := make([]float32, B*V)
		fresh := make([]float32, V)
		for range gen - 1 {
			for b := range B {
				seqs[b] = append(seqs[b], next[b])
			}
			if err := m.Step(c, slots, next, step); err != nil {
				t.Fatal(err)
			}
			for b := range B {
				alone, _ := m.NewKVCacheAs(1, prompt+gen, prec)
				if err := m.Prefill(alone, 0, seqs[b], fresh); err != nil {
					t.Fatal(err)
				}
				for j := range V {
					if fresh[j] != step[b*V+j] {
						t.Fatalf("%s: row %d after %d tokens: logit %d is %v decoding beside other rows, %v recomputed alone from scratch",
							prec, b, len(seqs[b]), j, step[b*V+j], fresh[j])
					}
				}
				next[b] = argmax(step[b*V : (b+1)*V])
			}
		}
	}
}

func argmax(x []float32) int32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return int32(best)
}

// TestFamilyConfigRoundTrip saves each family's config.json and reads it back to the same
// config, and checks the keys transformers reads for that family are there.
func TestFamilyConfigRoundTrip(t *testing.T) {
	for _, fc := range familyCases() {
		data, err := encodeConfig(fc.cfg, specialIDs{}, fc.dtype)
		if err != nil {
			t.Fatal(err)
		}
		got, err := parseConfig(data)
		if err != nil {
			t.Fatalf("%s: %v\n%s", fc.name, err, data)
		}
		if got != fc.cfg {
			t.Errorf("%s: read back as %+v, written from %+v", fc.name, got, fc.cfg)
		}
		var keys map[string]any
		if err := json.Unmarshal(data, &keys); err != nil {
			t.Fatal(err)
		}
		arch := fmt.Sprint(keys["architectures"])
		if want := families[familyOf(fc.cfg)]; arch != "["+want+"]" || keys["model_type"] != familyOf(fc.cfg) {
			t.Errorf("%s: architectures %s, model_type %v", fc.name, arch, keys["model_type"])
		}
		if keys["torch_dtype"] != torchDTypes[fc.dtype] {
			t.Errorf("%s: torch_dtype %v, want %s", fc.name, keys["torch_dtype"], torchDTypes[fc.dtype])
		}
	}
}
