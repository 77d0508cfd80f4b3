package pipeline

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/algo"
	"github.com/agentrl/agentrl/checkpoint"
	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/infer/remote"
	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/tokenizer"
)

// distillPhase is a copy of c's rl phase named name, of kind kind, distilling from d.
func distillPhase(c config.Config, name, kind string, d config.DistillConfig) config.Phase {
	p := c.Phases[len(c.Phases)-1]
	rl := *p.RL
	rl.Distill = &d
	p.Name, p.Kind, p.RL = name, kind, &rl
	return p
}

func trainConfig(t *testing.T, c config.Config) (*Run, error) {
	t.Helper()
	if err := c.Validate(testEnvs()); err != nil {
		t.Fatal(err)
	}
	run, err := NewRun(c, Options{Envs: testEnvs()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = run.Train(context.Background())
	return run, err
}

func phaseLines(t *testing.T, dir, phase string) []map[string]any {
	var out []map[string]any
	for _, m := range metricLines(t, dir) {
		if m["phase"] == phase && m["optim/lr"] != nil {
			out = append(out, m)
		}
	}
	return out
}

// Cross-stage distillation: a distill phase after an RL phase takes the SFT phase's final
// weights as its teacher; the KL to it is measured on every step, the teacher is the whole
// signal, and the phases without distillation report none of it.
func TestDistillFromEarlierPhase(t *testing.T) {
	c := tinyConfig(t, t.TempDir(), "phases.sft.steps=4", "phases.rl.steps=2", "phases.rl.rl.dynamic_sampling=null", "phases.rl.rl.loss.entropy_coef=0.05")
	c.Phases = append(c.Phases, distillPhase(c, "back", "distill", config.DistillConfig{Teacher: "phase:sft", Mode: algo.DistillAdvantage, Coef: 1}))
	c.Phases[2].Steps = 2
	run, err := trainConfig(t, c)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range phaseLines(t, run.Dir, "rl") {
		if _, ok := m["distill/kl_mean"]; ok {
			t.Fatalf("an rl phase without distill reports distill metrics: %v", m)
		}
	}
	lines := phaseLines(t, run.Dir, "back")
	if len(lines) != 2 {
		t.Fatalf("%d distill step lines, want 2", len(lines))
	}
	if raw, _ := os.ReadFile(filepath.Join(run.Dir, "metrics.jsonl")); strings.Count(string(raw), `"time/teacher_s"`) != 2 {
		t.Fatal("the distill steps do not report the teacher's call time (time/teacher_s)")
	}
	for i, m := range lines {
		kl, ok := m["distill/kl_mean"].(float64)
		if !ok || kl == 0 || m["distill/adv_share"] != 1.0 || m["distill/teacher_failed_episodes"] != 0.0 || !(m["distill/tokens"].(float64) > 0) {
			t.Fatalf("step %d: %v", i+1, m)
		}
		t.Logf("step %d: KL to the SFT teacher %v over %v tokens", i+1, kl, m["distill/tokens"])
	}
}

// A teacher whose tokenizer is not the student's is refused when its phase starts.
func TestDistillRefusesOtherTokenizer(t *testing.T) {
	tok, err := tokenizer.Train([]string{"quite another corpus", "of other words entirely"}, tokenizer.DefaultTrainOptions(300))
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.New(model.Config{Vocab: tok.VocabSize(), Dim: 32, Layers: 1, Heads: 2, KVHeads: 1, Hidden: 64, MaxSeq: 320, RopeTheta: 10000, NormEps: 1e-5, TieEmbeddings: true}, 1)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "teacher")
	if err := checkpoint.Save(dir, m, tok, nil); err != nil {
		t.Fatal(err)
	}
	c := tinyConfig(t, t.TempDir(), "phases.rl.steps=1")
	c.Phases = []config.Phase{distillPhase(c, "rl", "rl", config.DistillConfig{Teacher: "checkpoint:" + dir, Mode: algo.DistillLoss, Coef: 1, Estimator: "k3"})}
	_, err = trainConfig(t, c)
	if err == nil || !strings.Contains(err.Error(), "its tokenizer is not the student's") {
		t.Fatalf("err = %v", err)
	}
}

// A teacher served by agentrl serve (the score route) over HTTP: a run started from the
// teacher's own weights measures a KL of exactly zero at its first step (the route's logprobs
// are the learner's), trains beside the environment's reward with the k3 loss term (an entropy
// bonus moves the student off the teacher, where k3's gradient is zero), and a teacher that does
// not answer stops the phase at its start.
func TestDistillRemoteTeacher(t *testing.T) {
	a := tinyConfig(t, t.TempDir(), "phases.sft.steps=3")
	a.Phases = a.Phases[:1]
	runA, err := trainConfig(t, a)
	if err != nil {
		t.Fatal(err)
	}
	teacherDir := runA.checkpointDir(runA.stepName(0, 3))
	url := startServer(t, teacherDir, "")

	remoteTeacher := func(url string) config.DistillConfig {
		return config.DistillConfig{Teacher: "remote", Mode: algo.DistillLoss, Coef: 0.5, Estimator: "k3", Tokenizer: teacherDir,
			Remote: &remote.Config{Servers: []remote.ServerConfig{{Server: remote.Server{Name: "teacher", URL: url, Dialect: remote.Agentrl}}}}}
	}
	b := tinyConfig(t, t.TempDir(), "phases.rl.steps=2", "phases.rl.rl.dynamic_sampling=null", "phases.rl.rl.loss.entropy_coef=0.05")
	b.Init, b.Tokenizer = teacherDir, config.TokenizerConfig{} // the checkpoint's weights and tokenizer
	b.Phases = []config.Phase{distillPhase(b, "rl", "rl", remoteTeacher("http://127.0.0.1:1"))}
	if _, err := trainConfig(t, b); err == nil || !strings.Contains(err.Error(), "teacher: remote: no inference server answered") {
		t.Fatalf("a teacher that does not answer: %v", err)
	}
	b.Phases = []config.Phase{distillPhase(b, "rl", "rl", remoteTeacher(url))}
	runB, err := trainConfig(t, b)
	if err != nil {
		t.Fatal(err)
	}
	lines := phaseLines(t, runB.Dir, "rl")
	if len(lines) != 2 {
		t.Fatalf("%d lines", len(lines))
	}
	if kl := lines[0]["distill/kl_mean"].(float64); math.Abs(kl) > 1e-6 {
		t.Fatalf("step 1: the student is the teacher, yet the KL is %v", kl)
	}
	if _, ok := lines[0]["loss/distill"]; !ok {
		t.Fatalf("no distillation loss term: %v", lines[0])
	}
	if kl := lines[1]["distill/kl_mean"].(float64); kl == 0 {
		t.Fatalf("step 2: the student moved, yet the KL is %v", kl)
	}
	// The monitor says that the first step's signal is degenerate, and not the second's.
	if !hasWarning(lines[0], "is the teacher the student?") {
		t.Fatalf("step 1: the student is the teacher, yet no warning says so: %v", lines[0]["warnings"])
	}
	if hasWarning(lines[1], "is the teacher the student?") {
		t.Fatalf("step 2: the student moved (largest |logπ − logπ_T| %v), yet %v", lines[1]["distill/kl_abs_max"], lines[1]["warnings"])
	}
}

// hasWarning reports whether the metrics line m carries a monitor warning containing s.
func hasWarning(m map[string]any, s string) bool {
	ws, _ := m["warnings"].([]any)
	for _, w := range ws {
		if w, ok := w.(string); ok && strings.Contains(w, s) {
			return true
		}
	}
	return false
}

// A run killed in a phase that distils from an earlier one resumes with the same teacher (the
// earlier phase's final checkpoint, kept by pruning) and ends with the uninterrupted run's metrics.
func TestResumeAfterKillWithDistill(t *testing.T) {
	if testing.Short() {
		t.Skip("a run killed and resumed in a child process")
	}
	testResumeAfterKill(t, []string{"phases.rl.steps=6", "phases.rl.rl.dynamic_sampling=null", "phases.rl.rl.loss.entropy_coef=0.05",
		"phases.rl.rl.distill={teacher: 'phase:sft', mode: advantage, coef: 1}"}, []int{11, 13})
}
