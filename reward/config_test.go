package reward

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/agentrl/agentrl/traj"
)

func ptr(v float64) *float64 { return &v }

// episode is a two-turn trajectory: 4 prompt tokens, a 3-token turn with one good and one bad
// tool call, a 2-token observation, a 5-token final turn; outcome reward r.
func episode(r float64) *traj.Trajectory {
	n := 14
	t := &traj.Trajectory{Env: "calc", Tokens: make([]int32, n), Roles: make([]traj.Role, n), LossMask: make([]bool, n),
		Logprobs: make([]float32, n), Versions: make([]int32, n), Reward: r,
		Turns: []traj.Turn{
			{Start: 4, End: 7, ObsEnd: 9, Reward: 0.5, ToolCalls: []traj.ToolCall{{Name: "calc"}, {Name: "calc", Error: "bad json"}}},
			{Start: 9, End: 14, ObsEnd: 14},
		}}
	for _, tu := range t.Turns {
		for i := tu.Start; i < tu.End; i++ {
			t.LossMask[i] = true
		}
	}
	return t
}

func meta(t *traj.Trajectory, k string) string {
	for _, kv := range t.Meta {
		if kv.Key == k {
			return kv.Value
		}
	}
	return ""
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-12 }

// Hand-computed compositions.
func TestShaperComposes(t *testing.T) {
	ctx := context.Background()
	full := Config{
		Outcome:  ptr(2),
		Format:   &FormatConfig{Pattern: `^Answer: \d+$`, Weight: 0.5},
		Overlong: &OverlongConfig{OverlongPenalty: OverlongPenalty{MaxLen: 10, Cache: 4}, Weight: 1}, // 8 tokens: (6−8)/4 = −0.5
		Process:  &ToolProcess{ValidCall: 0.1, InvalidCall: -0.2, StepCost: -0.01},
	}
	s, err := NewShaper(full, 100, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	tr := episode(1)
	if err := s.Apply(ctx, tr, Episode{Response: "Answer: 4"}, 0); err != nil {
		t.Fatal(err)
	}
	// 2·1 + 0.5·1 − 0.5 = 2; turns: 0.5 + (0.1 − 0.2 − 0.01) = 0.39, 0 − 0.01.
	if !near(tr.Reward, 2) || !near(tr.Turns[0].Reward, 0.39) || !near(tr.Turns[1].Reward, -0.01) {
		t.Fatalf("reward %v turns %v %v", tr.Reward, tr.Turns[0].Reward, tr.Turns[1].Reward)
	}
	for k, want := range map[string]string{MetaOutcome: "1", MetaFormat: "1", MetaOverlong: "-0.5", MetaProcess: "-0.12"} {
		if got := meta(tr, k); got != want {
			t.Errorf("meta %s = %q, want %q", k, got, want)
		}
	}

	// Progressive at step 5 of 10 from 0: w = 0.5. Shaping (format, turns) × 0.5, outcome × 0.5,
	// the overlong penalty unscaled.
	prog := full
	prog.Progressive = &Progressive{From: 0, Steps: 10}
	s, _ = NewShaper(prog, 100, nil, 0)
	tr = episode(1)
	if err := s.Apply(ctx, tr, Episode{Response: "no"}, 5); err != nil {
		t.Fatal(err)
	}
	// 0.5·(2·1) + 0.5·(0.5·0) − 0.5 = 0.5; turns 0.39·0.5, −0.01·0.5.
	if !near(tr.Reward, 0.5) || !near(tr.Turns[0].Reward, 0.195) || !near(tr.Turns[1].Reward, -0.005) || meta(tr, MetaOutcomeWeight) != "0.5" {
		t.Fatalf("progressive: reward %v turns %v %v, weight %s", tr.Reward, tr.Turns[0].Reward, tr.Turns[1].Reward, meta(tr, MetaOutcomeWeight))
	}
	// At step 0 only the dense reward counts; from step 10 on only the outcome does.
	tr = episode(1)
	_ = s.Apply(ctx, tr, Episode{Response: "Answer: 1"}, 0)
	if !near(tr.Reward, 0) || // format 0.5·1, overlong −0.5, the outcome weighted 0
		!near(tr.Turns[0].Reward, 0.39) {
		t.Fatalf("step 0: %v %v", tr.Reward, tr.Turns[0].Reward)
	}
	tr = episode(1)
	_ = s.Apply(ctx, tr, Episode{Response: "Answer: 1"}, 30)
	if !near(tr.Reward, 2-0.5) || tr.Turns[0].Reward != 0 || tr.Turns[1].Reward != 0 {
		t.Fatalf("step 30: %v %v", tr.Reward, tr.Turns)
	}

	// An infrastructure failure is left alone.
	tr = episode(0)
	tr.Status = traj.StatusEnvError
	_ = s.Apply(ctx, tr, Episode{}, 0)
	if tr.Reward != 0 || tr.Turns[0].Reward != 0.5 || len(tr.Meta) != 0 {
		t.Fatalf("failed episode rescored: %+v", tr)
	}
}

func TestShaperJudge(t *testing.T) {
	ctx := context.Background()
	jc := JudgeConfig{Rubric: "Q: {{.Prompt}}\nA: {{.Response}}\nScore 0-10.", MaxScore: 10, Timeout: 50 * time.Millisecond, Fallback: 0.3}
	cases := []struct {
		gen     *fakeGen
		reward  float64
		verdict string
		status  traj.Status
	}{
		{&fakeGen{reply: "Score: 8"}, 1 + 0.5*0.8, "", traj.StatusOK},
		{&fakeGen{reply: "fine"}, 1 + 0.5*0.3, "unparseable", traj.StatusOK},
		{&fakeGen{wait: true}, 1 + 0.5*0.3, "timeout", traj.StatusOK},
		{&fakeGen{err: errors.New("connection refused")}, 1, "error", traj.StatusEnvError},
	}
	for _, tc := range cases {
		j, err := NewJudge(tc.gen, jc)
		if err != nil {
			t.Fatal(err)
		}
		s, err := NewShaper(Config{}, 100, j, 0.5)
		if err != nil {
			t.Fatal(err)
		}
		tr := episode(1)
		if err := s.Apply(ctx, tr, Episode{Prompt: "2+2?", Response: "4"}, 0); err != nil {
			t.Fatal(err)
		}
		if !near(tr.Reward, tc.reward) || meta(tr, MetaJudgeVerdict) != tc.verdict || tr.Status != tc.status {
			t.Errorf("%+v: reward %v verdict %q status %v", tc.gen, tr.Reward, meta(tr, MetaJudgeVerdict), tr.Status)
		}
		if tc.status == traj.StatusOK && tc.gen.got != "Q: 2+2?\nA: 4\nScore 0-10." {
			t.Errorf("rubric rendered %q", tc.gen.got)
		}
	}
	// The caller's context ending is the caller's error, not a judgement.
	j, _ := NewJudge(&fakeGen{wait: true}, jc)
	s, _ := NewShaper(Config{}, 100, j, 1)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.Apply(cctx, episode(1), Episode{}, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		c      Config
		judged bool
		want   string
	}{
		{Config{}, false, "leave the environment's reward as it is"},
		{Config{Outcome: ptr(1)}, false, "leave the environment's reward as it is"},
		{Config{Outcome: ptr(math.NaN())}, false, "outcome must be a finite weight"},
		{Config{Format: &FormatConfig{Pattern: "(", Weight: 1}}, false, "format.pattern: error parsing regexp"},
		{Config{Format: &FormatConfig{Weight: 1}}, false, "format.pattern must be set"},
		{Config{Format: &FormatConfig{Pattern: "x"}}, false, "format.weight must be a finite non-zero weight, got 0"},
		{Config{Overlong: &OverlongConfig{OverlongPenalty{MaxLen: 10, Cache: 20}, 1}}, false, "overlong: need 0 < cache (20) <= max_len (10)"},
		{Config{Overlong: &OverlongConfig{OverlongPenalty{MaxLen: 500, Cache: 50}, 1}}, false, "it would never apply"},
		{Config{Overlong: &OverlongConfig{OverlongPenalty{MaxLen: 100, Cache: 50}, -1}}, false, "overlong.weight must be finite and > 0"},
		{Config{Process: &ToolProcess{}}, false, "are all 0"},
		{Config{Progressive: &Progressive{From: 0.5, Steps: 10}}, true, "with neither it would only scale the reward"},
		{Config{Process: &ToolProcess{StepCost: -1}, Progressive: &Progressive{From: 2, Steps: 10}}, false, "progressive: from must be in [0, 1]"},
	} {
		err := tc.c.Validate(384, tc.judged)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.c, err, tc.want)
		}
	}
	if err := (&Config{}).Validate(384, true); err != nil {
		t.Errorf("a judge alone: %v", err)
	}
	if _, err := NewShaper(Config{Format: &FormatConfig{Pattern: "x", Weight: 1}}, 384, nil, 1); err == nil {
		t.Error("a judge weight without a judge was accepted")
	}
}

func TestCasesAndSolved(t *testing.T) {
	for _, tc := range []struct {
		c             Cases
		passed, total int
		want          float64
	}{
		{Cases{}, 5, 5, 1}, {Cases{}, 4, 5, 0}, {Cases{}, 0, 0, 0},
		{Cases{Partial: true}, 2, 8, 0.25}, {Cases{Partial: true}, 0, 8, 0}, {Cases{Partial: true}, 8, 8, 1},
	} {
		if got := tc.c.Grade(tc.passed, tc.total); got != tc.want {
			t.Errorf("%+v %d/%d = %v, want %v", tc.c, tc.passed, tc.total, got, tc.want)
		}
	}
	if Solved(0.99) || !Solved(1) {
		t.Error("only a full score solves")
	}
	// Bytes that lowering would lengthen (invalid UTF-8, "Ⱥ") before the marker must not shift it.
	for in, want := range map[string]string{"x\nAnswer: Miravo\nmore": " Miravo", "Miravo": "Miravo", "ANSWER:a": "a",
		"\xff\xfe answer: Miravo": " Miravo", "ȺȺ Answer:Oslo\nx": "Oslo", "answer": "answer"} {
		if got, ok := AnswerLine(in); !ok || got != want {
			t.Errorf("AnswerLine(%q) = %q", in, got)
		}
	}
}
