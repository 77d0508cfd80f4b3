package pipeline

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/env/all"
	"github.com/agentrl/agentrl/env/calc"
	"github.com/agentrl/agentrl/rollout"
	"github.com/agentrl/agentrl/traj"
)

// A difficulty block is read from YAML and checked against the environment's levels.
func TestDifficultyConfig(t *testing.T) {
	c := tinyConfig(t, t.TempDir(), `phases.rl.envs=[{name: calc, weight: 1, difficulty: {levels: [1, 4], weights: [1, 3]}}]`)
	d := c.Phases[1].Envs[0].Difficulty
	if d == nil || fmt.Sprint(d.Levels, d.Weights) != "[1 4] [1 3]" {
		t.Fatalf("difficulty read as %+v", d)
	}
	if data, err := config.Encode(c); err != nil || !strings.Contains(string(data), "difficulty:") {
		t.Fatalf("encoded config lacks the difficulty block (%v):\n%s", err, data)
	}
	for _, tc := range []struct{ set, want string }{
		{`phases.rl.envs=[{name: calc, weight: 1, difficulty: {levels: [5]}}]`, "no level 5 (the environment has 1, 2, 3, 4)"},
		{`phases.rl.envs=[{name: calc, weight: 1, difficulty: {levels: [1, 2], weights: [1]}}]`, "difficulty.weights"},
		{`phases.rl.envs=[{name: calc, weight: 1, difficulty: {levels: [1], hops: 2}}]`, "hops"},
		{`phases.rl.envs=[{name: code, weight: 1, difficulty: {levels: [1]}}]`, "no difficulty levels"},
		{`phases.sft.envs=[{name: calc, weight: 1, difficulty: {levels: []}}]`, "at least one level"},
	} {
		_, err := config.Load(all.Builtins(), "", "", []string{tc.set})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %q", tc.set, err, tc.want)
		}
	}
	if c := tinyConfig(t, t.TempDir()); c.EvalDifficulty("calc") != nil {
		t.Error("a run without difficulty evaluates at one")
	}
}

// A run whose phases draw calc at levels: the demonstrations and the RL episodes pose the
// tasks of the levels their seeds draw, and every evaluation reports each level of the run.
func TestDifficultyRun(t *testing.T) {
	sftD := env.Difficulty{Levels: []int{4}}
	rlD := env.Difficulty{Levels: []int{1, 4}, Weights: []float64{1, 3}}
	c := tinyConfig(t, t.TempDir(), "phases.rl.steps=1",
		`phases.sft.envs=[{name: calc, weight: 1, difficulty: {levels: [4]}}]`,
		`phases.rl.envs=[{name: calc, weight: 1, difficulty: {levels: [1, 4], weights: [1, 3]}}]`)
	if d := c.EvalDifficulty("calc"); d == nil || fmt.Sprint(d.Levels) != "[1 4]" || d.Weights != nil {
		t.Fatalf("evaluated at %+v, want levels 1 and 4 in equal shares", d)
	}
	var out strings.Builder
	run, err := NewRun(c, Options{Envs: all.Builtins(), Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "phase rl: tasks drawn by difficulty: calc at levels 1 (×1), 4 (×3)") || !strings.Contains(out.String(), "(calc L1 ") {
		t.Errorf("the run does not describe its difficulty:\n%s", out.String())
	}
	n, levels := 0, 0
	rlEps, rlWins := map[string]int{}, map[string]int{} // by level, the RL step's episodes
	for _, tr := range readTrajs(t, run.Dir) {
		d := rlD
		if meta(tr, "phase") == "sft" {
			d = sftD
		} else if lv := meta(tr, env.InfoLevel); lv != "" {
			rlEps[lv]++
			if rollout.Succeeded(tr) {
				rlWins[lv]++
			}
		}
		level := d.LevelOf(tr.TaskSeed)
		// An episode cut short by a rollout limit never saw its final transition.
		if got := meta(tr, env.InfoLevel); got != fmt.Sprint(level) && (got != "" || meta(tr, env.InfoSuccess) != "") {
			t.Fatalf("episode %s (seed %d, %v): level %q recorded, want %d", tr.ID, tr.TaskSeed, tr.Status, got, level)
		}
		if q := calc.NewTaskAt(tr.TaskSeed, level).Question; !strings.Contains(run.tok.Decode(tr.Tokens), q) {
			t.Fatalf("episode %s (seed %d, level %d) does not pose %q", tr.ID, tr.TaskSeed, level, q)
		}
		n++
		if meta(tr, env.InfoLevel) != "" {
			levels++
		}
	}
	if n == 0 || levels == 0 {
		t.Fatalf("%d trajectories recorded, %d with their level", n, levels)
	}
	evals := 0
	for _, m := range metricLines(t, run.Dir) {
		if m["phase"] == "rl" && m["optim/lr"] != nil {
			// The RL step's training success per level, from the episodes it recorded.
			for lv, eps := range rlEps {
				k := "reward/success/calc/level" + lv
				if got, ok := m[k].(float64); !ok || got != float64(rlWins[lv])/float64(eps) {
					t.Errorf("%s = %v, want %d of %d", k, m[k], rlWins[lv], eps)
				}
			}
			if len(rlEps) == 0 || m["reward/success/calc/level2"] != nil {
				t.Errorf("step levels %v, line %v", rlEps, m)
			}
		}
		if m["eval"] == nil {
			continue
		}
		evals++
		t1, t4 := m["eval/level1/tasks"], m["eval/level4/tasks"]
		if t1 == nil || t4 == nil || t1.(float64)+t4.(float64) != float64(c.Eval.Tasks) || m["eval/level1/pass1"] == nil || m["eval/level4/pass1_greedy"] == nil {
			t.Errorf("eval %v: level fields %v %v of %d tasks: %v", m["eval"], t1, t4, c.Eval.Tasks, m)
		}
	}
	if evals != 3 {
		t.Errorf("%d evaluations logged, want 3", evals)
	}
}

func meta(t *traj.Trajectory, key string) string {
	for _, kv := range t.Meta {
		if kv.Key == key {
			return kv.Value
		}
	}
	return ""
}
