// Package rollout is the multi-turn agent loop: it renders the conversation with the chat
// template (a Conversation), generates with an infer.Generator, stops at the end-of-turn tokens,
// steps the environment and appends each observation by rendering only the new message. History
// is never re-tokenized: a trajectory's tokens are exactly the prompt, then each completion and
// each rendered observation, in order. Where a template is not prefix-stable (its render of the
// history changes what the policy was given), the episode continues in a new training sample
// that starts with the template's full render (traj.Trajectory.Samples): each sample is exactly
// what the policy saw when it sampled, and max_context bounds each sample.
//
// It records roles, the loss mask (sampled assistant tokens only), behaviour logprobs and the
// per-token policy version reported by the generator; it caps context length (status truncated)
// and episode time (status timeout), and records infrastructure failures as env_error rather than
// as rewards. A generator's report that the policy itself is broken (infer.ErrNonFinite) is not
// an episode's status: it is returned, and stops every episode of the batch. It does not compute
// rewards beyond what the environment returns, nor advantages.
package rollout

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/tokenizer"
	"github.com/agentrl/agentrl/traj"
)

// Config bounds one episode.
type Config struct {
	// MaxTurns is the number of assistant turns after which the episode is truncated.
	MaxTurns int `yaml:"max_turns"`
	// MaxContext caps the trajectory's total tokens (prompt + completions + observations).
	MaxContext int `yaml:"max_context"`
	// MaxTokensPerTurn caps one completion.
	MaxTokensPerTurn int `yaml:"max_tokens_per_turn"`
	// EpisodeTimeout bounds one episode's wall time (0 = none); past it the status is timeout.
	EpisodeTimeout time.Duration `yaml:"episode_timeout"`
	// Sampling is passed to the generator on every turn.
	Sampling infer.Sampling `yaml:",inline"`
}

// DefaultConfig suits the built-in environments and model.
func DefaultConfig() Config {
	return Config{
		MaxTurns:         8,
		MaxContext:       512,
		MaxTokensPerTurn: 96,
		EpisodeTimeout:   2 * time.Minute,
		Sampling:         infer.Sampling{Temperature: 1},
	}
}

// Validate reports settings that cannot work.
func (c Config) Validate() error {
	switch {
	case c.MaxTurns < 1:
		return fmt.Errorf("rollout: max_turns must be at least 1, got %d", c.MaxTurns)
	case c.MaxContext < 2:
		return fmt.Errorf("rollout: max_context must be at least 2, got %d", c.MaxContext)
	case c.MaxTokensPerTurn < 1:
		return fmt.Errorf("rollout: max_tokens_per_turn must be at least 1, got %d", c.MaxTokensPerTurn)
	case c.EpisodeTimeout < 0:
		return fmt.Errorf("rollout: episode_timeout must not be negative, got %s", c.EpisodeTimeout)
	}
	if err := c.Sampling.Validate(); err != nil {
		return fmt.Errorf("rollout: sampling: %w", err)
	}
	return nil
}

// Task identifies one episode to run.
type Task struct {
	Env     string // registered environment name, recorded in the trajectory
	Seed    int64  // task seed passed to Reset
	GroupID uint64 // episodes of one group share a task seed
	Index   int    // position within the group
}

// id names the trajectory of the task: env-seed-group-index.
func (t Task) id() string {
	var a [96]byte
	b := append(a[:0], t.Env...)
	b = append(b, '-')
	b = strconv.AppendInt(b, t.Seed, 10)
	b = append(b, '-')
	b = strconv.AppendUint(b, t.GroupID, 10)
	b = append(b, '-')
	b = strconv.AppendInt(b, int64(t.Index), 10)
	return string(b)
}

// Runner runs episodes. It is safe for concurrent use: each episode owns its environment.
//
// The loop lends each request's Prompt and Stop slices from buffers it reuses for later
// episodes: a generator must copy what it keeps of them past a successful Generate (the
// engine does). After a failed call the buffers are never reused, so a generator abandoned
// mid-call cannot read another episode's tokens.
type Runner struct {
	// Gen serves every episode, unless NewGen is set, in which case each episode gets its own
	// generator (e.g. an AgentGenerator playing an expert for that task).
	Gen    infer.Generator
	NewGen func(t Task) infer.Generator
	Tok    *tokenizer.Tokenizer
	// NewConversation makes each episode's Conversation (the chat template's rendering); nil
	// means agentrl's ChatML through Tok (EncodePrompt, EncodeObservation, EncodeFinal), which
	// never splits an episode.
	NewConversation func() Conversation
	Cfg             Config
	// SampleSeed mixes into every request's seed so that a run's seed reproduces its samples.
	SampleSeed uint64
	// Now is the clock for timings (time.Now when nil).
	Now func() time.Time
	// OnEpisode, when set, is called as each episode of RunGroups ends (progress reporting). It is
	// called from the worker goroutines and must be safe for concurrent use.
	OnEpisode func()
}

func (r *Runner) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// chatRole is the chat-template role that speaks an observation.
func chatRole(r traj.Role) string {
	if r == traj.RoleTool {
		return "tool"
	}
	return "user"
}

// requestSeed derives a distinct, reproducible seed for each generation request (SplitMix64).
func requestSeed(base uint64, t Task, turn int) uint64 {
	x := base ^ uint64(t.Seed)*0x9E3779B97F4A7C15 ^ t.GroupID*0xBF58476D1CE4E5B9 ^
		uint64(t.Index)<<32 ^ uint64(turn)
	x ^= x >> 30
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 27
	x *= 0x94D049BB133111EB
	return x ^ x>>31
}

// Episode runs one episode of task t in e (which the caller owns and closes). Environment,
// generator and time-limit failures are recorded in the trajectory's status; the returned error
// is non-nil only when ctx itself is cancelled or the generator reports a broken policy
// (infer.ErrNonFinite, which the error wraps), in which case the partial trajectory is returned
// for inspection and must not be trained on.
func (r *Runner) Episode(ctx context.Context, e env.Env, t Task) (*traj.Trajectory, error) {
	ep := episode{r: r, ctx: ctx, ectx: ctx, start: r.now(), b: bufPool.Get().(*buffers)}
	ep.mark = ep.start
	ep.t = &traj.Trajectory{ID: t.id(), Env: t.Env, TaskSeed: t.Seed, GroupID: t.GroupID}
	defer ep.finish()
	if r.Cfg.EpisodeTimeout > 0 {
		var cancel context.CancelFunc
		ep.ectx, cancel = context.WithTimeout(ctx, r.Cfg.EpisodeTimeout)
		defer cancel()
	}
	ep.conv = r.conversation()
	if done, err := ep.begin(e, t); done {
		return ep.t, err
	}
	gen := r.Gen
	if r.NewGen != nil {
		gen = r.NewGen(t)
	}
	if gen == nil {
		ep.end(traj.StatusEnvError, "no generator configured")
		return ep.t, nil
	}
	ep.b.stop = append(ep.b.stop[:0], ep.conv.Stop()...)
	if len(ep.b.stop) == 0 {
		ep.end(traj.StatusEnvError, "the conversation has no stop tokens")
		return ep.t, nil
	}
	for turn := 0; ; turn++ {
		if done, err := ep.turn(e, gen, t, turn); done {
			return ep.t, err
		}
	}
}

// begin resets the environment and records the prompt; done reports that the episode already
// ended (err as for Episode).
func (ep *episode) begin(e env.Env, t Task) (done bool, err error) {
	r, tr := ep.r, ep.t
	obs, err := e.Reset(ep.ectx, t.Seed)
	ep.lap(&tr.Timings.Env)
	if err != nil {
		return true, ep.fail("reset", err)
	}
	prompt, sysLen, err := ep.conv.Start(obs.System, obs.Text)
	ep.lap(&tr.Timings.Tokenize)
	if err != nil {
		ep.end(traj.StatusEnvError, fmt.Sprintf("render prompt: %v", err))
		return true, nil
	}
	if len(prompt) >= r.Cfg.MaxContext {
		// Nothing can be generated; the trajectory keeps no tokens so it never exceeds the cap.
		ep.end(traj.StatusTruncated, fmt.Sprintf("prompt of %d tokens leaves no room under max_context %d", len(prompt), r.Cfg.MaxContext))
		return true, nil
	}
	if sysLen > 0 && sysLen < len(prompt) {
		ep.append(prompt[:sysLen], traj.RoleSystem)
		ep.append(prompt[sysLen:], traj.RoleUser)
	} else {
		ep.append(prompt, traj.RoleUser)
	}
	return false, nil
}

// turn runs one assistant turn: generate, step the environment, record the observation. done
// reports that the episode ended (err as for Episode).
func (ep *episode) turn(e env.Env, gen infer.Generator, t Task, turn int) (done bool, err error) {
	r, tr, cfg := ep.r, ep.t, &ep.r.Cfg
	if turn >= cfg.MaxTurns {
		ep.end(traj.StatusTruncated, fmt.Sprintf("turn limit %d reached", cfg.MaxTurns))
		return true, nil
	}
	room := cfg.MaxContext - ep.sampleLen()
	if room <= 0 {
		ep.end(traj.StatusTruncated, fmt.Sprintf("context limit %d reached", cfg.MaxContext))
		return true, nil
	}
	stop := ep.b.stop
	req := infer.Request{
		Prompt:    ep.b.tokens[ep.sampleStart:],
		MaxTokens: min(cfg.MaxTokensPerTurn, room),
		Sampling:  cfg.Sampling,
		Stop:      stop,
		Seed:      requestSeed(r.SampleSeed, t, turn),
		Session:   tr.ID, // a router keeps the episode's turns on one server's prefix cache
	}
	ep.lent = true
	comp, err := gen.Generate(ep.ectx, req)
	ep.lap(&tr.Timings.Generate)
	if err != nil {
		return true, ep.fail("generate", err)
	}
	ep.lent = false
	if err := checkCompletion(comp, req.MaxTokens, r.Tok.VocabSize()); err != nil {
		return true, ep.fail("generate", err)
	}
	turnStart := ep.len()
	ep.appendCompletion(comp)
	tu := traj.Turn{Start: turnStart, End: ep.len(), ObsEnd: ep.len()}
	n := len(comp.Tokens)
	actionToks := comp.Tokens
	if n > 0 && slices.Contains(stop, comp.Tokens[n-1]) {
		actionToks = comp.Tokens[:n-1]
	} else {
		// The completion hit a token limit without ending its turn. With room left in the
		// context the turn is closed for it — an end-of-turn token that was not sampled, so it
		// is not trained on — and the environment judges the cut action; otherwise the episode
		// is truncated.
		if ep.sampleLen()+1 > cfg.MaxContext || n < cfg.MaxTokensPerTurn {
			ep.addTurn(tu)
			ep.end(traj.StatusTruncated, fmt.Sprintf("turn %d: context limit %d reached inside a completion", turn, cfg.MaxContext))
			return true, nil
		}
		ep.append(stop[:1], traj.RoleAssistant)
		tu.End, tu.ObsEnd = ep.len(), ep.len()
	}

	action := r.Tok.Decode(actionToks)
	ep.lap(&tr.Timings.Tokenize)
	step, err := e.Step(ep.ectx, action)
	ep.lap(&tr.Timings.Env)
	if err != nil {
		ep.addTurn(tu)
		return true, ep.fail("step", err)
	}
	if math.IsNaN(step.Reward) || math.IsInf(step.Reward, 0) {
		ep.addTurn(tu)
		ep.end(traj.StatusEnvError, fmt.Sprintf("step: environment returned a non-finite reward %v", step.Reward))
		return true, nil
	}
	// The reward of the step that ends the episode is the outcome reward; earlier steps'
	// rewards are per-turn (process) rewards. Each is recorded once.
	if !step.Done {
		tu.Reward = step.Reward
	}
	tu.ToolCalls = step.ToolCalls

	var obsToks []int32
	split := false
	if step.Observation != "" || !step.Done {
		obsToks, split, err = ep.conv.Next(ep.b.tokens[tu.Start:tu.End:tu.End], chatRole(step.Role), step.Observation, step.Done)
		ep.lap(&tr.Timings.Tokenize)
		if err != nil {
			ep.addTurn(tu)
			ep.end(traj.StatusEnvError, fmt.Sprintf("turn %d: render observation: %v", turn, err))
			return true, nil
		}
	}
	if step.Done {
		// The final observation is informative only; keep it when it fits, and when it is a
		// continuation of this sample (a split render would open a sample with nothing to train).
		if !split && ep.sampleLen()+len(obsToks) <= cfg.MaxContext {
			ep.append(obsToks, obsRole(step.Role))
		}
		tu.ObsEnd = ep.len()
		ep.addTurn(tu)
		tr.Reward = step.Reward
		if v, ok := step.Info[env.InfoSuccess]; ok {
			tr.Meta = append(tr.Meta, traj.KV{Key: env.InfoSuccess, Value: v})
		}
		if v, ok := step.Info[env.InfoLevel]; ok {
			tr.Meta = append(tr.Meta, traj.KV{Key: env.InfoLevel, Value: v})
		}
		if why := step.Info[env.InfoTruncated]; why != "" {
			ep.end(traj.StatusTruncated, why)
		} else {
			ep.end(traj.StatusOK, "")
		}
		return true, nil
	}
	if split {
		// The template re-rendered the history: this sample ends with the completion, and the
		// next starts with the full context the policy will be given.
		ep.addTurn(tu)
		if len(obsToks) >= cfg.MaxContext {
			ep.end(traj.StatusTruncated, fmt.Sprintf("turn %d: re-rendered context of %d tokens does not fit in max_context %d", turn, len(obsToks), cfg.MaxContext))
			return true, nil
		}
		ep.split(obsToks, obsRole(step.Role))
		return false, nil
	}
	if ep.sampleLen()+len(obsToks) >= cfg.MaxContext {
		ep.addTurn(tu)
		ep.end(traj.StatusTruncated, fmt.Sprintf("turn %d: observation of %d tokens does not fit in max_context %d", turn, len(obsToks), cfg.MaxContext))
		return true, nil
	}
	ep.append(obsToks, obsRole(step.Role))
	tu.ObsEnd = ep.len()
	ep.addTurn(tu)
	return false, nil
}

// obsRole is the trajectory role of an observation; anything that is not a tool response is
// the environment speaking.
func obsRole(r traj.Role) traj.Role {
	if r == traj.RoleTool {
		return traj.RoleTool
	}
	return traj.RoleEnv
}

// checkCompletion rejects generator output that would corrupt a trajectory.
func checkCompletion(c infer.Completion, maxTokens, vocab int) error {
	n := len(c.Tokens)
	if len(c.Logprobs) != n || len(c.Versions) != n {
		return fmt.Errorf("completion has %d tokens but %d logprobs and %d versions", n, len(c.Logprobs), len(c.Versions))
	}
	if n > maxTokens {
		return fmt.Errorf("completion has %d tokens, more than the %d requested", n, maxTokens)
	}
	for i, id := range c.Tokens {
		if id < 0 || int(id) >= vocab {
			return fmt.Errorf("completion token %d has id %d outside the vocabulary of %d", i, id, vocab)
		}
	}
	// Logprobs are at most 0; allow rounding noise from a log-softmax.
	for i, lp := range c.Logprobs {
		if lp > 1e-4 || math.IsNaN(float64(lp)) || math.IsInf(float64(lp), 0) {
			return fmt.Errorf("completion token %d has invalid logprob %v", i, lp)
		}
	}
	return nil
}

// Succeeded reports whether an episode solved its task: the environment's success flag when it
// gave one, otherwise a positive outcome reward on an episode that ended normally.
func Succeeded(t *traj.Trajectory) bool {
	for _, kv := range t.Meta {
		if kv.Key == env.InfoSuccess {
			return kv.Value == "true"
		}
	}
	return t.Status == traj.StatusOK && t.Reward > 0
}
