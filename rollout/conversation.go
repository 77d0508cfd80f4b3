package rollout

import (
	"slices"

	"github.com/agentrl/agentrl/tokenizer"
)

// Conversation renders one episode's chat turn by turn into tokens. The loop calls Start once,
// then Next after each assistant completion; one Conversation serves one episode and is not used
// concurrently. A Jinja chat template (package chat) is one implementation; the Runner's default,
// when Runner.NewConversation is nil, is agentrl's ChatML through the tokenizer.
type Conversation interface {
	// Start returns the episode's opening tokens: the optional system message (omitted when
	// system is ""), the user message, and the generation prompt; sysLen is how many of them
	// belong to the system message (0 when none).
	Start(system, user string) (toks []int32, sysLen int, err error)
	// Next is called after each assistant completion. completion is the sampled token ids of
	// the turn (ending with an end-of-turn token when the model emitted one; when the model hit
	// its token limit and the loop closed the turn for it, with the Stop()[0] token the loop
	// appended), role the observation's role ("tool" or "user"), final reports the episode's
	// last observation (no generation prompt follows it). It returns the tokens to append after
	// the completion. When the template is not prefix-stable at this turn (its render of the
	// conversation so far no longer begins with what the policy was given, e.g. Qwen3 dropping
	// earlier <think> blocks), split is true and toks is instead the complete context, rendered
	// from the start, that the policy will see next: the loop closes the current sample and
	// opens a new one with those tokens (never a fabricated sequence). completion is valid for
	// the episode's lifetime and must not be modified.
	Next(completion []int32, role, observation string, final bool) (toks []int32, split bool, err error)
	// Stop returns the token ids that end an assistant turn (the generation stop tokens).
	Stop() []int32
}

// conversation is the Runner's Conversation for one episode: NewConversation's, or the ChatML
// default.
func (r *Runner) conversation() Conversation {
	if r.NewConversation != nil {
		return r.NewConversation()
	}
	return chatML{r.Tok}
}

// chatML is agentrl's fixed ChatML rendering through the tokenizer (EncodePrompt,
// EncodeObservation, EncodeFinal): appending only the new message is exact, so it never splits.
type chatML struct{ tok *tokenizer.Tokenizer }

func (c chatML) Start(system, user string) ([]int32, int, error) {
	prompt := c.tok.EncodePrompt(system, user)
	// The user message starts at the second message-start token (special tokens bound
	// pre-tokenization, so the system message encodes on its own).
	sysLen := 0
	if system != "" {
		if start, ok := c.tok.SpecialID(tokenizer.ImStart); ok {
			if i := slices.Index(prompt[1:], start); i >= 0 {
				sysLen = i + 1
			}
		}
	}
	return prompt, sysLen, nil
}

func (c chatML) Next(_ []int32, role, observation string, final bool) ([]int32, bool, error) {
	if final {
		return c.tok.EncodeFinal(role, observation), false, nil
	}
	return c.tok.EncodeObservation(role, observation), false, nil
}

func (c chatML) Stop() []int32 { return []int32{c.tok.EndOfTurn()} }
