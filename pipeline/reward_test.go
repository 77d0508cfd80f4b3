package pipeline

import (
	"context"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/env/all"
	"github.com/agentrl/agentrl/reward"
	"github.com/agentrl/agentrl/traj"
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
