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
	"github.com/agentrl/agentrl/hub/hubtest"
	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/tokenizer"
)

// init: hf:ORG/NAME downloads the checkpoint from the Hub (a local test server) into the
// huggingface_hub cache and starts the run from it; the run's config keeps the reference.
func TestInitFromTheHub(t *testing.T) {
	work := t.TempDir()
	t.Chdir(work)
	c, err := config.Load(all.Builtins(), "", "", []string{
		"runs_dir=runs", "name=fromhub", "init=hf:org/tiny", "seed=3",
		"model.dim=32", "model.layers=1", "model.heads=2", "model.kv_heads=1", "model.hidden=64", "model.max_seq=320",
		"rollout.max_context=320", "rollout.engine_slots=8",
		"phases.sft.steps=1", "phases.sft.optim.warmup=1", "phases.sft.sft.demos=8", "phases.sft.sft.batch_size=8",
		"phases.rl.steps=1", "phases.rl.optim.warmup=1", "phases.rl.rl.groups_per_step=2", "phases.rl.rl.group_size=2",
		"eval.tasks=2",
	})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Train([]string{"What is 12 + 30? <tool_call>calc 12+30</tool_call> Answer: 42"}, tokenizer.TrainOptions{VocabSize: 300})
	if err != nil {
		t.Fatal(err)
	}
	// The run's model block is the checkpoint's (config.Load leaves it to init).
	m, err := model.New(model.Config{Vocab: tok.VocabSize(), Dim: 32, Layers: 1, Heads: 2, KVHeads: 1, Hidden: 64, MaxSeq: 320,
		RopeTheta: 10000, NormEps: model.DefaultNormEps, TieEmbeddings: true}, 1)
	if err != nil {
		t.Fatal(err)
	}
	local := filepath.Join(work, "ck")
	if err := checkpoint.Save(local, m, tok, nil); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	entries, _ := os.ReadDir(local)
	for _, e := range entries {
		if e.Type().IsRegular() {
			b, err := os.ReadFile(filepath.Join(local, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			files[e.Name()] = b
		}
	}
	h := hubtest.New(t, "org/tiny", files, "model.safetensors")
	t.Setenv("HF_HOME", filepath.Join(work, "hf"))
	t.Setenv("HF_HUB_CACHE", "")
	t.Setenv("HUGGINGFACE_HUB_CACHE", "")
	t.Setenv("HF_ENDPOINT", h.API.URL)
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_TOKEN_PATH", "")
	t.Setenv("HF_HUB_OFFLINE", "")
	run, err := NewRun(c, Options{Envs: all.Builtins()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(work, "hf", "hub", "models--org--tiny", "snapshots", h.Commit, "model.safetensors")); err != nil {
		t.Fatalf("not downloaded into the cache: %v", err)
	}
	saved, _ := os.ReadFile(filepath.Join(run.Dir, "config.yaml"))
	if !strings.Contains(string(saved), "init: hf:org/tiny") {
		t.Fatalf("config.yaml does not keep the reference:\n%s", saved)
	}
	bad := c
	bad.Init = "hf:org/../escape"
	if _, err := NewRun(bad, Options{Envs: all.Builtins()}); err == nil || !strings.Contains(err.Error(), "init:") {
		t.Fatalf("a bad reference: %v", err)
	}
}
