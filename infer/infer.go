// Package infer is the generation contract: a Request of token ids in, a Completion of token ids,
// their logprobs and policy versions out, the Sampling settings (validated here and nowhere else)
// and the Generator interface that rollout drives. It holds no implementation and imports no
// model; the local batched engine over the built-in model is in infer/local.
package infer

import (
	"context"
	"errors"
)

// ErrNonFinite is wrapped by a Generator's error when the policy itself produced NaN or infinite
// logits: its weights are broken, so no request can succeed. It is a failure of the policy, not
// of a request or an environment: the rollout loop returns it instead of recording an episode
// status, and a training run stops on it.
var ErrNonFinite = errors.New("policy produced non-finite logits")

// FinishReason says why a completion stopped.
type FinishReason string

const (
	FinishStop   FinishReason = "stop"   // a stop token was sampled (it is included in Tokens)
	FinishLength FinishReason = "length" // MaxTokens reached or the context is full
)

// Sampling is how tokens are drawn.
type Sampling struct {
	Temperature float32 `json:"temperature"` // 0 means greedy
	TopK        int     `json:"top_k"`       // 0 means off
	TopP        float32 `json:"top_p"`       // 0 or 1 means off
}

// Request is one generation.
type Request struct {
	Prompt    []int32  `json:"prompt"`
	MaxTokens int      `json:"max_tokens"`
	Sampling  Sampling `json:"sampling"`
	Stop      []int32  `json:"stop"` // token ids that end the completion
	Seed      uint64   `json:"seed"`
	// Session groups the requests of one episode so that a router can send them to the same
	// server, whose prefix cache then holds the episode's history. It does not change sampling.
	Session string `json:"session,omitempty"`
}

// Completion is the generated continuation. Per-token slices have len(Tokens).
type Completion struct {
	Tokens []int32 `json:"tokens"`
	// Logprobs are under the distribution actually sampled from (after temperature, top-k, top-p).
	Logprobs []float32 `json:"logprobs"`
	// Versions is the policy version of the weights that produced each token; it changes
	// mid-completion when new weights are loaded between decode steps.
	Versions []int32      `json:"versions"`
	Finish   FinishReason `json:"finish"`
}

// Generator produces completions. Implementations are safe for concurrent use.
type Generator interface {
	Generate(ctx context.Context, req Request) (Completion, error)
}
