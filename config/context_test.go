package config

import (
	"testing"

	"github.com/agentrl/agentrl/env/all"
	"github.com/agentrl/agentrl/rollout"
)

// The rollout block's context: turns folding on; its keys are strict and rollout validates them.
func TestContextBlock(t *testing.T) {
	c, err := Load(all.Builtins(), "calc", "", []string{"rollout.context={trigger: both, max_tokens: 300, keep_turns: 2, tool: summarize}"})
	if err != nil {
		t.Fatal(err)
	}
	want := rollout.ContextConfig{Trigger: "both", MaxTokens: 300, KeepTurns: 2, Tool: "summarize"}
	if c.Rollout.Context == nil || *c.Rollout.Context != want {
		t.Fatalf("context block %+v", c.Rollout.Context)
	}
	data, err := Encode(c)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Decode(data)
	if err != nil || back.Rollout.Context == nil || *back.Rollout.Context != want {
		t.Fatalf("round trip: %v %+v", err, back.Rollout.Context)
	}
	if base, _ := Preset("calc"); base.Rollout.Context != nil {
		t.Fatal("the calc preset folds")
	}
	c, err = Load(all.Builtins(), "calc", "", []string{"rollout.delegate={max_depth: 2, max_per_turn: 3, max_per_episode: 6, max_tokens: 256, reward: own, tools: [calculator]}"})
	if err != nil {
		t.Fatal(err)
	}
	if d := c.Rollout.Delegate; d == nil || d.MaxDepth != 2 || d.MaxPerTurn != 3 || d.MaxPerEpisode != 6 || d.MaxTokens != 256 || d.Reward != "own" || len(d.Tools) != 1 {
		t.Fatalf("delegate block %+v", d)
	}
	checkLoadErrors(t, []loadCase{
		{name: "unknown delegate key", sets: []string{"rollout.delegate={max_depth: 1, depth: 2}"}, want: "depth"},
		{name: "delegate without depth", sets: []string{"rollout.delegate={reward: own}"}, want: "delegate.max_depth"},
		{name: "delegate reward", sets: []string{"rollout.delegate={max_depth: 1, reward: theirs}"}, want: "delegate.reward"},
		{name: "unknown context key", sets: []string{"rollout.context={keep: 2}"}, want: "keep"},
		{name: "bad trigger", sets: []string{"rollout.context={trigger: often}"}, want: "context.trigger"},
		{name: "max_tokens with action", sets: []string{"rollout.context={max_tokens: 100}"}, want: "does nothing with trigger action"},
		{name: "threshold without max_tokens", sets: []string{"rollout.context={trigger: threshold}"}, want: "context.max_tokens 0"},
		{name: "keep_turns past max_turns", sets: []string{"rollout.context={keep_turns: 50}"}, want: "context.keep_turns"},
	})
}

// Folds and sub-episodes add samples to an episode: the memory check of an update counts them.
func TestContextAndDelegateCountInTheBatchCheck(t *testing.T) {
	checkLoadErrors(t, []loadCase{
		{name: "delegation's samples", sets: []string{"rollout.delegate={max_depth: 1, max_per_episode: 256}", "phases.rl.rl.minibatches=1"}, want: "× 257 samples an episode can have"},
	})
	if _, err := Load(all.Builtins(), "calc", "", []string{"rollout.delegate={max_depth: 1}", "rollout.context={}"}); err != nil {
		t.Fatalf("the defaults do not fit: %v", err)
	}
}
