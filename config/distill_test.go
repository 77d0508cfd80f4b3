package config

import (
	"testing"

	"github.com/agentrl/agentrl/env/all"
)

func TestDistillConfig(t *testing.T) {
	dir, _, write := loadFixture(t)
	set := func(v string) string { return "phases.rl.rl.distill=" + v }
	write("tokenizer.json", "{}")
	ck := t.TempDir()
	checkLoadErrors(t, []loadCase{
		{name: "unknown key", sets: []string{set(`{teacher: 'phase:sft', mode: advantage, coef: 1, cof: 2}`)}, want: "cof"},
		{name: "no teacher", sets: []string{set(`{mode: advantage, coef: 1}`)}, want: `rl.distill.teacher must be phase:NAME, checkpoint:DIR or remote, got ""`},
		{name: "later phase", sets: []string{set(`{teacher: 'phase:later', mode: advantage, coef: 1}`)}, want: `rl.distill.teacher: no phase "later" before this one`},
		{name: "itself", sets: []string{set(`{teacher: 'phase:rl', mode: advantage, coef: 1}`)}, want: `teacher: phase "rl" is this phase`},
		{name: "not a checkpoint", sets: []string{set(`{teacher: 'checkpoint:` + ck + `', mode: advantage, coef: 1}`)}, want: "is not a checkpoint folder"},
		{name: "zero coef", sets: []string{set(`{teacher: 'phase:sft', mode: advantage, coef: 0}`)}, want: "rl.distill.coef = 0, want a finite coefficient > 0"},
		{name: "mode", sets: []string{set(`{teacher: 'phase:sft', mode: reward, coef: 1}`)}, want: "rl.distill.mode must be one of [advantage loss]"},
		{name: "estimator in advantage", sets: []string{set(`{teacher: 'phase:sft', mode: advantage, coef: 1, estimator: k3}`)}, want: "estimator does nothing in mode advantage"},
		{name: "k1 in loss", sets: []string{set(`{teacher: 'phase:sft', mode: loss, coef: 1, estimator: k1}`)}, want: "rl.distill.estimator must be one of"},
		{name: "remote without servers", sets: []string{set(`{teacher: remote, mode: advantage, coef: 1, tokenizer: ` + dir + `}`)}, want: "rl.distill.remote: teacher remote needs the servers"},
		{name: "remote without tokenizer", sets: []string{set(`{teacher: remote, mode: advantage, coef: 1, remote: {servers: [{name: a, url: 'http://127.0.0.1:1', dialect: agentrl}]}}`)}, want: "rl.distill.tokenizer: a remote teacher needs its tokenizer folder"},
		{name: "remote server", sets: []string{set(`{teacher: remote, mode: advantage, coef: 1, tokenizer: ` + dir + `, remote: {servers: [{name: a, url: 'x', dialect: agentrl}]}}`)}, want: `rl.distill.remote.servers[0].url "x" must start with http://`},
		{name: "remote block for a phase teacher", sets: []string{set(`{teacher: 'phase:sft', mode: advantage, coef: 1, remote: {servers: []}}`)}, want: "rl.distill.remote does nothing unless teacher is remote"},
		{name: "tokenizer for a phase teacher", sets: []string{set(`{teacher: 'phase:sft', mode: advantage, coef: 1, tokenizer: ` + dir + `}`)}, want: "rl.distill.tokenizer does nothing unless teacher is remote"},
		{name: "workers", sets: []string{set(`{teacher: 'phase:sft', mode: advantage, coef: 1, workers: 1000}`)}, want: "rl.distill.workers must be in [0, 256]"},
		{name: "dynamic sampling in a distill phase", sets: []string{"phases.rl.kind=distill", set(`{teacher: 'phase:sft', mode: advantage, coef: 1}`)}, want: "rl.dynamic_sampling keeps groups by the spread of the environment's reward"},
		{name: "distill phase without a teacher", sets: []string{"phases.rl.kind=distill"}, want: "phases[1] (rl): a distill phase trains on its teacher alone and needs rl.distill"},
		{name: "teacher floor without a teacher", sets: []string{"monitor.min_teacher_kl=0.001"}, want: "monitor.min_teacher_kl does nothing: no phase distills"},
		{name: "negative teacher floor", sets: []string{"monitor.min_teacher_kl=-1", set(`{teacher: 'phase:sft', mode: advantage, coef: 1}`)}, want: "monitor.min_teacher_kl -1 must be finite and >= 0"},
		{name: "reward in a distill phase", sets: []string{"phases.rl.kind=distill", "phases.rl.rl.dynamic_sampling=null", set(`{teacher: 'phase:sft', mode: advantage, coef: 1}`), "phases.rl.envs.0.reward={outcome: 2}"}, want: "reward does nothing in an distill phase"},
	})
	for _, sets := range [][]string{
		{set(`{teacher: 'phase:sft', mode: advantage, coef: 1}`), "monitor.min_teacher_kl=0.01"},
		{set(`{teacher: 'phase:sft', mode: loss, coef: 0.5, estimator: k3}`), "phases.rl.kind=distill", "phases.rl.rl.dynamic_sampling=null"},
		{set(`{teacher: remote, mode: loss, coef: 1, estimator: 'k1+', tokenizer: ` + dir + `, remote: {servers: [{name: v, url: 'http://127.0.0.1:8000', dialect: vllm, model: m}], timeout: 10s}}`)},
	} {
		c, err := Load(all.Builtins(), "", "", sets)
		if err != nil {
			t.Fatalf("%v: %v", sets, err)
		}
		if c.Phases[1].RL.Distill == nil || !c.Phases[1].IsRL() {
			t.Fatalf("%v: %+v", sets, c.Phases[1])
		}
	}
	c, _ := Load(all.Builtins(), "", "", []string{set(`{teacher: 'phase:sft', mode: advantage, coef: 1}`)})
	if got := c.TeacherPhases(); len(got) != 1 || got[0] != "sft" {
		t.Fatalf("teacher phases %v", got)
	}
}
