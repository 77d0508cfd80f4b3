package pipeline

import (
	"context"
	"io"
	"math"
	"net/http"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentrl/agentrl/env/all"
	"github.com/agentrl/agentrl/infer/remote"
	"github.com/agentrl/agentrl/reward"
	"github.com/agentrl/agentrl/traj"
	"github.com/goccy/go-yaml"
)

// rewardBlock is a calc reward block with every episode-level and per-turn part.
const rewardBlock = `{outcome: 2, format: {pattern: '(?i)answer:\s*-?\d', weight: 0.5},
  overlong: {max_len: 48, cache: 16, weight: 1},
  process: {valid_call: 0.1, invalid_call: -0.2, step_cost: -0.01},
  progressive: {from: 0.25, steps: 4, cosine: false}}`

// judgeBlock is a judge part over generator gen (with extra keys).
func judgeBlock(gen, extra string) string {
	return `{weight: 0.5, rubric: "Task: {{.Prompt}}\nReply: {{.Response}}\nGrade the reply 0-10. End with Score: N", max_score: 10,
  timeout: 1m, fallback: 0.25, max_tokens: 6, generator: ` + gen + extra + `}`
}

func metaValue(t *traj.Trajectory, k string) (float64, bool) {
	for _, kv := range t.Meta {
		if kv.Key == k {
			v, err := strconv.ParseFloat(kv.Value, 64)
			return v, err == nil
		}
	}
	return 0, false
}

func metaHas(t *traj.Trajectory, k string) bool {
	for _, kv := range t.Meta {
		if kv.Key == k {
			return true
		}
	}
	return false
}

// rlTrajs are a run's trajectories of its rl phase (their ids are those of calc episodes whose
// Meta the shaper wrote).
func rlTrajs(t *testing.T, dir string) []*traj.Trajectory {
	var out []*traj.Trajectory
	for _, tr := range readTrajs(t, dir) {
		if metaHas(tr, reward.MetaOutcome) {
			out = append(out, tr)
		}
	}
	return out
}

// rlMetrics are a run's metric lines of its rl phase.
func rlMetrics(t *testing.T, dir string) []map[string]any {
	var out []map[string]any
	for _, m := range metricLines(t, dir) {
		if m["phase"] == "rl" && m["step"] != nil {
			out = append(out, m)
		}
	}
	return out
}

// A reward block with every part and a judge backed by the policy's own engine: each RL
// trajectory's reward is the composition of the parts it records, its turns carry the process
// rewards, and each step logs the parts and the judge's fallbacks.
func TestRewardBlockEndToEnd(t *testing.T) {
	dir := trainTiny(t, t.TempDir(), nil, "phases.rl.envs.0.reward="+rewardBlock, "phases.rl.envs.0.reward.judge="+judgeBlock("policy", ""))
	trajs := rlTrajs(t, dir)
	if len(trajs) != 4*2*4 {
		t.Fatalf("%d rescored trajectories, want 32 (4 steps × 2 groups × 4)", len(trajs))
	}
	judged := 0
	for _, tr := range trajs {
		get := func(k string) float64 {
			v, ok := metaValue(tr, k)
			if !ok {
				t.Fatalf("%s lacks %s: %v", tr.ID, k, tr.Meta)
			}
			return v
		}
		w := get(reward.MetaOutcomeWeight)
		out, f, l, j, p := get(reward.MetaOutcome), get(reward.MetaFormat), get(reward.MetaOverlong), get(reward.MetaJudge), get(reward.MetaProcess)
		want := w*(2*out+0.5*j) + (1-w)*0.5*f + l
		if math.Abs(tr.Reward-want) > 1e-9 {
			t.Fatalf("%s: reward %v, want w %v·(2·%v + 0.5·%v) + (1−w)·0.5·%v + %v = %v", tr.ID, tr.Reward, w, out, j, f, l, want)
		}
		turns := 0.0
		for _, tu := range tr.Turns {
			turns += tu.Reward
		}
		if math.Abs(turns-(1-w)*p) > 1e-9 || p == 0 {
			t.Fatalf("%s: turn rewards sum %v, want (1−%v)·%v", tr.ID, turns, w, p)
		}
		if !metaHas(tr, reward.MetaJudgeVerdict) {
			judged++
		}
	}
	lines := rlMetrics(t, dir)
	if len(lines) != 4 {
		t.Fatalf("%d rl metric lines", len(lines))
	}
	fallbacks := 0.0
	for i, m := range lines {
		for _, k := range []string{"outcome", "format", "overlong", "process", "judge", "outcome_weight", "judge_unparseable", "judge_timeout", "judge_error"} {
			if _, ok := m["reward/calc/"+k].(float64); !ok {
				t.Fatalf("step %d lacks reward/calc/%s: %v", i+1, k, m)
			}
		}
		if w, want := m["reward/calc/outcome_weight"].(float64), 0.25+0.75*float64(i)/4; math.Abs(w-want) > 1e-12 {
			t.Fatalf("step %d: outcome weight %v, want %v", i+1, w, want)
		}
		fallbacks += m["reward/calc/judge_unparseable"].(float64) + m["reward/calc/judge_timeout"].(float64)
		if m["reward/calc/judge_error"].(float64) != 0 {
			t.Fatalf("judge errors: %v", m)
		}
	}
	if int(fallbacks)+judged != len(trajs) {
		t.Fatalf("%v fallbacks + %d judged != %d episodes", fallbacks, judged, len(trajs))
	}
	t.Logf("policy judge: %d judged, %v fell back", judged, fallbacks)

	// Judges that are not the policy: the run's checkpoint in a local engine of its own, and
	// the same checkpoint served by agentrl serve's server on a loopback port.
	ck := initialCheckpoint(t, dir)
	url := startServer(t, ck, "")
	for _, tc := range []struct{ name, judge string }{
		{"checkpoint", judgeBlock("checkpoint", ", checkpoint: "+ck)},
		{"remote", judgeBlock("remote", ", checkpoint: "+ck+", remote: {servers: [{name: j, url: '"+url+"', dialect: agentrl}]}")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := trainTiny(t, t.TempDir(), nil, "phases.rl.steps=2", "phases.rl.envs.0.reward.judge="+tc.judge)
			trajs := rlTrajs(t, d)
			if len(trajs) != 2*2*4 {
				t.Fatalf("%d rescored trajectories", len(trajs))
			}
			n := 0.0
			for _, m := range rlMetrics(t, d) {
				n += m["reward/calc/judge_unparseable"].(float64) + m["reward/calc/judge_timeout"].(float64)
				if m["reward/calc/judge_error"].(float64) != 0 {
					t.Fatalf("judge errors: %v", m)
				}
			}
			for _, tr := range trajs {
				j, _ := metaValue(tr, reward.MetaJudge)
				out, _ := metaValue(tr, reward.MetaOutcome)
				if math.Abs(tr.Reward-(out+0.5*j)) > 1e-12 {
					t.Fatalf("%s: reward %v, want %v + 0.5·%v", tr.ID, tr.Reward, out, j)
				}
			}
			t.Logf("%s judge: %v of %d fell back", tc.name, n, len(trajs))
			if tc.name == "remote" {
				resp, err := http.Get(url + "/metrics")
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				// 16 judgements, and the one-token probe before the run trusts the server.
				if want := `agentrl_serve_requests_total{code="200",route="/agentrl/v1/generate"} 17`; !strings.Contains(string(body), want) {
					t.Fatalf("the served judge's metrics lack %q:\n%s", want, body)
				}
			}
		})
	}
	// A judgement past its timeout scores the fallback and is counted.
	t.Run("timeout", func(t *testing.T) {
		d := trainTiny(t, t.TempDir(), nil, "phases.rl.steps=1", "phases.rl.envs.0.reward.judge="+strings.Replace(judgeBlock("checkpoint", ", checkpoint: "+ck), "timeout: 1m", "timeout: 1ns", 1))
		m := rlMetrics(t, d)[0]
		if m["reward/calc/judge_timeout"].(float64) != 8 || m["reward/calc/judge"].(float64) != 0.25 {
			t.Fatalf("timeouts %v, judge mean %v; want 8 and the fallback 0.25", m["reward/calc/judge_timeout"], m["reward/calc/judge"])
		}
	})
}

// Without a reward block nothing is recorded or logged that a run did not log before.
func TestNoRewardBlockLogsNothingNew(t *testing.T) {
	if m := rewardMetrics([]*traj.Trajectory{{Env: "calc", Reward: 1, Meta: []traj.KV{{Key: "success", Value: "true"}}}}); m != nil {
		t.Fatalf("metrics %v", m)
	}
}

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

// The recorded trajectories carry the composed rewards, so a replay trains the same updates and
// logs the same reward parts without rescoring; an asynchronous phase rescores as the
// synchronous one does.
func TestRewardBlockReplayAndAsync(t *testing.T) {
	block := "phases.rl.envs.0.reward=" + rewardBlock
	sum := replayRun(t, 4, append(slices.Clone(replaySets), block)...)
	for _, m := range rlMetrics(t, sum.Dir) {
		if _, ok := m["reward/calc/format"]; !ok {
			t.Fatalf("replayed metrics lack the reward parts: %v", m)
		}
	}

	dir := t.TempDir()
	run, err := NewRun(tinyConfig(t, dir, append(slices.Clone(asyncSets), block)...), Options{Envs: all.Builtins()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	lines := rlMetrics(t, run.Dir)
	if len(lines) == 0 {
		t.Fatal("no rl metrics")
	}
	for _, m := range lines {
		if _, ok := m["reward/calc/outcome_weight"]; !ok {
			t.Fatalf("async metrics lack the reward parts: %v", m)
		}
	}
	if n := len(rlTrajs(t, run.Dir)); n == 0 {
		t.Fatal("no rescored trajectory in the asynchronous run")
	}
}
