package cli

import (
	"bytes"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/checkpoint"
	"github.com/agentrl/agentrl/eval"
	"github.com/agentrl/agentrl/rollout"
)

// The table counts the episodes that did not end ok beside pass@1, so 0% from failing
// environments is visible without --json, and warns with the first failure.
func TestEvalTableShowsFailures(t *testing.T) {
	p1, pk, tu := 0.0, 0.0, 0.0
	for _, c := range []struct {
		name string
		res  eval.Result
		want []string
		not  []string
	}{
		{"greedy failures", eval.Result{Env: "calc", Tasks: 200, Statuses: map[string]int{"env_error": 200},
			FirstFailure: "env_error: step: sandbox lost"},
			[]string{"not ok", "env_error 200", "warning: 200 of 200 episodes failed", "sandbox lost"}, nil},
		{"sampled failures", eval.Result{Env: "calc", Tasks: 2, K: 4, Pass1Sampled: &p1, PassK: &pk, ToolUseSampled: &tu,
			Statuses: map[string]int{"ok": 1, "truncated": 1}, StatusesSampled: map[string]int{"ok": 5, "timeout": 3},
			FirstFailure: "timeout: step: deadline"},
			[]string{"not ok greedy", "not ok sampled", "truncated 1", "timeout 3", "warning: 3 of 10 episodes failed"}, nil},
		{"all ok", eval.Result{Env: "calc", Tasks: 2, Statuses: map[string]int{"ok": 2}}, []string{"not ok"}, []string{"warning"}},
		{"folding", eval.Result{Env: "calc", Tasks: 2, Statuses: map[string]int{"ok": 2}, Context: &rollout.FoldStats{Episodes: 2, Folded: 1, Folds: 1, FoldsPerEpisode: 0.5, TokensBefore: 300, TokensAfter: 90, SuccessFolded: 1}},
			[]string{"context folding (greedy): 0.50 folds per episode, 1 of 2 episodes folded, 300 → 90 tokens", "success folded 100.0%, unfolded 0.0%"}, nil},
		{"no folding", eval.Result{Env: "calc", Tasks: 2, Statuses: map[string]int{"ok": 2}}, nil, []string{"context folding"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := printEval(&b, c.res); err != nil {
				t.Fatal(err)
			}
			for _, w := range c.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, b.String())
				}
			}
			for _, w := range c.not {
				if strings.Contains(b.String(), w) {
					t.Errorf("output has %q:\n%s", w, b.String())
				}
			}
		})
	}
}

// A checkpoint with a NaN weight is refused with the tensor's name, instead of evaluating to 0%.
func TestEvalRefusesBrokenWeights(t *testing.T) {
	ck := filepath.Join(t.TempDir(), "ck")
	m, tok := tinyModel(t, "What is 1 + 2? Answer: 3")
	for _, tn := range m.Params.Tensors() {
		if tn.Name == "model.norm.weight" {
			tn.Data[3] = float32(math.NaN())
		}
	}
	if err := checkpoint.Save(ck, m, tok, nil); err != nil {
		t.Fatal(err)
	}
	out, err := runCLI(t, "eval", "--checkpoint", ck, "--env", "calc", "--tasks", "2", "--k", "0")
	if err == nil || !strings.Contains(err.Error(), `"model.norm.weight"`) || !strings.Contains(err.Error(), "non-finite") {
		t.Fatalf("eval of NaN weights: err = %v\n%s", err, out)
	}
}
