// Package eval measures a policy on held-out tasks: pass@1 greedy and sampled, the unbiased
// pass@k, tool use, turns and tokens. It runs episodes with the local engine and the rollout
// loop and knows nothing of training: the trainer (pipeline) calls it after each phase, and
// `agentrl eval` calls it on a checkpoint.
package eval

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/infer/local"
	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/rollout"
	"github.com/agentrl/agentrl/tokenizer"
	"github.com/agentrl/agentrl/traj"
)

// Options says how to evaluate a policy on held-out tasks.
type Options struct {
	Env   string
	Tasks int // held-out task seeds, from the start of the held-out range
	// K samples per task at temperature 1 for pass@k; 0 evaluates greedy decoding only.
	K       int
	Seed    uint64
	Rollout rollout.Config
	Slots   int
	// Envs holds the environment named by Env.
	Envs *env.Registry
	// NewEnv makes the episodes' environments (nil: Envs.New, or Env at Difficulty when set).
	// With a Difficulty it must make Env's tasks at that difficulty.
	NewEnv rollout.EnvFactory
	// Difficulty, when set, poses Env's tasks at its levels (env.WithDifficulty) and reports
	// success per level.
	Difficulty *env.Difficulty
	// NewConversation renders the episodes' chat with the model's template
	// (rollout.Runner.NewConversation); nil: the tokenizer's ChatML.
	NewConversation func() rollout.Conversation
	// Progress, when set, is called as each episode ends with the episodes done and the total,
	// Tasks × (1 + K); calls are serialized.
	Progress func(done, total int)
	// Gen, when set, generates the episodes instead of a local engine over the model given to
	// Run (which may then be nil): the sampler of a service that holds the policy's weights
	// (learn/tinker).
	Gen infer.Generator
}

// Limits of an evaluation's size, checked before anything is allocated. An evaluation keeps its
// episodes until it has scored them: Tasks × (1 + K) of them, each up to max_context tokens at
// about 14 bytes a token (MaxEpisodeTokens: under 1 GiB).
const (
	MaxTasks         = 100_000
	MaxK             = 1024
	MaxEpisodeTokens = 1 << 26
)

// CheckSizes refuses counts outside their limits: Tasks in [1, MaxTasks], K in [0, MaxK],
// Slots in [1, local.MaxSlots] and, when Rollout.MaxContext is set, the episodes' tokens within
// MaxEpisodeTokens. Flags and settings are named as the command line names them.
func (o Options) CheckSizes() error {
	switch {
	case o.Tasks < 1 || o.Tasks > MaxTasks:
		return fmt.Errorf("eval: tasks %d must be in [1, %d] (eval.MaxTasks)", o.Tasks, MaxTasks)
	case o.K < 0 || o.K > MaxK:
		return fmt.Errorf("eval: k %d must be in [0, %d] (eval.MaxK)", o.K, MaxK)
	case o.Slots < 1 || o.Slots > local.MaxSlots:
		return fmt.Errorf("eval: slots %d must be in [1, %d] (local.MaxSlots)", o.Slots, local.MaxSlots)
	}
	if toks := int64(o.Tasks) * int64(1+o.K) * o.Rollout.MaxEpisodeTokens(); toks > MaxEpisodeTokens {
		return fmt.Errorf("eval: %d tasks × (1 + k %d) episodes × %d tokens an episode (max_context %d, for each sample its folds and sub-episodes add) = %d tokens exceed the limit of %d (eval.MaxEpisodeTokens); evaluate fewer tasks or samples",
			o.Tasks, o.K, o.Rollout.MaxEpisodeTokens(), o.Rollout.MaxContext, toks, MaxEpisodeTokens)
	}
	return nil
}

// Result is one environment's held-out result.
type Result struct {
	Env   string `json:"env"`
	Tasks int    `json:"tasks"`
	// Greedy decoding.
	Pass1Greedy float64 `json:"pass1_greedy"`
	// Sampled at temperature 1, K samples per task (absent when K = 0): unbiased pass@1 and
	// pass@k (Chen et al., arXiv 2107.03374).
	K            int      `json:"k,omitempty"`
	Pass1Sampled *float64 `json:"pass1_sampled,omitempty"`
	PassK        *float64 `json:"passk,omitempty"`
	// ToolUseSampled is the share of sampled episodes that called a tool.
	ToolUseSampled *float64 `json:"tool_use_rate_sampled,omitempty"`
	// Pass1PerTask holds each task's sampled pass@1, in task order (absent when K = 0; not
	// written out): the spread a standard error of Pass1Sampled is computed from.
	Pass1PerTask []float64 `json:"-"`
	// Behaviour over the greedy episodes.
	ToolUseRate float64 `json:"tool_use_rate"`
	MeanTurns   float64 `json:"mean_turns"`
	MeanTokens  float64 `json:"mean_tokens"`
	// MeanResponseTokens counts the policy's own tokens (the assistant's) per greedy episode.
	MeanResponseTokens float64        `json:"mean_response_tokens"`
	Statuses           map[string]int `json:"statuses"`
	// StatusesSampled counts the sampled episodes by status as Statuses does the greedy ones
	// (absent when K = 0). An episode that is not ok counts as unsolved in every pass rate.
	StatusesSampled map[string]int `json:"statuses_sampled,omitempty"`
	// FirstFailure is the error of the first episode that failed (env_error or timeout), greedy
	// episodes first, in task order; empty when none failed.
	FirstFailure string `json:"first_failure,omitempty"`
	// Levels holds the results per difficulty level, easiest first (absent without a
	// Difficulty); a task's level is Difficulty.LevelOf its seed.
	Levels []LevelResult `json:"levels,omitempty"`
	// Context is the folding of the greedy episodes (rollout.MeasureFolds), present when the
	// rollout folds (rollout.context).
	Context *rollout.FoldStats `json:"context,omitempty"`
	// Delegation is the delegation of the greedy episodes (rollout.MeasureDelegation), present
	// when the rollout delegates (rollout.delegate).
	Delegation *rollout.DelegateStats `json:"delegation,omitempty"`
}

// LevelResult is the result on the tasks of one difficulty level.
type LevelResult struct {
	Level       int      `json:"level"`
	Tasks       int      `json:"tasks"`
	Pass1Greedy float64  `json:"pass1_greedy"`
	Pass1       *float64 `json:"pass1_sampled,omitempty"`
}

// Failed counts the episodes, greedy and sampled, whose environment failed or timed out.
func (r Result) Failed() int {
	n := 0
	for _, m := range []map[string]int{r.Statuses, r.StatusesSampled} {
		n += m[traj.StatusEnvError.String()] + m[traj.StatusTimeout.String()]
	}
	return n
}

// noteFailure records the error of t when it is the first failure seen.
func (r *Result) noteFailure(t *traj.Trajectory) {
	if t.Status.Failed() && r.FirstFailure == "" {
		r.FirstFailure = fmt.Sprintf("%s: %s", t.Status, t.Error)
	}
}

// Run runs a policy (m with tok, or o.Gen) on held-out tasks of one environment. A policy that produces
// non-finite logits (broken weights) makes it fail with an error wrapping infer.ErrNonFinite.
func Run(ctx context.Context, m *model.Model, tok *tokenizer.Tokenizer, version int32, o Options) (Result, error) {
	if err := o.CheckSizes(); err != nil {
		return Result{}, err
	}
	spec, err := o.Envs.Lookup(o.Env)
	if err != nil {
		return Result{}, err
	}
	if o.Difficulty != nil {
		mix, err := env.WithDifficulty(spec, *o.Difficulty)
		if err != nil {
			return Result{}, fmt.Errorf("eval: %w", err)
		}
		if o.NewEnv == nil {
			o.NewEnv = func(string) (env.Env, error) { return mix.New() }
		}
	}
	if o.NewEnv == nil {
		o.NewEnv = o.Envs.New
	}
	n := min(int64(o.Tasks), spec.Heldout.Len())
	if n < 1 {
		return Result{}, fmt.Errorf("eval: %s: no held-out tasks", o.Env)
	}
	tasks := make([]rollout.Task, n)
	for i := range tasks {
		tasks[i] = rollout.Task{Env: o.Env, Seed: spec.Heldout.Lo + int64(i), GroupID: uint64(i)}
	}
	var eng infer.Generator = o.Gen
	if eng == nil {
		le, err := local.NewEngine(m, version, local.EngineConfig{Slots: max(o.Slots, 1), MaxLen: o.Rollout.MaxContext})
		if err != nil {
			return Result{}, err
		}
		defer le.Close()
		eng = le
	}
	greedyCfg := o.Rollout
	greedyCfg.Sampling = infer.Sampling{Temperature: 0}
	onEpisode := progressFunc(o.Progress, int(n)*(1+o.K))
	runner := &rollout.Runner{Gen: eng, Tok: tok, Cfg: greedyCfg, SampleSeed: o.Seed, OnEpisode: onEpisode, NewConversation: o.NewConversation}
	groups, err := runner.RunGroups(ctx, o.NewEnv, tasks, 1, max(o.Slots, 1))
	if err != nil {
		return Result{}, err
	}
	res := Result{Env: o.Env, Tasks: int(n), Statuses: map[string]int{}}
	lv := newLevels(o.Difficulty)
	var succ, tools, turns, toks, resp int
	for i, g := range groups {
		t := g.Trajs[0]
		if rollout.Succeeded(t) {
			succ++
			lv.greedy(tasks[i].Seed)
		}
		if UsedTool(t) {
			tools++
		}
		turns += len(t.Turns)
		toks += t.Len()
		for _, r := range t.Roles {
			if r == traj.RoleAssistant {
				resp++
			}
		}
		res.Statuses[t.Status.String()]++
		res.noteFailure(t)
	}
	res.Pass1Greedy = float64(succ) / float64(n)
	res.ToolUseRate = float64(tools) / float64(n)
	res.MeanTurns = float64(turns) / float64(n)
	res.MeanTokens = float64(toks) / float64(n)
	res.MeanResponseTokens = float64(resp) / float64(n)
	if o.Rollout.Context != nil || o.Rollout.Delegate != nil {
		greedy := make([]*traj.Trajectory, len(groups))
		for i, g := range groups {
			greedy[i] = g.Trajs[0]
		}
		if o.Rollout.Context != nil {
			fs := rollout.MeasureFolds(greedy)
			res.Context = &fs
		}
		if o.Rollout.Delegate != nil {
			ds := rollout.MeasureDelegation(greedy)
			res.Delegation = &ds
		}
	}
	if o.K > 0 {
		sampled := o.Rollout
		sampled.Sampling = infer.Sampling{Temperature: 1}
		runner = &rollout.Runner{Gen: eng, Tok: tok, Cfg: sampled, SampleSeed: o.Seed ^ 0x5A, OnEpisode: onEpisode, NewConversation: o.NewConversation}
		groups, err := runner.RunGroups(ctx, o.NewEnv, tasks, o.K, max(o.Slots, 1))
		if err != nil {
			return Result{}, err
		}
		var p1, pk, tu float64
		res.StatusesSampled = map[string]int{}
		for _, g := range groups {
			c := 0
			for _, t := range g.Trajs {
				res.StatusesSampled[t.Status.String()]++
				res.noteFailure(t)
				if rollout.Succeeded(t) {
					c++
				}
				if UsedTool(t) {
					tu++
				}
			}
			p1 += PassAtK(o.K, c, 1)
			res.Pass1PerTask = append(res.Pass1PerTask, PassAtK(o.K, c, 1))
			lv.sampled(g.Trajs[0].TaskSeed, PassAtK(o.K, c, 1))
			pk += PassAtK(o.K, c, o.K)
		}
		res.K = o.K
		p1, pk, tu = p1/float64(n), pk/float64(n), tu/float64(n*int64(o.K))
		res.Pass1Sampled, res.PassK, res.ToolUseSampled = &p1, &pk, &tu
	}
	res.Levels = lv.results(tasks, o.K > 0)
	return res, nil
}

// levelTally sums successes per difficulty level.
type levelTally struct {
	d                *env.Difficulty
	greedyN, sampleP map[int]float64
}

func newLevels(d *env.Difficulty) *levelTally {
	return &levelTally{d: d, greedyN: map[int]float64{}, sampleP: map[int]float64{}}
}

func (l *levelTally) greedy(seed int64) {
	if l.d != nil {
		l.greedyN[l.d.LevelOf(seed)]++
	}
}

func (l *levelTally) sampled(seed int64, p1 float64) {
	if l.d != nil {
		l.sampleP[l.d.LevelOf(seed)] += p1
	}
}

// results are the per-level rates over tasks, for every level of the difficulty (a level
// with no task reports 0 tasks and rates of 0).
func (l *levelTally) results(tasks []rollout.Task, sampled bool) []LevelResult {
	if l.d == nil {
		return nil
	}
	count := map[int]int{}
	for _, t := range tasks {
		count[l.d.LevelOf(t.Seed)]++
	}
	levels := slices.Sorted(slices.Values(l.d.Levels))
	out := make([]LevelResult, len(levels))
	for i, lv := range levels {
		n := float64(max(count[lv], 1))
		out[i] = LevelResult{Level: lv, Tasks: count[lv], Pass1Greedy: l.greedyN[lv] / n}
		if sampled {
			p := l.sampleP[lv] / n
			out[i].Pass1 = &p
		}
	}
	return out
}

// progressFunc adapts report to rollout.Runner.OnEpisode: one call per episode, serialized,
// with the count done so far (nil when report is nil).
func progressFunc(report func(done, total int), total int) func() {
	if report == nil {
		return nil
	}
	var mu sync.Mutex
	done := 0
	return func() {
		mu.Lock()
		defer mu.Unlock()
		done++
		report(done, total)
	}
}

// PassAtK is the unbiased estimator of pass@k from n samples of which c are correct:
// 1 − C(n−c, k)/C(n, k) (Chen et al., arXiv 2107.03374, eq. 1), computed as a stable product.
func PassAtK(n, c, k int) float64 {
	if n-c < k {
		return 1
	}
	p := 1.0
	for i := n - c + 1; i <= n; i++ {
		p *= 1 - float64(k)/float64(i)
	}
	return 1 - p
}

// UsedTool reports whether an episode called a tool in any turn.
func UsedTool(t *traj.Trajectory) bool {
	for _, tu := range t.Turns {
		if len(tu.ToolCalls) > 0 {
			return true
		}
	}
	return false
}
