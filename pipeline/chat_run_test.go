package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestRunThroughTemplateFile trains a run (supervised demonstrations, RL with the start check,
// evaluations) whose chat is a .jinja file that writes ChatML, and the same run on agentrl's
// ChatML path: the template's Conversation, the expert reading its observations through the
// template and the tool wrapper give exactly the same episodes and metrics (the template run
// adds its sample counts), and the template run replays.
func TestRunThroughTemplateFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "chatml.jinja")
	if err := os.WriteFile(path, []byte("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"), 0o644); err != nil {
		t.Fatal(err)
	}
	train := func(sets ...string) (*Run, string) {
		var out bytes.Buffer
		run, err := NewRun(tinyConfig(t, t.TempDir(), sets...), Options{Envs: testEnvs(), Out: &out})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := run.Train(context.Background()); err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
		return run, out.String()
	}
	base, _ := train()
	tpl, out := train("chat.template=" + path)
	for _, want := range []string{"chat: " + path + " (tool calls: none", "chat template check: env calc: prefix-stable"} {
		if !strings.Contains(out, want) {
			t.Fatalf("no %q in the output:\n%s", want, out)
		}
	}
	a, b := metricLines(t, base.Dir), metricLines(t, tpl.Dir)
	if len(a) != len(b) {
		t.Fatalf("%d metrics lines, %d through the template", len(a), len(b))
	}
	for i := range a {
		if b[i]["rollout/template_splits"] != nil {
			if b[i]["rollout/template_splits"] != 0.0 || b[i]["rollout/samples_per_episode"] != 1.0 {
				t.Fatalf("line %d: %v", i, b[i])
			}
			delete(b[i], "rollout/template_splits")
			delete(b[i], "rollout/samples_per_episode")
		}
		for k, v := range a[i] {
			if !equalMetric(v, b[i][k]) {
				t.Fatalf("line %d: %s = %v, through the template %v", i, k, v, b[i][k])
			}
		}
	}
	ta, tb := readTrajs(t, base.Dir), readTrajs(t, tpl.Dir)
	if len(ta) != len(tb) || len(ta) == 0 {
		t.Fatalf("%d and %d trajectories", len(ta), len(tb))
	}
	for i := range ta {
		x, y := ta[i], tb[i]
		if !slices.Equal(x.Tokens, y.Tokens) || !slices.Equal(x.LossMask, y.LossMask) || !slices.Equal(x.Logprobs, y.Logprobs) || x.Reward != y.Reward || x.Status != y.Status {
			t.Fatalf("trajectory %d (%s) differs through the template", i, x.ID)
		}
	}
	sum, err := Replay(context.Background(), tpl.Dir, ReplayOptions{OutDir: t.TempDir(), Opts: Options{Envs: testEnvs()}})
	if err != nil || sum.Mismatch != "" || sum.Compared == 0 {
		t.Fatalf("replay: %+v %v", sum, err)
	}
}

func equalMetric(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}
