package config

import (
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentrl/agentrl/env/all"
	"github.com/agentrl/agentrl/infer/remote"
	"github.com/agentrl/agentrl/reward"
	"github.com/goccy/go-yaml"
)

func TestRewardConfigErrors(t *testing.T) {
	dir, _, _ := loadFixture(t)
	set := func(v string) string { return "phases.rl.envs.0.reward=" + v }
	judgeW := func(weight, extra string) string {
		return set(`{judge: {weight: ` + weight + `, rubric: "{{.Response}} Score: N", max_score: 10, timeout: 1s, max_tokens: 8` + extra + `}}`)
	}
	judge := func(extra string) string { return judgeW("1", extra) }
	checkLoadErrors(t, []loadCase{
		{name: "unknown key", sets: []string{set(`{formt: {pattern: x, weight: 1}}`)}, want: "formt"},
		{name: "unknown key in a part", sets: []string{set(`{format: {pattern: x, wieght: 1}}`)}, want: "wieght"},
		{name: "in an sft phase", sets: []string{"phases.sft.envs.0.reward={outcome: 2}"}, want: "phases[0] (sft): envs: calc: reward does nothing in an sft phase"},
		{name: "nothing to do", sets: []string{set(`{outcome: 1}`)}, want: "phases[1] (rl): envs: calc: reward.outcome 1 and no other part leave the environment's reward as it is: remove the block"},
		{name: "zero weight", sets: []string{set(`{format: {pattern: x, weight: 0}}`)}, want: "reward.format.weight must be a finite non-zero weight, got 0"},
		{name: "bad pattern", sets: []string{set(`{format: {pattern: '(', weight: 1}}`)}, want: "reward.format.pattern: error parsing regexp"},
		{name: "overlong past the context", sets: []string{set(`{overlong: {max_len: 1000, cache: 100, weight: 1}}`)}, want: "reward.overlong: the penalty starts past max_len − cache = 900 tokens, and no episode can hold more than rollout.max_context = 384"},
		{name: "overlong cache", sets: []string{set(`{overlong: {max_len: 10, cache: 20, weight: 1}}`)}, want: "reward.overlong: need 0 < cache (20) <= max_len (10)"},
		{name: "process of zeros", sets: []string{set(`{process: {valid_call: 0}}`)}, want: "reward.process: valid_call, invalid_call and step_cost are all 0"},
		{name: "progressive without shaping", sets: []string{set(`{outcome: 2, progressive: {from: 0, steps: 10}}`)}, want: "reward.progressive anneals the shaping rewards"},
		{name: "judge weight", sets: []string{judgeW("0", ", generator: policy")}, want: "reward.judge.weight must be a finite non-zero weight"},
		{name: "judge rubric", sets: []string{set(`{judge: {weight: 1, max_score: 10, timeout: 1s, max_tokens: 8, generator: policy}}`)}, want: "reward.judge.rubric must be set"},
		{name: "judge answer", sets: []string{set(`{judge: {weight: 1, rubric: "{{.Answer}}", max_score: 10, timeout: 1s, max_tokens: 8, generator: policy}}`)}, want: "reward.judge.rubric: {{.Answer}} is empty here"},
		{name: "judge timeout", sets: []string{set(`{judge: {weight: 1, rubric: x, max_score: 10, max_tokens: 8, generator: policy}}`)}, want: "reward.judge.timeout must be positive"},
		{name: "judge fallback", sets: []string{judge(", generator: policy, fallback: 2")}, want: "reward.judge.fallback must be in [0, 1], got 2"},
		{name: "judge max_tokens", sets: []string{set(`{judge: {weight: 1, rubric: x, max_score: 10, timeout: 1s, generator: policy}}`)}, want: "reward.judge.max_tokens must be in [1, 4096], got 0"},
		{name: "judge generator", sets: []string{judge(", generator: gpt")}, want: `reward.judge.generator must be policy, checkpoint or remote, got "gpt"`},
		{name: "judge checkpoint missing", sets: []string{judge(", generator: checkpoint")}, want: "reward.judge.checkpoint must name the judge's checkpoint folder"},
		{name: "judge checkpoint not there", sets: []string{judge(", generator: checkpoint, checkpoint: " + filepath.Join(dir, "nope"))}, want: "reward.judge.checkpoint: stat"},
		{name: "judge checkpoint with policy", sets: []string{judge(", generator: policy, checkpoint: " + dir)}, want: "checkpoint and remote do nothing with generator: policy"},
		{name: "judge remote missing", sets: []string{judge(", generator: remote")}, want: "reward.judge.remote must name the judge's servers"},
		{name: "judge remote servers", sets: []string{judge(", generator: remote, remote: {servers: [{name: a, url: 'x', dialect: agentrl}]}")}, want: `reward.judge.remote.servers[0].url "x" must start with http://`},
		{name: "judge remote with checkpoint generator", sets: []string{judge(", generator: checkpoint, checkpoint: " + dir + ", remote: {servers: []}")}, want: "reward.judge.remote does nothing with generator: checkpoint"},
		{name: "policy judge with remote workers", sets: []string{judge(", generator: policy"), "phases.rl.rl.async={max_staleness: 1, workers: {listen: '127.0.0.1:0'}}", "phases.rl.rl.loss.correction.level=token", "phases.rl.rl.dynamic_sampling=null"}, want: "the learner holds no engine of the policy to judge with"},
	})
}

// yamlKeys lists the YAML keys of type t and of every block under it, as "block.key" paths.
func yamlKeys(t reflect.Type, prefix string) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var out []string
	for name, ft := range yamlFields(t) {
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		out = append(out, prefix+name)
		if ft.Kind() == reflect.Struct && ft != reflect.TypeFor[time.Duration]() {
			out = append(out, yamlKeys(ft, prefix+name+".")...)
		}
	}
	slices.Sort(out)
	return out
}

// renderedKeys lists the key paths of a YAML mapping.
func renderedKeys(v any, prefix string) []string {
	m, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	var out []string
	for k, sub := range m {
		out = append(out, prefix+k)
		out = append(out, renderedKeys(sub, prefix+k+".")...)
	}
	slices.Sort(out)
	return out
}

// config show prints every key of a reward block, the blocks whose settings are all zero
// included, and what it prints loads back as the same configuration.
func TestRewardBlockShowsEveryKey(t *testing.T) {
	one := 1.0
	full := &RewardConfig{
		Config: reward.Config{Outcome: &one,
			Format:      &reward.FormatConfig{Pattern: "x", Weight: 1},
			Overlong:    &reward.OverlongConfig{OverlongPenalty: reward.OverlongPenalty{MaxLen: 64, Cache: 16}, Weight: 1},
			Process:     &reward.ToolProcess{ValidCall: 0.1, InvalidCall: -0.1, StepCost: -0.01},
			Progressive: &reward.Progressive{From: 0.5, Steps: 10, Cosine: true}},
		Judge: &JudgeConfig{Weight: 1, JudgeConfig: reward.JudgeConfig{Rubric: "{{.Response}}", MaxScore: 10, Timeout: time.Second, Fallback: 0.5},
			MaxTokens: 8, Generator: JudgeRemote, Checkpoint: "/ck",
			Remote: &remote.Config{Servers: []remote.ServerConfig{{Server: remote.Server{Name: "j", URL: "http://127.0.0.1:1", Dialect: remote.Agentrl}, Key: "${K}"}}, Timeout: time.Minute, Attempts: 1}},
	}
	zero := &RewardConfig{Config: reward.Config{Outcome: new(float64), Format: &reward.FormatConfig{}, Overlong: &reward.OverlongConfig{},
		Process: &reward.ToolProcess{}, Progressive: &reward.Progressive{}}, Judge: &JudgeConfig{Remote: &remote.Config{Servers: []remote.ServerConfig{}}}}
	want := yamlKeys(reflect.TypeFor[RewardConfig](), "")
	for _, tc := range []struct {
		name string
		rc   *RewardConfig
	}{{"full", full}, {"zero", zero}} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := Preset("calc")
			c.Phases[1].Envs[0].Reward = tc.rc
			data, err := Encode(c)
			if err != nil {
				t.Fatal(err)
			}
			back, err := Decode(data)
			if err != nil {
				t.Fatalf("%v\n%s", err, data)
			}
			if !reflect.DeepEqual(back.Phases[1].Envs[0].Reward, tc.rc) {
				t.Fatalf("round trip: %+v, want %+v\n%s", back.Phases[1].Envs[0].Reward, tc.rc, data)
			}
			// The keys under phases[1].envs[0].reward as rendered.
			var tree map[string]any
			if err := yaml.Unmarshal(data, &tree); err != nil {
				t.Fatal(err)
			}
			rendered := renderedKeys(tree["phases"].([]any)[1].(map[string]any)["envs"].([]any)[0].(map[string]any)["reward"], "")
			got := rendered
			for _, k := range want {
				if strings.HasPrefix(k, "judge.remote.servers.") {
					continue // a list: its entries' keys are infer/remote's, checked by its round trip
				}
				if !slices.Contains(got, k) && !(tc.name == "zero" && omitted(k)) {
					t.Errorf("config show lacks reward.%s", k)
				}
			}
			for _, k := range got {
				if !slices.Contains(want, k) {
					t.Errorf("config show prints reward.%s, which is no key", k)
				}
			}
		})
	}
	// An absent outcome weight is written out as 1.
	c, err := Load(all.Builtins(), "", "", []string{"phases.rl.envs.0.reward={format: {pattern: x, weight: 1}}"})
	if err != nil {
		t.Fatal(err)
	}
	if data, _ := Encode(c); !strings.Contains(string(data), "reward:\n      outcome: 1.0\n") {
		t.Fatalf("outcome weight not written out:\n%s", data)
	}
}

// omitted says whether a key is left out of the rendering when empty (optional settings whose
// absence means something: the judge's checkpoint, the remote router's defaults).
func omitted(k string) bool {
	return k == "judge.checkpoint" || k == "judge.remote.timeout" || k == "judge.remote.attempts"
}
