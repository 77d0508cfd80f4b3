package serve

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"

	"github.com/agentrl/agentrl/infer"
)

// Bounds on what one request may ask for.
const (
	maxPrompts    = 64 // prompts in one completions request
	maxN          = 16 // choices per prompt
	maxStops      = 16 // stop strings
	maxStopBytes  = 256
	maxLogprobs   = 20 // top logprobs per token
	maxStopTokens = 64
	// maxTemperature bounds temperature on every route: above it sampling is uniform noise, and
	// a huge value (1e30) only hides a client's mistake.
	maxTemperature = 100
)

// sampleParams are the sampling fields the OpenAI routes share.
type sampleParams struct {
	Temperature  *float64        `json:"temperature"`
	TopP         *float64        `json:"top_p"`
	TopK         *int            `json:"top_k"` // vLLM extension; 0 or -1: off
	Seed         *int64          `json:"seed"`
	Stop         json.RawMessage `json:"stop"`           // a string or a list of strings
	StopTokenIDs []int64         `json:"stop_token_ids"` // vLLM extension
	IgnoreEOS    bool            `json:"ignore_eos"`     // vLLM extension: no default stop tokens
	N            *int            `json:"n"`
	Stream       bool            `json:"stream"`
	StreamOpts   *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	PresencePenalty  *float64        `json:"presence_penalty"`
	FrequencyPenalty *float64        `json:"frequency_penalty"`
	LogitBias        map[string]any  `json:"logit_bias"`
	ResponseFormat   json.RawMessage `json:"response_format"`

	// vLLM extensions for RL stacks.
	ReturnTokenIDs         bool `json:"return_token_ids"`
	ReturnTokensAsTokenIDs bool `json:"return_tokens_as_token_ids"`
}

// sampling reads temperature, top_p and top_k (OpenAI defaults: 1, 1, off).
func (p *sampleParams) sampling() (infer.Sampling, error) {
	s := infer.Sampling{Temperature: 1}
	if p.Temperature != nil {
		if !finite(*p.Temperature) || *p.Temperature < 0 || *p.Temperature > maxTemperature {
			return s, badRequest("temperature", "temperature must be a number in [0, %d], got %v", maxTemperature, *p.Temperature)
		}
		s.Temperature = float32(*p.Temperature)
	}
	if p.TopP != nil {
		if !finite(*p.TopP) || *p.TopP <= 0 || *p.TopP > 1 {
			return s, badRequest("top_p", "top_p must be in (0, 1], got %v", *p.TopP)
		}
		s.TopP = float32(*p.TopP)
	}
	if p.TopK != nil {
		switch k := *p.TopK; {
		case k == -1 || k == 0:
		case k > 0:
			s.TopK = k
		default:
			return s, badRequest("top_k", "top_k must be -1 or 0 (off) or positive, got %d", k)
		}
	}
	for _, f := range []struct {
		name string
		v    *float64
	}{{"presence_penalty", p.PresencePenalty}, {"frequency_penalty", p.FrequencyPenalty}} {
		if f.v != nil && *f.v != 0 {
			return s, unsupported(f.name, "%s is not supported", f.name)
		}
	}
	if len(p.LogitBias) > 0 {
		return s, unsupported("logit_bias", "logit_bias is not supported")
	}
	return s, nil
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// n reads the number of choices per prompt.
func (p *sampleParams) n() (int, error) {
	if p.N == nil {
		return 1, nil
	}
	if *p.N < 1 || *p.N > maxN {
		return 0, badRequest("n", "n must be in [1, %d], got %d", maxN, *p.N)
	}
	return *p.N, nil
}

// seed is the seed of the first generation: the request's, or a random one.
func (p *sampleParams) seed() uint64 {
	if p.Seed != nil {
		return uint64(*p.Seed)
	}
	return rand.Uint64()
}

// stops reads stop strings and stop token ids; defaults are added unless ignore_eos.
func (p *sampleParams) stops(defaults []int32, vocab int) ([]string, []int32, error) {
	var strs []string
	if len(p.Stop) > 0 && !isNull(p.Stop) {
		var one string
		if err := json.Unmarshal(p.Stop, &one); err == nil {
			strs = []string{one}
		} else if err := json.Unmarshal(p.Stop, &strs); err != nil {
			return nil, nil, badRequest("stop", "stop must be a string or a list of strings")
		}
	}
	if len(strs) > maxStops {
		return nil, nil, badRequest("stop", "at most %d stop strings, got %d", maxStops, len(strs))
	}
	for _, s := range strs {
		if s == "" || len(s) > maxStopBytes {
			return nil, nil, badRequest("stop", "a stop string must have 1 to %d bytes", maxStopBytes)
		}
	}
	if len(p.StopTokenIDs) > maxStopTokens {
		return nil, nil, badRequest("stop_token_ids", "at most %d stop token ids, got %d", maxStopTokens, len(p.StopTokenIDs))
	}
	var ids []int32
	if !p.IgnoreEOS {
		ids = append(ids, defaults...)
	}
	for _, id := range p.StopTokenIDs {
		if id < 0 || id >= int64(vocab) {
			return nil, nil, badRequest("stop_token_ids", "stop token id %d is outside the vocabulary of %d", id, vocab)
		}
		ids = append(ids, int32(id))
	}
	return strs, ids, nil
}

// maxTokens reads max_tokens for a prompt of n tokens: an explicit value must fit in the context;
// without one, def (0: all the room left), capped by the room left.
func (s *Server) maxTokens(v *int, param string, n, def int) (int, error) {
	room := s.maxLen - n
	if v == nil {
		if def == 0 || def > room {
			return room, nil
		}
		return def, nil
	}
	if *v < 1 {
		return 0, badRequest(param, "%s must be at least 1, got %d", param, *v)
	}
	if *v > room {
		return 0, badRequest(param, "this model's context is %d tokens; the prompt has %d, so %s may be at most %d, got %d", s.maxLen, n, param, room, *v)
	}
	return *v, nil
}
