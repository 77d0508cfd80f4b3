package pipeline

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/checkpoint"
	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/env/all"
	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/tokenizer"
)

// qwen3Tiny is a Qwen3-shaped model at a few thousand parameters: q/k norms, head_dim not
// dim/heads, tied embeddings, Qwen3's rope_theta and norm epsilon.
func qwen3Tiny(vocab, maxSeq int) model.Config {
	return model.Config{Vocab: vocab, Dim: 32, Layers: 1, Heads: 2, KVHeads: 1, Hidden: 64, MaxSeq: maxSeq,
		RopeTheta: 1000000, NormEps: 1e-6, TieEmbeddings: true,
		Family: model.FamilyQwen3, QKNorm: true, HeadDimension: 24}
}

// saveQwen3Tiny writes a Qwen3 checkpoint with a tokenizer trained on calc's text, its
// embedding table padded past the tokenizer's ids as published models pad theirs.
func saveQwen3Tiny(t *testing.T, dir string) model.Config {
	t.Helper()
	tok, err := tokenizer.Train([]string{"What is 12 + 30? <tool_call>calc 12+30</tool_call> Answer: 42"}, tokenizer.TrainOptions{VocabSize: 300})
	if err != nil {
		t.Fatal(err)
	}
	mc := qwen3Tiny(tok.VocabSize()+5, 320)
	m, err := model.New(mc, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkpoint.Save(dir, m, tok, nil); err != nil {
		t.Fatal(err)
	}
	return mc
}

var tinyRunSets = []string{
	"runs_dir=runs", "name=initmodel", "seed=3",
	"rollout.max_context=320", "rollout.engine_slots=8",
	"phases.sft.steps=1", "phases.sft.optim.warmup=1", "phases.sft.sft.demos=8", "phases.sft.sft.batch_size=8",
	"phases.rl.steps=1", "phases.rl.optim.warmup=1", "phases.rl.rl.groups_per_step=2", "phases.rl.rl.group_size=2",
	"eval.tasks=2",
}

// init: DIR without a model block (the preset's is a default, not a statement) takes the
// checkpoint's architecture and tokenizer: the run trains the Qwen3 model, and config.yaml and
// the run's checkpoints say so.
func TestInitTakesTheCheckpointsModel(t *testing.T) {
	work := t.TempDir()
	t.Chdir(work)
	ck := filepath.Join(work, "ck")
	want := saveQwen3Tiny(t, ck)
	c, err := config.Load(all.Builtins(), "", "", append([]string{"init=" + ck}, tinyRunSets...))
	if err != nil {
		t.Fatal(err)
	}
	if !c.ModelPending() {
		t.Fatalf("the preset's model was kept with init: %+v", c.Model)
	}
	run, err := NewRun(c, Options{Envs: all.Builtins()})
	if err != nil {
		t.Fatal(err)
	}
	if got := run.Cfg.ModelConfig(want.Vocab); got != want {
		t.Fatalf("run's model\n%+v\nwant the checkpoint's\n%+v", got, want)
	}
	saved, err := os.ReadFile(filepath.Join(run.Dir, "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"family: qwen3", "qk_norm: true", "head_dim: 24", "norm_eps: 1e-06"} {
		if !strings.Contains(string(saved), s) {
			t.Fatalf("config.yaml lacks %q:\n%s", s, saved)
		}
	}
	if _, err := run.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, err := checkpoint.ReadConfig(filepath.Join(run.Dir, "checkpoints", run.stepName(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("the run's last checkpoint has model %+v, want %+v", got, want)
	}
}

// A model setting that contradicts the checkpoint is refused naming the key and both values;
// settings that agree with it are fine.
func TestInitRefusesAContradictingModel(t *testing.T) {
	work := t.TempDir()
	t.Chdir(work)
	ck := filepath.Join(work, "ck")
	saveQwen3Tiny(t, ck)
	for _, tc := range []struct {
		sets []string
		want []string // in the error; none: no error
	}{
		{[]string{"model.dim=64"}, []string{"model.dim", "64", "32"}}, // 64 is also the preset's
		{[]string{"model.head_dim=16", "model.rope_theta=10000"}, []string{"model.head_dim", "16", "24", "model.rope_theta", "10000", "1e+06"}},
		{[]string{"model.family=llama"}, []string{"model.family", "llama", "qwen3"}},
		{[]string{"model.tie_embeddings=false"}, []string{"model.tie_embeddings", "false", "true"}}, // stated at its zero value
		{[]string{"model={qk_norm: false, dim: 32}"}, []string{"model.qk_norm", "false", "true"}},
		{[]string{"model.dim=32", "model.qk_norm=true", "model.max_seq=320"}, nil},
	} {
		c, err := config.Load(all.Builtins(), "", "", append(append([]string{"init=" + ck}, tinyRunSets...), tc.sets...))
		if err != nil {
			t.Fatal(err)
		}
		err = TakeInitModel(context.Background(), &c, all.Builtins(), nil)
		if tc.want == nil {
			if err != nil {
				t.Errorf("%v: %v", tc.sets, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%v: accepted", tc.sets)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: error %q does not name %q", tc.sets, err, w)
			}
		}
	}
}

// A configuration file with init and no model block waits for the checkpoint's model (no
// norm_eps default), and the model's own checks wait with it; config.json's max_position_embeddings
// then bounds rollout.max_context.
func TestInitConfigFileWithoutModel(t *testing.T) {
	work := t.TempDir()
	t.Chdir(work)
	ck := filepath.Join(work, "ck")
	saveQwen3Tiny(t, ck)
	base, err := config.Preset("calc")
	if err != nil {
		t.Fatal(err)
	}
	base.Model = model.Config{}
	base.Init = ck
	data, err := config.Encode(base)
	if err != nil {
		t.Fatal(err)
	}
	data = dropBlock(data, "model")
	c, err := config.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if c.Model != (model.Config{}) || !c.ModelPending() {
		t.Fatalf("decoded model %+v; want it unset until the checkpoint's is taken", c.Model)
	}
	if err := c.Validate(all.Builtins()); err != nil {
		t.Fatal(err)
	}
	// A setting at its zero value in the file states it too.
	stated, err := config.Decode([]byte("model:\n  tie_embeddings: false\n" + string(data)))
	if err != nil {
		t.Fatal(err)
	}
	if err := TakeInitModel(context.Background(), &stated, all.Builtins(), nil); err == nil || !strings.Contains(err.Error(), "model.tie_embeddings: the config says false") {
		t.Fatalf("tie_embeddings: false in the file against a tied checkpoint: %v", err)
	}
	// calc's max_context is 384; the checkpoint's max_seq is 320.
	err = TakeInitModel(context.Background(), &c, all.Builtins(), nil)
	if err == nil || !strings.Contains(err.Error(), "rollout.max_context 384 exceeds model.max_seq 320") {
		t.Fatalf("got %v, want the checkpoint's max_seq to bound rollout.max_context", err)
	}
}

// limits.memory refuses a run whose estimate exceeds it at start, naming the estimate's parts,
// before the model is allocated: with init, before the weights are read (here a truncated
// weights file that loading would refuse).
func TestMemoryCeiling(t *testing.T) {
	work := t.TempDir()
	t.Chdir(work)
	ck := filepath.Join(work, "ck")
	saveQwen3Tiny(t, ck)
	if err := os.Truncate(filepath.Join(ck, "model.safetensors"), 100); err != nil {
		t.Fatal(err)
	}
	for _, sets := range [][]string{
		append([]string{"init=" + ck, "limits.memory=64KiB"}, tinyRunSets...),
		append([]string{"limits={memory: 64KiB}", "model.dim=32", "model.layers=1", "model.heads=2", "model.kv_heads=1", "model.hidden=64", "model.max_seq=320"}, tinyRunSets...),
	} {
		c, err := config.Load(all.Builtins(), "", "", sets)
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		run, err := NewRun(c, Options{Envs: all.Builtins(), Out: &out})
		if err != nil {
			t.Fatal(err)
		}
		_, err = run.Train(context.Background())
		if err == nil {
			t.Fatalf("%v: trained over the ceiling", sets[:2])
		}
		for _, w := range []string{"limits.memory", "weights", "gradients", "AdamW moments", "activations", "KV cache", "a ceiling of 0.00 GiB"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: error %q does not name %q", sets[:2], err, w)
			}
		}
		if !strings.Contains(out.String(), "(limits.memory 64KiB)") {
			t.Errorf("the start line does not say the ceiling:\n%s", out.String())
		}
	}
}

// dropBlock removes the top-level key and its indented block from a YAML document.
func dropBlock(data []byte, key string) []byte {
	var out []string
	in := false
	for _, l := range strings.SplitAfter(string(data), "\n") {
		switch {
		case strings.HasPrefix(l, key+":"):
			in = true
		case in && (strings.HasPrefix(l, " ") || strings.TrimSpace(l) == ""):
		default:
			in = false
			out = append(out, l)
		}
	}
	return []byte(strings.Join(out, ""))
}
