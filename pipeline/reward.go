package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/agentrl/agentrl/chat"
	"github.com/agentrl/agentrl/checkpoint"
	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/infer/local"
	"github.com/agentrl/agentrl/infer/remote"
	"github.com/agentrl/agentrl/reward"
	"github.com/agentrl/agentrl/rollout"
	"github.com/agentrl/agentrl/tokenizer"
	"github.com/agentrl/agentrl/traj"
)

// rewardShapers holds the run's reward shapers, built at first use per phase and environment,
// and the judges' own engines and routers.
type rewardShapers struct {
	mu      sync.Mutex
	shapers map[string]*envShaper // by phase/env
	closers []func() error
}

// envShaper is one environment's shaper and the judge it uses.
type envShaper struct {
	*reward.Shaper
	judge *textGen // nil without a judge
}

func (s *rewardShapers) close() error {
	if s == nil {
		return nil
	}
	var errs []error
	for _, c := range s.closers {
		errs = append(errs, c())
	}
	return errors.Join(errs...)
}

// shaperFor returns the shaper of env in phase p (nil when it has no reward block). policy is
// the generator that samples the phase, the judge of generator: policy.
func (r *Run) shaperFor(p config.Phase, env string, policy infer.Generator) (*envShaper, error) {
	var rc *config.RewardConfig
	for _, e := range p.Envs {
		if e.Name == env {
			rc = e.Reward
		}
	}
	if rc == nil {
		return nil, nil
	}
	if r.rewards == nil {
		r.rewards = &rewardShapers{} // outside Train (a test driving a phase), closed by nobody
	}
	s := r.rewards
	s.mu.Lock()
	defer s.mu.Unlock()
	key := p.Name + "/" + env
	if sh, ok := s.shapers[key]; ok {
		return sh, nil // a phase samples with one generator from its first step to its last
	}
	sh := &envShaper{}
	var judge *reward.Judge
	weight := 0.0
	if j := rc.Judge; j != nil {
		tg, err := r.judgeGenerator(j, policy)
		if err != nil {
			return nil, fmt.Errorf("reward.judge of %s: %w", env, err)
		}
		if judge, err = reward.NewJudge(tg, j.JudgeConfig); err != nil {
			return nil, err
		}
		sh.judge, weight = tg, j.Weight
	}
	shaper, err := reward.NewShaper(rc.Config, r.Cfg.Rollout.MaxContext, judge, weight)
	if err != nil {
		return nil, err
	}
	sh.Shaper = shaper
	if s.shapers == nil {
		s.shapers = map[string]*envShaper{}
	}
	s.shapers[key] = sh
	return sh, nil
}

// judgeGenerator makes the text generator of a judge block.
func (r *Run) judgeGenerator(j *config.JudgeConfig, policy infer.Generator) (*textGen, error) {
	tg := &textGen{tok: r.tok, conv: r.chat.NewConversation, maxTokens: j.MaxTokens, maxLen: r.Cfg.Rollout.MaxContext}
	switch j.Generator {
	case config.JudgePolicy:
		tg.gen = policy
	case config.JudgeCheckpoint:
		ck, err := checkpoint.Load(j.Checkpoint)
		if err != nil {
			return nil, err
		}
		eng, err := local.NewEngine(ck.Model, 0, local.EngineConfig{Slots: min(r.Cfg.Rollout.EngineSlots, 64), MaxLen: ck.Model.Cfg.MaxSeq})
		if err != nil {
			return nil, err
		}
		r.rewards.closers = append(r.rewards.closers, eng.Close)
		tg.gen, tg.tok, tg.maxLen = eng, ck.Tokenizer, ck.Model.Cfg.MaxSeq
		if tg.conv, err = judgeChat(tg.tok); err != nil {
			return nil, err
		}
	case config.JudgeRemote:
		opts, err := j.Remote.Options()
		if err != nil {
			return nil, err
		}
		router, err := remote.New(opts)
		if err != nil {
			return nil, err
		}
		r.rewards.closers = append(r.rewards.closers, router.Close)
		tg.gen, tg.maxLen = router, 0
		if j.Checkpoint != "" {
			if tg.tok, err = tokenizer.Load(j.Checkpoint); err != nil {
				return nil, err
			}
			if tg.conv, err = judgeChat(tg.tok); err != nil {
				return nil, err
			}
		}
		// The judge's servers are probed as the policy's are; the shortest context any of them
		// reports bounds the judge's prompts.
		ids, stop, err := tg.prompt("1+1")
		if err != nil {
			return nil, fmt.Errorf("judge: %w", err)
		}
		probe := infer.Request{Prompt: ids, Stop: stop}
		infos, err := router.Probe(context.Background(), remote.ProbeOptions{Request: probe})
		if err != nil {
			return nil, fmt.Errorf("judge: %w", err)
		}
		for _, info := range infos {
			if info.Unreachable != nil {
				r.printf("warning: judge server ejected at start: %v\n", info.Unreachable)
			} else if info.MaxContext > 0 && (tg.maxLen == 0 || info.MaxContext < tg.maxLen) {
				tg.maxLen = info.MaxContext
			}
		}
	default:
		return nil, fmt.Errorf("unknown generator %q", j.Generator)
	}
	return tg, nil
}

// textGen adapts a token generator to the judge's reward.TextGenerator: the rubric is the user
// message of a chat prompt, decoded greedily to the end of the assistant's turn.
type textGen struct {
	gen       infer.Generator
	tok       *tokenizer.Tokenizer
	conv      func() rollout.Conversation // the judge model's chat template; nil: ChatML
	maxTokens int
	maxLen    int // the generator's longest sequence (0: not known here; the server refuses)
}

// Complete implements reward.TextGenerator.
func (g *textGen) Complete(ctx context.Context, prompt string) (string, error) {
	ids, stop, err := g.prompt(prompt)
	if err != nil {
		return "", err
	}
	n := g.maxTokens
	if g.maxLen > 0 {
		if n = min(n, g.maxLen-len(ids)); n < 1 {
			return "", fmt.Errorf("the judge's prompt of %d tokens leaves no room to answer in %d", len(ids), g.maxLen)
		}
	}
	comp, err := g.gen.Generate(ctx, infer.Request{Prompt: ids, MaxTokens: n, Stop: stop})
	if err != nil {
		return "", err
	}
	out := comp.Tokens
	if k := len(out); k > 0 && slices.Contains(stop, out[k-1]) {
		out = out[:k-1]
	}
	return g.tok.Decode(out), nil
}

// shapeRewards rescores the trajectories of a step with their environments' reward blocks (those
// without one are left as they are); step is the phase's 0-based step, gen the generator that
// sampled it. Episodes are scored concurrently, up to the engine's slots at once.
func (r *Run) shapeRewards(ctx context.Context, gen infer.Generator, p config.Phase, step int, trajs []*traj.Trajectory) error {
	type job struct {
		t  *traj.Trajectory
		sh *envShaper
	}
	var jobs []job
	for _, t := range trajs {
		sh, err := r.shaperFor(p, t.Env, gen)
		if err != nil {
			return err
		}
		if sh != nil {
			jobs = append(jobs, job{t, sh})
		}
	}
	if len(jobs) == 0 {
		return nil
	}
	sem := make(chan struct{}, max(1, r.Cfg.Rollout.EngineSlots))
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			errs[i] = j.sh.Apply(ctx, j.t, episodeText(r.tok, r.chat.Renderer, j.t), step)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// episodeText decodes what a text reward reads of t: the first user message and the final
// assistant turn (without its end-of-turn token), through the run's chat template when it has
// one (rd; nil for agentrl's ChatML).
func episodeText(tok *tokenizer.Tokenizer, rd *chat.Renderer, t *traj.Trajectory) reward.Episode {
	var ep reward.Episode
	lo := -1
	for i, role := range t.Roles {
		if role == traj.RoleUser && lo < 0 {
			lo = i
		}
		if lo >= 0 && role != traj.RoleUser {
			ep.Prompt = userText(tok, t.Tokens[lo:i])
			if rd != nil {
				ep.Prompt, _ = rd.LastMessage(tok.Decode(t.Tokens[lo:i]))
			}
			break
		}
	}
	if n := len(t.Turns); n > 0 {
		tu := t.Turns[n-1]
		ids := t.Tokens[tu.Start:tu.End]
		stop := []int32{tok.EndOfTurn()}
		if rd != nil {
			stop = rd.Stop()
		}
		if k := len(ids); k > 0 && slices.Contains(stop, ids[k-1]) {
			ids = ids[:k-1]
		}
		ep.Response = tok.Decode(ids)
	}
	return ep
}

// userText is the content of an encoded user message (with the generation prompt after it, as
// a trajectory's prompt holds it): the chat template's framing removed.
func userText(tok *tokenizer.Tokenizer, ids []int32) string {
	s := tok.Decode(ids)
	s = strings.TrimPrefix(s, tokenizer.ImStart+"user\n")
	if i := strings.LastIndex(s, tokenizer.ImEnd); i >= 0 {
		s = s[:i]
	}
	return s
}

// rewardMetrics summarizes the reward parts recorded on a step's trajectories, per environment:
// the mean unweighted score of each part ("reward/<env>/format"), the progressive outcome weight,
// and how many judgements fell back (unparseable, timeout) or failed (error). Nil when no
// trajectory was rescored, so runs without reward blocks log what they always logged.
func rewardMetrics(trajs []*traj.Trajectory) map[string]float64 {
	sums := map[string]float64{}
	counts := map[string]int{}
	for _, t := range trajs {
		for _, kv := range t.Meta {
			name, ok := strings.CutPrefix(kv.Key, "reward/")
			if !ok {
				continue
			}
			base := "reward/" + t.Env + "/"
			if kv.Key == reward.MetaJudgeVerdict {
				sums[base+"judge_"+kv.Value]++
				continue
			}
			v, err := strconv.ParseFloat(kv.Value, 64)
			if err != nil {
				continue
			}
			sums[base+name] += v
			counts[base+name]++
		}
	}
	if len(sums) == 0 {
		return nil
	}
	out := make(map[string]float64, len(sums))
	keys := make([]string, 0, len(sums))
	for k := range sums {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if n := counts[k]; n > 0 {
			out[k] = sums[k] / float64(n)
		} else {
			out[k] = sums[k] // a count
		}
	}
	// Counters are always present once a judge is configured, zero included.
	for k := range out {
		if strings.HasSuffix(k, "/judge") {
			base := strings.TrimSuffix(k, "judge")
			for _, v := range []string{"unparseable", "timeout", "error"} {
				if _, ok := out[base+"judge_"+v]; !ok {
					out[base+"judge_"+v] = 0
				}
			}
		}
	}
	return out
}
