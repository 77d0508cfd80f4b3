package pipeline

import (
	"bytes"
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/env/all"
	"github.com/agentrl/agentrl/rollout"
	"github.com/agentrl/agentrl/tokenizer"
)

// retokChat is a Conversation that renders the whole conversation from its text each turn (as a
// chat template does) and appends only what follows the context, or, when the render no longer
// begins with the context (a completion that does not re-encode to its own tokens), returns the
// whole render: the loop then opens a new training sample.
type retokChat struct {
	tok  *tokenizer.Tokenizer
	msgs []tokenizer.Message
	ctx  []int32
}

func (c *retokChat) Start(system, user string) ([]int32, int, error) {
	sysLen := 0
	if system != "" {
		c.msgs = append(c.msgs, tokenizer.Message{Role: "system", Content: system})
		sysLen = len(c.tok.EncodeChat(c.msgs, false))
	}
	c.msgs = append(c.msgs, tokenizer.Message{Role: "user", Content: user})
	c.ctx = c.tok.EncodeChat(c.msgs, true)
	return slices.Clone(c.ctx), sysLen, nil
}

func (c *retokChat) Next(completion []int32, role, obs string, final bool) ([]int32, bool, error) {
	c.ctx = append(c.ctx, completion...)
	content := strings.TrimSuffix(c.tok.Decode(completion), tokenizer.ImEnd)
	c.msgs = append(c.msgs, tokenizer.Message{Role: "assistant", Content: content}, tokenizer.Message{Role: role, Content: obs})
	full := c.tok.EncodeChat(c.msgs, !final)
	if len(full) >= len(c.ctx) && slices.Equal(full[:len(c.ctx)], c.ctx) {
		delta := slices.Clone(full[len(c.ctx):])
		c.ctx = full
		return delta, false, nil
	}
	c.ctx = full
	return slices.Clone(full), true, nil
}

func (c *retokChat) Stop() []int32 { return []int32{c.tok.EndOfTurn()} }

// TestRunTrainsSplitEpisodes: an RL phase rendered by a Conversation that splits episodes logs
// the start check and rollout/template_splits, records the samples, trains on them, and its
// replay reproduces every metric.
func TestRunTrainsSplitEpisodes(t *testing.T) {
	for name, sets := range map[string][]string{
		"sync":       replaySets,
		"continuous": append(slices.Clone(asyncSets), "checkpoint.keep=1", "phases.rl.rl.async.mode="+config.ModeContinuous),
		"overlap":    append(slices.Clone(asyncSets), "checkpoint.keep=1", "phases.rl.rl.async.mode="+config.ModeOverlap),
	} {
		t.Run(name, func(t *testing.T) {
			steps := 4
			if name != "sync" {
				steps = 6
			}
			trainSplitEpisodes(t, steps, sets)
		})
	}
}

func trainSplitEpisodes(t *testing.T, wantSteps int, sets []string) {
	var out bytes.Buffer
	run, err := NewRun(tinyConfig(t, t.TempDir(), sets...), Options{Envs: all.Builtins(), Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	conv := func() rollout.Conversation { return &retokChat{tok: run.tok} }
	run.opts.NewConversation = conv
	if _, err := run.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "chat template check: env calc: prefix-stable") {
		t.Fatalf("no start check in the log:\n%s", out.String())
	}
	splits, steps := 0.0, 0
	for _, m := range metricLines(t, run.Dir) {
		if m["phase"] != "rl" || m["eval"] != nil {
			continue
		}
		steps++
		s, ok := m["rollout/template_splits"].(float64)
		if !ok || m["rollout/samples_per_episode"] == nil {
			t.Fatalf("step %v: no rollout/template_splits or samples_per_episode: %v", m["step"], m)
		}
		splits += s
	}
	if steps != wantSteps || splits == 0 {
		t.Fatalf("%d rl steps, %v splits: the test exercises nothing", steps, splits)
	}
	rec, err := readRecorded(filepath.Join(run.Dir, "trajectories.atrs"))
	if err != nil {
		t.Fatal(err)
	}
	recorded := 0
	for _, byStep := range rec {
		for _, ts := range byStep {
			for _, tr := range ts {
				recorded += len(tr.Samples)
			}
		}
	}
	if float64(recorded) != splits {
		t.Fatalf("the trajectories record %d splits, the metrics %v", recorded, splits)
	}
	sum, err := Replay(context.Background(), run.Dir, ReplayOptions{OutDir: t.TempDir(), Opts: Options{Envs: all.Builtins(), NewConversation: conv}})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Steps != wantSteps || sum.Compared != wantSteps || sum.Mismatch != "" {
		t.Fatalf("replayed %d steps, compared %d: %s", sum.Steps, sum.Compared, sum.Mismatch)
	}
}
