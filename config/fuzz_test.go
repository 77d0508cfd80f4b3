package config

import (
	"strings"
	"testing"

	"github.com/agentrl/agentrl/env/all"
)

// FuzzLoad feeds the config loader arbitrary YAML and one --set override: it must return a
// config or an error, never panic, and a config it accepts must validate and survive its own
// rendering. The default suite runs the seeds; `go test -run=^$ -fuzz=FuzzLoad ./pipeline`
// explores.
func FuzzLoad(f *testing.F) {
	base, _ := Preset("calc")
	good, _ := Encode(base)
	f.Add(good, "seed=2")
	f.Add(good, "phases.rl.rl.loss.policy=gspo")
	f.Add(good, "phases.rl.envs=[{name: calc, weight: 1}, {name: maze, weight: 2}]")
	f.Add([]byte("seed: 1.5\n"), "phases.1.steps=2.5")
	f.Add([]byte(""), "x=")
	f.Add([]byte("seed: [[[[[]]]]]\n"), "seed=&a 1")
	f.Add([]byte("a: &a {b: *a}\n"), "mcp.servers.x.command=[a, b]")
	f.Add([]byte("phases: [{name: rl, kind: rl, rl: {group_size: 1}}]\n"), "phases.rl.rl.dynamic_sampling=null")
	f.Add(good, "phases.rl.envs=[{name: myenv, weight: 1, remote: {url: 'http://127.0.0.1:9', replicas: ['http://[::1]:9'], timeout: 1s}}]")
	f.Add(good, "phases.rl.envs=[{name: t, weight: 1, tasks: {path: x.csv, prompt: '{a} {{b}}', answer: a, split: {held_out: s}, verifier: set, tools: [calculator]}}]")
	f.Add([]byte("init: ck\nmodel: {tie_embeddings: false, rope_scaling: {factor: 0}}\nlimits: {memory: 1.5GiB}\n"), "model={dim: 32}")
	f.Add(good, "limits.memory=512MiB")
	envs := all.Builtins()
	f.Fuzz(func(t *testing.T, data []byte, set string) {
		c, err := Decode(data)
		if err != nil {
			return
		}
		if c, err = Override(c, []string{set}); err != nil {
			return
		}
		if err := c.Validate(envs); err != nil {
			return
		}
		if strings.Contains(set, "init=") {
			return // an init path may name any file
		}
		out, err := Encode(c)
		if err != nil {
			t.Fatalf("an accepted config does not render: %v", err)
		}
		back, err := Decode(out)
		if err != nil {
			t.Fatalf("an accepted config does not read back: %v\n%s", err, out)
		}
		if err := back.Validate(envs); err != nil {
			t.Fatalf("an accepted config is invalid once rendered: %v\n%s", err, out)
		}
	})
}
