package config

import (
	"reflect"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/env/all"
)

// Each action refuses settings that are out of range or would do nothing, naming the key.
func TestMonitorConfigErrors(t *testing.T) {
	ent := func(s string) string { return "monitor.entropy_control={low: 0.1, high: 0.5, " + s + "}" }
	ts := func(s string) string {
		return "monitor.task_sampling={explore: 0.25, decay: 0.5, max_tasks: 64, " + s + "}"
	}
	async := []string{"phases.rl.rl.async.max_staleness=1", "phases.rl.rl.loss.correction={level: token, cap: 4, mask_low: 0.5, mask_high: 2}"}
	sh := func(s string) []string {
		return append([]string{"monitor.shift_control={ess_low: 0.8, ess_high: 0.95, kl_low: 0.01, kl_high: 0.05, factor: 0.8, " + s + "}"}, async...)
	}
	checkLoadErrors(t, []loadCase{
		{name: "entropy band", sets: []string{"monitor.entropy_control={low: 0.5, high: 0.1, entropy_coef: {min: 0, max: 0.01, step: 0.001}}"}, want: "monitor.entropy_control: low (0.5) and high (0.1)"},
		{name: "entropy knob-less", sets: []string{ent("")}, want: "monitor.entropy_control moves nothing"},
		{name: "entropy step", sets: []string{ent("entropy_coef: {min: 0, max: 0.01, step: 0.1}")}, want: "monitor.entropy_control.entropy_coef.step 0.1 must be in (0, max − min = 0.01]"},
		{name: "entropy start", sets: []string{ent("entropy_coef: {min: 0.001, max: 0.01, step: 0.001}")}, want: "phases[1] (rl) starts at rl.loss.entropy_coef 0, outside [min 0.001, max 0.01]"},
		{name: "clip zero", sets: []string{ent("clip_high: {min: 0, max: 0.3, step: 0.02}")}, want: "clip_high: min (0) and max (0.3) must satisfy 0 < min < max"},
		{name: "clip start", sets: []string{ent("clip_high: {min: 0.22, max: 0.3, step: 0.02}")}, want: "starts at rl.loss.ppo.clip_high 0.2, outside [min 0.22, max 0.3]"},
		{name: "clip not ppo", sets: []string{ent("clip_high: {min: 0.2, max: 0.3, step: 0.02}"), "phases.rl.rl.loss.policy=gspo"}, want: `uses rl.loss.policy "gspo"`},
		{name: "entropy without rl", sets: []string{ent("entropy_coef: {min: 0, max: 0.01, step: 0.001}"), "phases=[{name: sft, kind: sft, envs: [{name: calc, weight: 1}], steps: 30, optim: {lr: 0.001, warmup: 0, grad_clip: 1, beta1: 0.9, beta2: 0.99, eps: 1e-8}, sft: {demos: 10, batch_size: 2, keep: all}}]"}, want: "monitor.entropy_control does nothing: the run has no rl phase"},
		{name: "unknown knob", sets: []string{ent("temperature: {min: 0, max: 1, step: 0.1}")}, want: "temperature"},
		{name: "explore 1", sets: []string{"monitor.task_sampling={explore: 1, decay: 0.5, max_tasks: 64}"}, want: "monitor.task_sampling.explore 1 must be in [0, 1)"},
		{name: "decay", sets: []string{"monitor.task_sampling={explore: 0.2, decay: 1, max_tasks: 64}"}, want: "monitor.task_sampling.decay 1 must be in [0, 1)"},
		{name: "max_tasks", sets: []string{"monitor.task_sampling={explore: 0.2, decay: 0.5}"}, want: "monitor.task_sampling.max_tasks 0 must be in [1, 65536]"},
		{name: "oversample 1", sets: []string{ts("oversample: 1")}, want: "monitor.task_sampling.oversample 1 must be 0 (never) or in (1, 8]"},
		{name: "oversample without dynamic sampling", sets: []string{ts("oversample: 2"), "phases.rl.rl.dynamic_sampling=null"}, want: "oversample does nothing: it enlarges the rounds of rl.dynamic_sampling"},
		{name: "oversample with continuous admission", sets: append([]string{ts("oversample: 2")}, async...), want: "continuous asynchronous admission has no rounds"},
		{name: "oversample too large a step", sets: []string{ts("oversample: 8"), "phases.rl.rl.groups_per_step=4096", "phases.rl.rl.group_size=4", "phases.rl.rl.minibatches=4096"}, want: "pipeline.MaxStepTokens"},
		{name: "shift bands", sets: append(sh("cap: {min: 1, max: 8}"), "monitor.shift_control.ess_low=0.99"), want: "ess_low (0.99) and ess_high (0.95)"},
		{name: "shift factor", sets: append(sh("cap: {min: 1, max: 8}"), "monitor.shift_control.factor=1"), want: "monitor.shift_control.factor 1 must be in (0, 1)"},
		{name: "shift knob-less", sets: sh(""), want: "monitor.shift_control moves nothing"},
		{name: "shift cap start", sets: sh("cap: {min: 1, max: 3}"), want: "starts at rl.loss.correction.cap 4, outside [min 1, max 3]"},
		{name: "shift mask start", sets: sh("mask: {min: 3, max: 8}"), want: "starts at rl.loss.correction.mask_high 2, outside [min 3, max 8]"},
		{name: "shift mask product", sets: sh("mask: {min: 1, max: 8}"), want: "mask_low 0.5 would reach mask_high at its minimum 1"},
		{name: "shift without correction", sets: []string{"monitor.shift_control={ess_low: 0.8, ess_high: 0.95, kl_low: 0.01, kl_high: 0.05, factor: 0.8, cap: {min: 1, max: 8}}"},
			want: "monitor.shift_control does nothing: the run has no rl phase with an importance correction"},
	})
	// The actions' blocks round-trip through config show.
	c, err := Load(all.Builtins(), "", "", append(sh("cap: {min: 1, max: 8}, mask: {min: 1.5, max: 4}"), ts("oversample: 2"), "phases.rl.rl.async.mode=overlap",
		ent("entropy_coef: {min: 0, max: 0.01, step: 0.001}, clip_high: {min: 0.2, max: 0.28, step: 0.02}")))
	if err != nil {
		t.Fatal(err)
	}
	data, err := Encode(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"entropy_control:", "task_sampling:", "shift_control:", "oversample: 2", "clip_high:", "mask:"} {
		if !strings.Contains(string(data), want) {
			t.Fatalf("config show lacks %q:\n%s", want, data)
		}
	}
	back, err := Decode(data)
	if err != nil || !reflect.DeepEqual(back.Monitor, c.Monitor) {
		t.Fatalf("monitor block changed in a round trip (%v):\n%+v\n%+v", err, back.Monitor, c.Monitor)
	}
}
