package config

import (
	"strings"
	"testing"

	"github.com/agentrl/agentrl/algo"
	"github.com/agentrl/agentrl/env/all"
	"github.com/agentrl/agentrl/infer/remote"
	"github.com/agentrl/agentrl/learn"
	"github.com/agentrl/agentrl/model"
)

// tinkerRun is calc's RL phase alone on a Tinker learner, as a run that can work sets it.
func tinkerRun(t *testing.T) Config {
	t.Helper()
	c, err := Preset("calc")
	if err != nil {
		t.Fatal(err)
	}
	c.Phases = c.Phases[1:]
	c.Init = "hf:Qwen/Qwen3-4B-Instruct-2507"
	c.Phases[0].Optim.GradClip = 0
	c.Learner = learn.BackendConfig{Backend: learn.BackendTinker, URL: "http://127.0.0.1:1", Key: "${TINKER_API_KEY}", BaseModel: "Qwen/Qwen3-4B-Instruct-2507", Rank: 8}
	return c
}

// What a Tinker learner cannot do is refused by its setting's name; a plain GRPO phase passes.
func TestTinkerRefusals(t *testing.T) {
	ok := tinkerRun(t)
	if err := ok.Validate(all.Builtins()); err != nil {
		t.Fatalf("a GRPO phase without grad_clip on tinker: %v", err)
	}
	cases := []struct {
		name string
		set  func(c *Config)
		want string
	}{
		{"grad clip", func(c *Config) { c.Phases[0].Optim.GradClip = 1 }, "optim.grad_clip 1: Tinker's optim_step has no gradient clipping"},
		{"entropy bonus", func(c *Config) { c.Phases[0].RL.Loss.EntropyCoef = 0.01 }, "rl.loss.entropy_coef"},
		{"kl term", func(c *Config) { c.Phases[0].RL.Loss.KL.Coef = 0.1 }, "rl.loss.kl and rl.kl_penalty"},
		{"kl penalty", func(c *Config) { c.Phases[0].RL.KLPenalty = &algo.KLPenaltyConfig{Coef: 0.1, Estimator: "k1"} }, "rl.loss.kl and rl.kl_penalty"},
		{"critic", func(c *Config) { c.Phases[0].RL.Loss.Critic.Coef = 0.5 }, "rl.loss.critic: Tinker trains no value head"},
		{"value estimator", func(c *Config) {
			a, _ := algo.DefaultAdvantageConfig("gae")
			c.Phases[0].RL.Advantage = a
		}, "needs a value head"},
		{"async", func(c *Config) { c.Phases[0].RL.Async = &AsyncConfig{MaxStaleness: 1} }, "rl.async"},
		{"inference servers", func(c *Config) { c.Rollout.Generator = &remote.Config{} }, "rollout.generator"},
		{"entropy control", func(c *Config) { c.Monitor.EntropyControl = &EntropyControlConfig{Low: 0.1, High: 1} }, "monitor.entropy_control"},
		{"no init", func(c *Config) { c.Init = "" }, "init is required"},
		{"lora block", func(c *Config) { c.Phases[0].LoRA = &model.LoRAConfig{Rank: 4, Alpha: 8} }, "the Tinker service trains its own LoRA adapter"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := tinkerRun(t)
			tc.set(&c)
			errs := c.tinkerRefusals()
			var all []string
			for _, e := range errs {
				all = append(all, e.Error())
			}
			if !strings.Contains(strings.Join(all, "\n"), tc.want) {
				t.Fatalf("refusals %q, want one containing %q", all, tc.want)
			}
		})
	}
}
