package dashboard

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentrl/agentrl/traj"
)

// synthRun writes a run directory: config.yaml (with seed and the monitor block), metrics.jsonl
// with sft SFT lines then rl RL lines (a warning on every tenth RL step, evaluations before and
// after), and trajectories trajs of an RL phase, each a tool call with its response.
func synthRun(t testing.TB, dir string, seed, sft, rl, trajs int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf("name: %s\nseed: %d\nmonitor:\n  min_entropy: 0.02\n  max_zero_var_share: 0.9\n  max_kl: 0.05\n  max_latency_bias: 1.2\n"+
		"phases:\n  - name: sft\n    steps: %d\n  - name: rl\n    steps: %d\n    rl:\n      group_size: %d\n", filepath.Base(dir), seed, sft, rl, 4+seed)
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	line := func(m map[string]any) {
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(append(b, '\n'))
	}
	line(map[string]any{"eval": "before", "env": "calc", "eval/pass1": 0.1, "eval/pass1_greedy": 0.2, "version": 0})
	for s := 1; s <= sft; s++ {
		line(map[string]any{"phase": "sft", "step": s, "sft/loss": 5 - float64(s)/float64(sft), "explore/entropy": 2.0, "signal/grad_norm": 1.0, "time/train_s": 0.05, "version": s})
	}
	for s := 1; s <= rl; s++ {
		p := float64(s) / float64(rl)
		m := map[string]any{"phase": "rl", "step": s, "version": sft + s,
			"reward/mean": 0.3 + 0.5*p + 0.01*float64(seed), "reward/success": 0.3 + 0.5*p, "episodes/sampled": 16, "episodes/failed": s % 2, "episodes/truncated": 1,
			"explore/entropy": 0.5 * (1 - p), "explore/distinct_per_group": 0.5, "explore/tool_call_rate": 0.4, "explore/tool_mix/calculator": 1,
			"signal/zero_var_share": 0.2, "signal/effective_batch": 12, "signal/adv_spread": 0.8, "signal/grad_norm": 0.5, "signal/partial_batch": false,
			"shift/behaviour_kl": 0.0002 + 0.0001*p, "is/weight_p50": 1 + 0.0001*p, "is/weight_p90": 1 + 0.0002*p, "is/weight_p99": 1 + 0.0003*p, "loss/pg_clipfrac": 0.01,
			"shift/version_lag_mean": 0, "loss/total": -0.1, "loss/pg": -0.1,
			"time/generate_env_s": 0.2, "time/generate_s": 1.5, "time/env_s": 0.1, "time/train_s": 0.3, "time/step_s": 0.55}
		if s%10 == 0 {
			m["warnings"] = []string{"exploration collapsing: mean token entropy 0.0100 below 0.0200"}
		}
		// The monitor's entropy controller raises the bonus on every 15th step; the phase is
		// asynchronous, with a queue and a staleness histogram.
		m["monitor/entropy_coef"] = 0.001 * float64(1+s/15)
		if s%15 == 0 {
			m["actions"] = []string{fmt.Sprintf("exploration: mean token entropy 0.01 below the band [0.1, 0.5]: rl.loss.entropy_coef %g → %g", 0.001*float64(s/15), 0.001*float64(1+s/15))}
		}
		m["async/batches_ahead"] = s % 3
		m["async/staleness/0"], m["async/staleness/1"] = 10, 6
		m["async/dropped_stale"], m["async/partial_stale"] = s%4, s%2
		m["async/latency_bias"] = 1 + 0.01*float64(s)
		m["dist/redelivered"], m["dist/tasks_swept"] = s/10, s/20
		m["time/learner_wait_s"] = 0.01
		line(m)
	}
	line(map[string]any{"eval": "after-rl", "env": "calc", "eval/pass1": 0.6, "eval/pass1_greedy": 0.7, "version": sft + rl})
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if trajs == 0 {
		return
	}
	tf, err := os.Create(filepath.Join(dir, "trajectories.atrs"))
	if err != nil {
		t.Fatal(err)
	}
	tw, err := traj.NewWriter(tf, traj.WriterOptions{Compression: traj.CompressZstd})
	if err != nil {
		t.Fatal(err)
	}
	for i := range trajs {
		if err := tw.Write(synthTraj(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	tf.Close()
}

// synthTraj is episode i: system and user prompt, an assistant turn that calls the calculator,
// the tool's response, and a final assistant answer. Odd episodes fail with reward 0.
func synthTraj(i int) *traj.Trajectory {
	roles := []traj.Role{traj.RoleSystem, traj.RoleSystem, traj.RoleUser, traj.RoleUser,
		traj.RoleAssistant, traj.RoleAssistant, traj.RoleAssistant, traj.RoleTool, traj.RoleTool, traj.RoleAssistant, traj.RoleAssistant}
	t := &traj.Trajectory{ID: fmt.Sprintf("calc-%d", i), Env: "calc", TaskSeed: int64(1000 + i), GroupID: uint64(i / 4),
		Reward: float64(1 - i%2), Status: traj.StatusOK,
		Meta: []traj.KV{{Key: "phase", Value: "rl"}, {Key: "step", Value: fmt.Sprint(1 + i/8)}}}
	for j, r := range roles {
		t.Tokens = append(t.Tokens, int32(10+j))
		t.Roles = append(t.Roles, r)
		sampled := r == traj.RoleAssistant
		t.LossMask = append(t.LossMask, sampled)
		lp, v := float32(0), traj.NoVersion
		if sampled {
			lp, v = -0.5*float32(j%4), 3
		}
		t.Logprobs = append(t.Logprobs, lp)
		t.Versions = append(t.Versions, v)
	}
	t.Turns = []traj.Turn{
		{Start: 4, End: 7, ObsEnd: 9, ToolCalls: []traj.ToolCall{{Name: "calculator", Arguments: `{"expression":"2+3"}`, Result: "5"}}},
		{Start: 9, End: 11, ObsEnd: 11},
	}
	if i%5 == 4 {
		t.Status = traj.StatusTruncated
	}
	return t
}

// synthTreeTraj is a delegating, folding episode "e" as rollout records one: its first sample
// ends with a fold; the second (the folded context) delegates; sub-episode e.1 (depth 1) is the
// third sample and delegated e.1.1 (depth 2), the fourth; e.2 (depth 1) timed out and is not
// trained.
func synthTreeTraj() *traj.Trajectory {
	t := &traj.Trajectory{ID: "e", Env: "parts", TaskSeed: 9, Reward: 1, Status: traj.StatusOK,
		Meta: []traj.KV{{Key: "phase", Value: "rl"}, {Key: "step", Value: "1"}}}
	push := func(r traj.Role, n int) (int, int) {
		s := len(t.Tokens)
		for range n {
			t.Tokens = append(t.Tokens, int32(20+len(t.Tokens)))
			t.Roles = append(t.Roles, r)
			t.LossMask = append(t.LossMask, r == traj.RoleAssistant)
			lp, v := float32(0), traj.NoVersion
			if r == traj.RoleAssistant {
				lp, v = -0.25, 2
			}
			t.Logprobs, t.Versions = append(t.Logprobs, lp), append(t.Versions, v)
		}
		return s, len(t.Tokens)
	}
	turn := func(n, obs int, calls ...traj.ToolCall) {
		s, e := push(traj.RoleAssistant, n)
		_, o := push(traj.RoleTool, obs)
		t.Turns = append(t.Turns, traj.Turn{Start: s, End: e, ObsEnd: o, ToolCalls: calls})
	}
	sub := func(id, parent string, depth, turn, start, end, samples int, status string) traj.KV {
		return traj.KV{Key: "sub_episode", Value: fmt.Sprintf("id=%s parent=%s depth=%d turn=%d start=%d end=%d samples=%d status=%s reward=1 calls=2 critical=2",
			id, parent, depth, turn, start, end, samples, status)}
	}
	push(traj.RoleSystem, 2)
	push(traj.RoleUser, 2)
	turn(3, 0, traj.ToolCall{Name: "fold", Arguments: `{"summary":"two items"}`, Result: "folded 9 tokens into 5"})
	t.Samples = append(t.Samples, len(t.Tokens))
	push(traj.RoleSystem, 1)
	push(traj.RoleUser, 3)
	turn(3, 2, traj.ToolCall{Name: "delegate", Arguments: `{"task":"item a"}`, Result: "12"}, traj.ToolCall{Name: "delegate", Arguments: `{"task":"item b"}`, Error: "the sub-episode failed (timeout)"})
	turn(2, 0)
	s1 := len(t.Tokens)
	t.Samples = append(t.Samples, s1)
	push(traj.RoleSystem, 1)
	push(traj.RoleUser, 1)
	turn(2, 1, traj.ToolCall{Name: "delegate", Arguments: `{"task":"price of a"}`, Result: "4"})
	turn(1, 0)
	s2 := len(t.Tokens)
	t.Samples = append(t.Samples, s2)
	push(traj.RoleSystem, 1)
	push(traj.RoleUser, 1)
	turn(1, 0)
	end := len(t.Tokens)
	t.Meta = append(t.Meta, sub("e.1", "e", 1, 1, s1, end, 2, "ok"), sub("e.1.1", "e.1", 2, 0, s2, end, 1, "ok"), sub("e.2", "e", 1, 1, end, end, 0, "timeout"),
		traj.KV{Key: "folds", Value: "1"}, traj.KV{Key: "model_calls", Value: "6"}, traj.KV{Key: "critical_calls", Value: "5"})
	return t
}

// synthTreeRun writes a run directory whose trajectories are synthTreeTraj alone.
func synthTreeRun(t testing.TB, dir string) {
	t.Helper()
	synthRun(t, dir, 4, 1, 2, 0)
	tr := synthTreeTraj()
	if err := tr.Validate(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "trajectories.atrs"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := traj.NewWriter(f, traj.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(tr); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}
