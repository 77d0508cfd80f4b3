package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/env/all"
)

// Item 25 of issue 29: when every evaluation ties at 0%, checkpoints/best is not the untrained
// model, and the run says that nothing was learned.
func TestBestIsNotTheUntrainedModelWhenAllScoreZero(t *testing.T) {
	var out bytes.Buffer
	run, err := NewRun(tinyConfig(t, t.TempDir(), "checkpoint.keep=20"), Options{Envs: all.Builtins(), Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	sum, err := run.Train(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, rep := range sum.Evals {
		for _, e := range rep.Envs {
			if *e.Pass1Sampled > 0 {
				t.Skipf("the tiny run scored %v at %s: this case needs every evaluation at 0", *e.Pass1Sampled, rep.When)
			}
		}
	}
	read := func(ck string) []byte {
		b, err := os.ReadFile(filepath.Join(run.Dir, checkpointsDir, ck, "model.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	best, untrained, last := read(bestName), read("sft-p0.s000000"), read("rl-p1.s000004")
	if bytes.Equal(best, untrained) {
		t.Error("checkpoints/best is the untrained model")
	}
	if !bytes.Equal(best, last) {
		t.Error("checkpoints/best is not the last policy evaluated, among policies that all scored 0")
	}
	if !strings.Contains(out.String(), "warning: no held-out evaluation scored above 0%") {
		t.Errorf("no warning that nothing was learned:\n%s", out.String())
	}
}

// Item 25 of issue 29: a rollout.max_context a few tokens above the prompt, where no episode can
// finish, is refused before training.
func TestMaxContextThatCutsEveryEpisodeIsRefused(t *testing.T) {
	train := func(ctxLen int) error {
		run, err := NewRun(tinyConfig(t, t.TempDir(), "rollout.max_context="+strconv.Itoa(ctxLen)), Options{Envs: all.Builtins()})
		if err != nil {
			return err
		}
		_, err = run.Train(context.Background())
		return err
	}
	err := train(8)
	m := regexp.MustCompile(`take (\d+) tokens`).FindStringSubmatch(errString(err))
	if m == nil {
		t.Fatalf("max_context 8: %v, want the prompt check's error", err)
	}
	prompt, _ := strconv.Atoi(m[1])
	err = train(prompt + 6)
	if err == nil || !strings.Contains(err.Error(), "cuts short every episode of calc's expert") {
		t.Fatalf("max_context %d (6 above the prompt): %v, want a refusal before training", prompt+6, err)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// Item 25 of issue 29: a step that trains nothing (here: lr 10 collapses the policy after one
// step, and no group carries a signal any more) does not log an entropy it did not measure, and
// says that it trained nothing.
func TestUntrainedStepLogsNoEntropy(t *testing.T) {
	run, err := NewRun(tinyConfig(t, t.TempDir(), "phases.rl.optim.lr=10"), Options{Envs: testEnvs()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	untrained := 0
	for _, m := range metricLines(t, run.Dir) {
		if m["phase"] != "rl" || m["eval"] != nil {
			continue
		}
		if m["loss/total"] != nil && m["signal/effective_batch"] != nil {
			if m["explore/entropy"] == nil {
				t.Errorf("step %v trained but logged no entropy", m["step"])
			}
			continue
		}
		untrained++
		if e, ok := m["explore/entropy"]; ok {
			t.Errorf("step %v trained nothing but logged entropy %v", m["step"], e)
		}
		if !strings.Contains(fmtAny(m["warnings"]), "step trained nothing") {
			t.Errorf("step %v trained nothing without a warning: %v", m["step"], m["warnings"])
		}
	}
	if untrained == 0 {
		t.Skip("every step trained: this case needs one that trained nothing")
	}
}

func fmtAny(v any) string {
	if v == nil {
		return ""
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// Item 9 of issue 29: the trainer records in its checkpoints the system prompt each environment
// was trained with, and PromptNote says when an evaluation's differs.
func TestCheckpointsRecordTheTrainingPrompt(t *testing.T) {
	dir := trainedRun(t)
	envs := all.Builtins()
	spec, err := envs.Lookup("calc")
	if err != nil {
		t.Fatal(err)
	}
	sys, err := SystemPrompt(context.Background(), envs.New, "calc", spec.Heldout.Lo)
	if err != nil {
		t.Fatal(err)
	}
	for _, ck := range []string{bestName, "rl-p1.s000002", "rl-p1.s000004"} {
		p := filepath.Join(dir, checkpointsDir, ck)
		if note := PromptNote(p, "calc", sys); note != "" {
			t.Errorf("%s: the training prompt itself: %s", ck, note)
		}
		if note := PromptNote(p, "calc", sys+"\nTools: kv_lookup(key)"); !strings.Contains(note, "differs from the one the checkpoint was trained with") {
			t.Errorf("%s: another prompt: %q", ck, note)
		}
		if _, err := os.Stat(filepath.Join(p, promptsFile)); err != nil {
			t.Errorf("%s: %v", ck, err)
		}
	}
}
