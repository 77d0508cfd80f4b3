package rollout

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/agentrl/agentrl/traj"
)

// The triggers of a fold (ContextConfig.Trigger).
const (
	// TriggerAction: the policy may call the fold tool whenever it chooses.
	TriggerAction = "action"
	// TriggerThreshold: the scaffold asks for a summary when the context passes max_tokens; the
	// fold tool is accepted only once asked (it is not listed in the system prompt).
	TriggerThreshold = "threshold"
	// TriggerBoth: the tool is listed and always accepted, and the scaffold asks past max_tokens.
	TriggerBoth = "both"
)

// Defaults of ContextConfig, used where a field is empty or zero.
const (
	DefaultFoldTool         = "fold"
	DefaultMaxSummaryTokens = 128
)

// ContextConfig turns context folding on (the rollout block's context:). Folding is an action:
// the policy calls a built-in tool (named Tool) whose argument is its own summary of the episode
// so far, {"summary": "..."}; the loop then rebuilds the context as the system prompt, the task
// with the summary appended to it, and the last KeepTurns turns (each assistant completion and
// the observation that answered it), and the episode continues in a new training sample whose
// tokens are exactly that context (traj.Trajectory.Samples, the mechanism a template split uses).
// The turn that folded is trained in the sample it ends, like any other turn, and shares the
// episode's outcome. With a threshold trigger the scaffold appends a request for a summary to
// the observation that takes the context past MaxTokens (the observation's text counted in
// tokens with the tokenizer), and again to each later observation until the policy folds.
//
// A fold whose summary is missing, empty, over MaxSummaryTokens, malformed, or that comes with
// other tool calls in its turn, is answered with an error observation and the context is left
// as it was. nil (the default) is no folding: the loop is exactly as without this block.
type ContextConfig struct {
	// Tool is the fold tool's name ("fold" when empty). The loop handles it before the
	// environment sees the action, so an environment's tool of the same name is shadowed.
	Tool string `yaml:"tool,omitempty"`
	// Trigger is action, threshold or both ("action" when empty).
	Trigger string `yaml:"trigger,omitempty"`
	// MaxTokens is the context length past which the scaffold asks for a summary; required by
	// the threshold triggers, and an error with action (it would do nothing).
	MaxTokens int `yaml:"max_tokens,omitempty"`
	// KeepTurns is how many of the latest turns the folded context keeps verbatim.
	KeepTurns int `yaml:"keep_turns"`
	// MaxSummaryTokens bounds the summary, counted with the tokenizer (128 when 0).
	MaxSummaryTokens int `yaml:"max_summary_tokens,omitempty"`
}

// MaxSamplesPerEpisode bounds the training samples of one episode that folds and delegation
// can make: 1, one more for each fold (at most one a turn after the first) and for each
// sub-episode of the root (which do not fold, and nest within the same budget). Template splits
// are not counted: a Conversation decides those.
func (c Config) MaxSamplesPerEpisode() int {
	n := 1
	if c.Context != nil {
		n += c.MaxTurns - 1
	}
	if c.Delegate != nil {
		n += c.Delegate.perEpisode()
	}
	return n
}

// MaxEpisodeTokens bounds the tokens one episode keeps over all its training samples: max_context
// for the root's first sample and for each fold's (one at most a turn after the first), and each
// sub-episode's max_context (delegate.max_tokens, or max_context) for each sub-episode of the
// root. Without folding and delegation it is max_context. Template splits are not counted, as
// in MaxSamplesPerEpisode.
func (c Config) MaxEpisodeTokens() int64 {
	n := int64(c.MaxContext)
	if c.Context != nil {
		n += int64(c.MaxTurns-1) * int64(c.MaxContext)
	}
	if d := c.Delegate; d != nil {
		sub := d.MaxTokens
		if sub == 0 {
			sub = c.MaxContext
		}
		n += int64(d.perEpisode()) * int64(sub)
	}
	return n
}

var foldToolRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]{0,63}$`)

// Validate reports settings that cannot work with the episode bounds of c.
func (f *ContextConfig) Validate(c Config) error {
	if !foldToolRE.MatchString(f.tool()) {
		return fmt.Errorf("rollout: context.tool %q must be 1-64 letters, digits, '_', '.' or '-', starting with a letter or '_'", f.Tool)
	}
	switch f.trigger() {
	case TriggerAction:
		if f.MaxTokens != 0 {
			return fmt.Errorf("rollout: context.max_tokens %d does nothing with trigger action (use threshold or both)", f.MaxTokens)
		}
	case TriggerThreshold, TriggerBoth:
		if f.MaxTokens < 1 || f.MaxTokens >= c.MaxContext {
			return fmt.Errorf("rollout: context.max_tokens %d must be in [1, max_context %d) with trigger %s", f.MaxTokens, c.MaxContext, f.Trigger)
		}
	default:
		return fmt.Errorf("rollout: context.trigger %q must be action, threshold or both", f.Trigger)
	}
	if f.KeepTurns < 0 || f.KeepTurns >= c.MaxTurns {
		return fmt.Errorf("rollout: context.keep_turns %d must be in [0, max_turns %d)", f.KeepTurns, c.MaxTurns)
	}
	if f.MaxSummaryTokens < 0 || f.MaxSummaryTokens >= c.MaxContext {
		return fmt.Errorf("rollout: context.max_summary_tokens %d must be in [0, max_context %d) (0 means %d)", f.MaxSummaryTokens, c.MaxContext, DefaultMaxSummaryTokens)
	}
	return nil
}

func (f *ContextConfig) tool() string {
	if f.Tool == "" {
		return DefaultFoldTool
	}
	return f.Tool
}

func (f *ContextConfig) trigger() string {
	if f.Trigger == "" {
		return TriggerAction
	}
	return f.Trigger
}

func (f *ContextConfig) maxSummary() int {
	if f.MaxSummaryTokens == 0 {
		return DefaultMaxSummaryTokens
	}
	return f.MaxSummaryTokens
}

// listed reports whether the fold tool is described in the system prompt and accepted unasked.
func (f *ContextConfig) listed() bool { return f.trigger() != TriggerThreshold }

// asks reports whether the scaffold asks for a summary past MaxTokens.
func (f *ContextConfig) asks() bool { return f.trigger() != TriggerAction }

// Trajectory meta keys a folding episode records (only when it folded or was asked to).
const (
	// MetaFolds is the number of folds the episode made.
	MetaFolds = "folds"
	// MetaFoldTokens lists each fold's context length before and after, "312>87,290>91".
	MetaFoldTokens = "fold_tokens"
	// MetaFoldRequests is how many observations carried the scaffold's request for a summary.
	MetaFoldRequests = "fold_requests"
)

// FoldStats summarizes the folding of a set of episodes. Means over no episodes are 0.
type FoldStats struct {
	Episodes int `json:"episodes"`
	// Folded is the number of episodes that folded at least once; Folds the folds in all.
	Folded int `json:"folded"`
	Folds  int `json:"folds"`
	// FoldsPerEpisode is the mean number of folds over all episodes.
	FoldsPerEpisode float64 `json:"folds_per_episode"`
	// TokensBefore and TokensAfter are the mean context lengths at a fold and right after it.
	TokensBefore float64 `json:"tokens_before"`
	TokensAfter  float64 `json:"tokens_after"`
	// RequestsPerEpisode is the mean number of the scaffold's requests for a summary.
	RequestsPerEpisode float64 `json:"requests_per_episode"`
	// SuccessFolded and SuccessUnfolded are the success rates (Succeeded) of the episodes that
	// folded and of those that did not; 0 where there are none.
	SuccessFolded   float64 `json:"success_folded"`
	SuccessUnfolded float64 `json:"success_unfolded"`
}

// Folds returns the context lengths before and after each fold t records (MetaFoldTokens), and
// the number of the scaffold's requests (MetaFoldRequests). Entries it cannot read are skipped.
func Folds(t *traj.Trajectory) (folds [][2]int, requests int) {
	for _, kv := range t.Meta {
		switch kv.Key {
		case MetaFoldTokens:
			for _, p := range strings.Split(kv.Value, ",") {
				b, a, ok := strings.Cut(p, ">")
				if !ok {
					continue
				}
				bi, err1 := strconv.Atoi(b)
				ai, err2 := strconv.Atoi(a)
				if err1 == nil && err2 == nil {
					folds = append(folds, [2]int{bi, ai})
				}
			}
		case MetaFoldRequests:
			if n, err := strconv.Atoi(kv.Value); err == nil {
				requests = n
			}
		}
	}
	return folds, requests
}

// MeasureFolds computes FoldStats over ts.
func MeasureFolds(ts []*traj.Trajectory) FoldStats {
	s := FoldStats{Episodes: len(ts)}
	var folds, reqs, before, after, succF, succU int
	for _, t := range ts {
		fs, r := Folds(t)
		reqs += r
		folds += len(fs)
		for _, f := range fs {
			before += f[0]
			after += f[1]
		}
		ok := Succeeded(t)
		if len(fs) > 0 {
			s.Folded++
			if ok {
				succF++
			}
		} else if ok {
			succU++
		}
	}
	s.Folds = folds
	if n := len(ts); n > 0 {
		s.FoldsPerEpisode = float64(folds) / float64(n)
		s.RequestsPerEpisode = float64(reqs) / float64(n)
	}
	if folds > 0 {
		s.TokensBefore = float64(before) / float64(folds)
		s.TokensAfter = float64(after) / float64(folds)
	}
	if s.Folded > 0 {
		s.SuccessFolded = float64(succF) / float64(s.Folded)
	}
	if u := len(ts) - s.Folded; u > 0 {
		s.SuccessUnfolded = float64(succU) / float64(u)
	}
	return s
}

// Metrics names s's figures under prefix ("rollout/" for training, "eval/<env>/" for
// evaluation): context_folds_per_episode, context_folded_episodes, context_tokens_before_fold,
// context_tokens_after_fold, context_fold_requests_per_episode, context_success_folded,
// context_success_unfolded.
func (s FoldStats) Metrics(prefix string) map[string]float64 {
	return map[string]float64{
		prefix + "context_folds_per_episode":         s.FoldsPerEpisode,
		prefix + "context_folded_episodes":           float64(s.Folded),
		prefix + "context_tokens_before_fold":        s.TokensBefore,
		prefix + "context_tokens_after_fold":         s.TokensAfter,
		prefix + "context_fold_requests_per_episode": s.RequestsPerEpisode,
		prefix + "context_success_folded":            s.SuccessFolded,
		prefix + "context_success_unfolded":          s.SuccessUnfolded,
	}
}
