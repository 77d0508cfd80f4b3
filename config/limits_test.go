package config

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/algo"
	"github.com/agentrl/agentrl/env/all"
)

// Degenerate settings are errors at load, naming the key, before any work (issue 13, item 7).
func TestDegenerateConfigsRefused(t *testing.T) {
	dir, good, write := loadFixture(t)
	cases := []loadCase{
		{name: "grpo with groups of one", sets: []string{"phases.rl.rl.group_size=1", "phases.rl.rl.minibatches=1"}, want: `rl.group_size: "grpo" compares each episode`},
		{name: "gigpo with groups of one", sets: []string{"phases.rl.rl.group_size=1", "phases.rl.rl.minibatches=1", "phases.rl.rl.advantage={name: gigpo, gigpo: {gamma: 0.95, step_weight: 1}}"}, want: `rl.group_size: "gigpo"`},
		{name: "dynamic sampling with groups of one", sets: []string{"phases.rl.rl.group_size=1", "phases.rl.rl.minibatches=1", "phases.rl.rl.advantage.name=reinforce-baseline"}, want: "rl.dynamic_sampling"},
		{name: "fraction in a file", path: write("f.yaml", strings.Replace(string(good), "steps: 100\n", "steps: 1.5\n", 1)), want: "phases[1].steps: 1.5 is not an integer"},
		{name: "fraction by --set", sets: []string{"phases.rl.steps=2.5"}, want: "phases[1].steps: 2.5 is not an integer"},
		{name: "infinity for an integer", sets: []string{"seed=.inf"}, want: "seed: .inf is not an integer"},
		{name: "init with tokenizer settings", sets: []string{"init=" + dir, "tokenizer.vocab_size=1000"}, want: "tokenizer: init " + dir + " brings its own tokenizer"},
		{name: "empty file", path: write("empty.yaml", ""), want: "the configuration is empty"},
		{name: "comments only", path: write("comments.yaml", "# nothing yet\n"), want: "the configuration is empty"},
	}
	checkLoadErrors(t, cases)
	// Integral numbers written as floats, init with the default tokenizer, and estimators
	// without groups on groups of one stay valid.
	for _, sets := range [][]string{
		{"phases.rl.steps=2e2"},
		{"init=" + dir},
		{"phases.rl.rl.group_size=1", "phases.rl.rl.minibatches=1", "phases.rl.rl.advantage.name=reinforce-baseline", "phases.rl.rl.dynamic_sampling=null"},
	} {
		if _, err := Load(all.Builtins(), "", "", sets); err != nil {
			t.Errorf("--set %v: %v", sets, err)
		}
	}
}

// Every size a user can type is bounded with an error naming the limit, before allocating
// (item 8); the memory the refusal takes is measured.
func TestSizeLimits(t *testing.T) {
	cases := []struct {
		sets []string
		want string
	}{
		{[]string{"rollout.engine_slots=100000000"}, "rollout.engine_slots 100000000 must be in [1, 4096]"},
		{[]string{"rollout.engine_slots=4096", "model.max_seq=131072", "rollout.max_context=131072", "model.layers=64"}, "local.MaxCacheBytes"},
		{[]string{"model.dim=1000000000"}, "dim 1000000000 exceeds the limit"},
		{[]string{"model.layers=1000000000"}, "layers 1000000000 exceeds the limit"},
		{[]string{"model.hidden=1000000000"}, "hidden 1000000000 exceeds the limit"},
		{[]string{"model.max_seq=1000000000"}, "max_seq 1000000000 exceeds the limit"},
		{[]string{"model.dim=8192", "model.layers=64", "model.heads=64", "model.kv_heads=64", "model.hidden=32768"}, "model.MaxParams"},
		{[]string{"tokenizer.vocab_size=100000000"}, "tokenizer.vocab_size"},
		{[]string{"tokenizer.corpus_samples=100000000000"}, "tokenizer.corpus_samples"},
		{[]string{"phases.sft.sft.demos=100000000000"}, "pipeline.MaxDemos"},
		{[]string{"phases.sft.sft.demos=900000"}, "pipeline.MaxDemoTokens"},
		{[]string{"phases.sft.sft.batch_size=3000"}, "pipeline.MaxBatchTokens"},
		{[]string{"model.dim=4096", "model.heads=32", "model.kv_heads=32", "model.hidden=8192", "model.layers=8"}, "pipeline.MaxActivationBytes"},
		{[]string{"phases.rl.rl.group_size=100000000"}, "group_size 100000000"},
		{[]string{"phases.rl.rl.groups_per_step=100000000000"}, "groups_per_step 100000000000"},
		{[]string{"phases.rl.rl.groups_per_step=4096", "phases.rl.rl.group_size=1024"}, "pipeline.MaxStepTokens"},
		{[]string{"phases.rl.rl.dynamic_sampling.max_rounds=1000000000000"}, "max_rounds"},
		{[]string{"phases.rl.rl.epochs=100000000"}, "epochs 100000000"},
		{[]string{"eval.tasks=100000000000"}, "eval.tasks 100000000000"},
		{[]string{"eval.samples=100000000000"}, "eval.samples 100000000000"},
		{[]string{"eval.tasks=100000", "eval.samples=1000"}, "eval.MaxEpisodeTokens"},
	}
	for _, c := range cases {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := Load(all.Builtins(), "", "", c.sets)
		runtime.ReadMemStats(&after)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--set %v: err = %v, want one containing %q", c.sets, err, c.want)
		}
		if d := after.TotalAlloc - before.TotalAlloc; d > 16<<20 {
			t.Errorf("--set %v: refusing took %d MiB", c.sets, d>>20)
		}
	}
}

// YAML input is bounded in size and nesting before the parser sees it, and a device or huge
// file is not read forever (item 8).
func TestConfigInputBounds(t *testing.T) {
	dir := t.TempDir()
	deep := filepath.Join(dir, "deep.yaml")
	nest := 60000
	if err := os.WriteFile(deep, []byte("seed: "+strings.Repeat("[", nest)+strings.Repeat("]", nest)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	huge := filepath.Join(dir, "huge.yaml")
	if err := os.WriteFile(huge, []byte("name: x\n"+strings.Repeat("# padding\n", MaxConfigBytes/10+1)), 0o644); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		deep:        "nest more than 64 deep",
		huge:        "larger than the 1048576-byte limit",
		"/dev/zero": "larger than the 1048576-byte limit",
	} {
		if path == "/dev/zero" {
			if _, err := os.Stat(path); err != nil {
				continue
			}
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := Load(all.Builtins(), "", path, nil)
		runtime.ReadMemStats(&after)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want one containing %q", path, err, want)
		}
		if d := after.TotalAlloc - before.TotalAlloc; d > 64<<20 {
			t.Errorf("%s: refusing took %d MiB", path, d>>20)
		}
	}
	if _, err := Load(all.Builtins(), "", "", []string{"seed=" + strings.Repeat("[", 100) + strings.Repeat("]", 100)}); err == nil || !strings.Contains(err.Error(), "nest more than") {
		t.Errorf("deep --set value: %v", err)
	}
	if _, err := Load(all.Builtins(), "", "", []string{"phases.rl.envs=[&e {name: calc, weight: 1}, *e]"}); err == nil || !strings.Contains(err.Error(), "anchors and aliases") {
		t.Errorf("--set value with an alias: %v", err)
	}
}

// --set of a loss's policy switches it with the new policy's paper defaults, whose own settings
// may follow in any order; list and map values carry commas (item 10).
func TestSetSwitchesPolicy(t *testing.T) {
	c, err := Load(all.Builtins(), "", "", []string{"phases.rl.rl.loss.gspo.clip_high=5e-4", "phases.rl.rl.loss.policy=gspo"})
	if err != nil {
		t.Fatal(err)
	}
	want := algo.DefaultLossConfig().WithPolicy("gspo")
	want.GSPO.ClipHigh = 5e-4
	if got := c.Phases[1].RL.Loss; got != want {
		t.Fatalf("loss = %+v, want %+v", got, want)
	}
	c, err = Load(all.Builtins(), "", "", []string{"phases.rl.envs=[{name: calc, weight: 1}, {name: maze, weight: 2}]"})
	if err != nil {
		t.Fatal(err)
	}
	if e := c.Phases[1].Envs; len(e) != 2 || e[1].Name != "maze" || e[1].Weight != 2 {
		t.Fatalf("envs = %+v", e)
	}
}

// The step's token bound counts every sample an episode can make: each fold's and each
// sub-episode's, not only the root's first context.
func TestStepTokensCountFoldsAndSubEpisodes(t *testing.T) {
	big := []string{"phases.rl.rl.groups_per_step=2048", "phases.rl.rl.group_size=8", "phases.rl.rl.minibatches=2048"}
	sets := func(extra ...string) []string { return append(append([]string{}, big...), extra...) }
	// One sample an episode fits: 16384 episodes × 3 rounds × 384 tokens.
	if _, err := Load(all.Builtins(), "", "", big); err != nil {
		t.Fatalf("without folding or delegation: %v", err)
	}
	for _, c := range []struct {
		name string
		sets []string
		want string
	}{
		// Up to 4 samples (a fold a turn after the first) of 384 tokens each.
		{"folding", sets("rollout.context={keep_turns: 1}"), "1536 tokens an episode"},
		// The root's 384 and 8 sub-episodes of 384.
		{"delegation", sets("rollout.delegate={max_depth: 1}"), "3456 tokens an episode"},
		// The oversampled rounds of task sampling count the same tokens.
		{"oversample with folding", []string{"monitor.task_sampling={explore: 0.25, decay: 0.5, max_tasks: 64, oversample: 2}", "phases.rl.rl.groups_per_step=1024",
			"phases.rl.rl.group_size=8", "phases.rl.rl.minibatches=1024", "rollout.context={keep_turns: 1}"}, "monitor.task_sampling.oversample"},
		// Evaluation keeps its episodes' samples too.
		{"eval with folding", []string{"eval.tasks=40000", "eval.samples=1", "rollout.context={keep_turns: 1}"}, "eval.MaxEpisodeTokens"},
	} {
		_, err := Load(all.Builtins(), "", "", c.sets)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "Max") {
			t.Errorf("%s: err = %v, want one containing %q", c.name, err, c.want)
		}
	}
	// Sub-episodes are counted at their own max_tokens: one of 64 tokens fits.
	if _, err := Load(all.Builtins(), "", "", sets("rollout.delegate={max_depth: 1, max_per_episode: 1, max_tokens: 64}")); err != nil {
		t.Errorf("one short sub-episode: %v", err)
	}
}
