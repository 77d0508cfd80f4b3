package config

import "testing"

// The learner block is checked with the rest of the run's configuration.
func TestLearnerConfigErrors(t *testing.T) {
	checkLoadErrors(t, []loadCase{
		{name: "unknown backend", sets: []string{"learner.backend=tinkr"}, want: "learner.backend must be builtin, http, torch or tinker"},
		{name: "tinker without a base model", sets: []string{"learner.backend=tinker", "learner.url=http://127.0.0.1:1", "learner.rank=8"}, want: "learner.base_model are required"},
		{name: "tinker with an sft phase", sets: []string{"learner.backend=tinker", "learner.url=http://127.0.0.1:1", "learner.rank=8", "learner.base_model=m"}, want: "phase sft: supervised phases train the run's own weights"},
		{name: "tinker with an unknown key", sets: []string{"learner.backend=tinker", "learner.url=http://127.0.0.1:1", "learner.rank=8", "learner.base_modle=m"}, want: "base_modle"},
		{name: "http without url", sets: []string{"learner.backend=http"}, want: "learner.url is required"},
		{name: "key held in the config", sets: []string{"learner.backend=http", "learner.url=http://127.0.0.1:1", "learner.key=s3cret"}, want: "${NAME}"},
		{name: "builtin with a setting", sets: []string{"learner.timeout=1m"}, want: "do nothing with the builtin backend"},
		{name: "unknown key", sets: []string{"learner.backend=torch", "learner.pyton=/usr/bin/python3"}, want: "pyton"},
		{name: "torch with async", sets: []string{"learner.backend=torch", "learner.python=/usr/bin/python3", "phases.rl.rl.async.max_staleness=1"},
			want: "backend http and torch train the synchronous RL loop only"},
		{name: "probe tolerance without a sync to check", sets: []string{"learner.probe_tolerance.bfloat16=0.5"}, want: "learner.probe_tolerance does nothing"},
		{name: "probe tolerance not positive", sets: []string{"learner.backend=http", "learner.url=http://127.0.0.1:1", "learner.probe_tolerance.float32=0"}, want: "probe_tolerance.float32 must be a finite number > 0"},
		{name: "restart of a learner the run did not start", sets: []string{"learner.backend=http", "learner.url=http://127.0.0.1:1", "learner.restart=2"}, want: "restart are settings of the torch backend"},
		{name: "probe tolerance of another precision", sets: []string{"learner.backend=http", "learner.url=http://127.0.0.1:1", "learner.probe_tolerance.float16=0.1"}, want: "float16"},
	})
}
