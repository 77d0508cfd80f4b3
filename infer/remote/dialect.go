package remote

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/infer/wire"
)

// Dialect is the HTTP API a server speaks.
type Dialect string

const (
	Agentrl Dialect = "agentrl" // agentrl serve's training route
	VLLM    Dialect = "vllm"    // vLLM's OpenAI-compatible completions with token ids
	SGLang  Dialect = "sglang"  // SGLang's native /generate
)

// Server is one inference server.
type Server struct {
	Name    string  `yaml:"name"`
	URL     string  `yaml:"url"` // base URL, e.g. http://10.0.0.5:8000
	Dialect Dialect `yaml:"dialect"`
	// APIKey is sent as a bearer token (empty: none).
	APIKey string `yaml:"-"`
	// Model names the served model in vLLM's requests (its --served-model-name).
	Model string `yaml:"model,omitempty"`
	// ProcessedLogprobs declares that a vLLM or SGLang server returns logprobs after
	// temperature, top-k and top-p (vLLM: --logprobs-mode processed_logprobs). Without it such a
	// server is used only with exact sampling (temperature 1, no top-k or top-p), where raw and
	// processed logprobs are the same.
	ProcessedLogprobs bool `yaml:"processed_logprobs,omitempty"`
	// Precision is the number format a vLLM or SGLang server computes in, float32 or bfloat16
	// (default bfloat16, their usual --dtype for the models RL trains); an agentrl server
	// computes in float32. It sets the tolerance of the weight-sync probe (syncprobe.go).
	Precision string `yaml:"precision,omitempty"`
}

// Precisions a server may declare.
const (
	Float32  = "float32"
	BFloat16 = "bfloat16"
)

// precision is the number format s computes in.
func (s *Server) precision() string {
	switch {
	case s.Precision != "":
		return s.Precision
	case s.Dialect == Agentrl:
		return Float32
	}
	return BFloat16
}

// errProtocol marks a response that breaks the dialect's contract: refused, never retried.
var errProtocol = errors.New("remote: protocol violation")

// dialect encodes requests and decodes responses of one API.
type dialect interface {
	path() string
	// encode appends the body of req to b.
	encode(b []byte, s *Server, req infer.Request) ([]byte, error)
	// accept is the Accept header of its requests (nil: none).
	accept() []string
	// decode reads a 200 response of Content-Type typ; version is the server's last confirmed
	// policy version, for dialects that report none.
	decode(body []byte, typ string, version int32) (infer.Completion, error)
}

func dialectOf(d Dialect) (dialect, error) {
	switch d {
	case Agentrl:
		return agentrlDialect{}, nil
	case VLLM:
		return vllmDialect{}, nil
	case SGLang:
		return sglangDialect{}, nil
	}
	return nil, fmt.Errorf("remote: unknown dialect %q (want agentrl, vllm or sglang)", d)
}

// checkCompletion refuses what would corrupt a trajectory: per-token slices of other lengths
// than the tokens (some servers zero-pad silently) and logprobs that are not logprobs.
func checkCompletion(c infer.Completion) error {
	n := len(c.Tokens)
	if len(c.Logprobs) != n || len(c.Versions) != n {
		return fmt.Errorf("%w: %d tokens but %d logprobs and %d versions", errProtocol, n, len(c.Logprobs), len(c.Versions))
	}
	for i, lp := range c.Logprobs {
		if !(lp <= 1e-4) { // NaN fails too
			return fmt.Errorf("%w: token %d has logprob %v", errProtocol, i, lp)
		}
	}
	for i, id := range c.Tokens {
		if id < 0 {
			return fmt.Errorf("%w: token %d has id %d", errProtocol, i, id)
		}
	}
	switch c.Finish {
	case infer.FinishStop, infer.FinishLength:
	default:
		return fmt.Errorf("%w: finish reason %q", errProtocol, c.Finish)
	}
	return nil
}

// appendJSON appends v as json.Marshal writes it.
func appendJSON(b []byte, v any) ([]byte, error) {
	out, err := json.Marshal(v)
	return append(b, out...), err
}

// sameVersion is n copies of v.
func sameVersion(n int, v int32) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// agentrlDialect is agentrl serve's training route: the contract itself, as JSON.
type agentrlDialect struct{}

func (agentrlDialect) path() string { return "/agentrl/v1/generate" }

func (agentrlDialect) encode(b []byte, _ *Server, req infer.Request) ([]byte, error) {
	return wire.AppendRequest(b, req)
}

// accept asks for wire's binary completion form: its logprobs are their bits, where JSON's
// decimals cost microseconds a token at both ends. A server that does not know the form answers
// JSON, which decode reads as well.
func (agentrlDialect) accept() []string { return binaryAccept }

var binaryAccept = []string{wire.BinaryType + ", application/json;q=0.9"}

// decode reads the binary form, the usual JSON shape with wire.ReadCompletion and any other JSON
// with encoding/json.
func (agentrlDialect) decode(body []byte, typ string, _ int32) (infer.Completion, error) {
	if mt, _, _ := strings.Cut(typ, ";"); strings.EqualFold(strings.TrimSpace(mt), wire.BinaryType) {
		c, err := wire.ReadBinaryCompletion(body)
		if err != nil {
			return c, fmt.Errorf("%w: %v", errProtocol, err)
		}
		return c, checkCompletion(c)
	}
	c, ok := wire.ReadCompletion(body)
	if !ok {
		c = infer.Completion{}
		if err := json.Unmarshal(body, &c); err != nil {
			return c, fmt.Errorf("%w: %v", errProtocol, err)
		}
	}
	return c, checkCompletion(c)
}

// vllmDialect is vLLM's /v1/completions with the prompt as token ids. logprobs 0 asks for the
// sampled token's logprob only; return_token_ids gives the completion's ids (vLLM ≥ 0.10.2), and
// return_tokens_as_token_ids makes the logprob entries name their ids ("token_id:N"), which is
// checked against them.
type vllmDialect struct{}

func (vllmDialect) path() string { return "/v1/completions" }

type vllmRequest struct {
	Model                  string  `json:"model"`
	Prompt                 []int32 `json:"prompt"`
	MaxTokens              int     `json:"max_tokens"`
	Temperature            float32 `json:"temperature"`
	TopP                   float32 `json:"top_p"`
	TopK                   int     `json:"top_k"`
	Seed                   uint64  `json:"seed"`
	StopTokenIDs           []int32 `json:"stop_token_ids,omitempty"`
	Logprobs               int     `json:"logprobs"`
	ReturnTokenIDs         bool    `json:"return_token_ids"`
	ReturnTokensAsTokenIDs bool    `json:"return_tokens_as_token_ids"`
	SkipSpecialTokens      bool    `json:"skip_special_tokens"`
	Stream                 bool    `json:"stream"`
}

func (vllmDialect) encode(b []byte, s *Server, req infer.Request) ([]byte, error) {
	topP, topK := req.Sampling.TopP, req.Sampling.TopK
	if topP == 0 {
		topP = 1 // off
	}
	if topK == 0 {
		topK = -1 // off
	}
	return appendJSON(b, vllmRequest{
		Model: s.Model, Prompt: req.Prompt, MaxTokens: req.MaxTokens,
		Temperature: req.Sampling.Temperature, TopP: topP, TopK: topK, Seed: req.Seed,
		StopTokenIDs: req.Stop, Logprobs: 0, ReturnTokenIDs: true, ReturnTokensAsTokenIDs: true,
	})
}

type vllmResponse struct {
	Choices []struct {
		TokenIDs *[]int32 `json:"token_ids"`
		Logprobs *struct {
			Tokens        []string   `json:"tokens"`
			TokenLogprobs []*float32 `json:"token_logprobs"`
		} `json:"logprobs"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
}

func (vllmDialect) accept() []string { return nil }

func (vllmDialect) decode(body []byte, _ string, version int32) (infer.Completion, error) {
	var r vllmResponse
	var c infer.Completion
	if err := json.Unmarshal(body, &r); err != nil {
		return c, fmt.Errorf("%w: %v", errProtocol, err)
	}
	if len(r.Choices) != 1 {
		return c, fmt.Errorf("%w: %d choices, want 1", errProtocol, len(r.Choices))
	}
	ch := r.Choices[0]
	if ch.TokenIDs == nil {
		return c, fmt.Errorf("%w: no token_ids (vLLM older than 0.10.2 ignores return_token_ids)", errProtocol)
	}
	if ch.Logprobs == nil {
		return c, fmt.Errorf("%w: no logprobs", errProtocol)
	}
	c.Tokens = *ch.TokenIDs
	if len(ch.Logprobs.TokenLogprobs) != len(c.Tokens) {
		return c, fmt.Errorf("%w: %d tokens but %d logprobs", errProtocol, len(c.Tokens), len(ch.Logprobs.TokenLogprobs))
	}
	c.Logprobs = make([]float32, len(c.Tokens))
	for i, lp := range ch.Logprobs.TokenLogprobs {
		if lp == nil {
			return c, fmt.Errorf("%w: token %d has no logprob", errProtocol, i)
		}
		c.Logprobs[i] = *lp
	}
	if t := ch.Logprobs.Tokens; t != nil {
		if len(t) != len(c.Tokens) {
			return c, fmt.Errorf("%w: %d tokens but %d logprob entries", errProtocol, len(c.Tokens), len(t))
		}
		for i, s := range t {
			id, err := strconv.ParseInt(strings.TrimPrefix(s, "token_id:"), 10, 32)
			if err != nil || !strings.HasPrefix(s, "token_id:") || int32(id) != c.Tokens[i] {
				return c, fmt.Errorf("%w: logprob entry %d is %q, token id %d", errProtocol, i, s, c.Tokens[i])
			}
		}
	}
	if ch.FinishReason == nil {
		return c, fmt.Errorf("%w: no finish_reason", errProtocol)
	}
	c.Finish = infer.FinishReason(*ch.FinishReason)
	c.Versions = sameVersion(len(c.Tokens), version)
	return c, checkCompletion(c)
}

// sglangDialect is SGLang's native /generate with input ids.
type sglangDialect struct{}

func (sglangDialect) path() string { return "/generate" }

type sglangRequest struct {
	InputIDs       []int32        `json:"input_ids"`
	SamplingParams sglangSampling `json:"sampling_params"`
	ReturnLogprob  bool           `json:"return_logprob"`
	Stream         bool           `json:"stream"`
}

type sglangSampling struct {
	MaxNewTokens int     `json:"max_new_tokens"`
	Temperature  float32 `json:"temperature"`
	TopP         float32 `json:"top_p"`
	TopK         int     `json:"top_k"`
	StopTokenIDs []int32 `json:"stop_token_ids,omitempty"`
	SamplingSeed uint64  `json:"sampling_seed"`
	// SkipSpecialTokens false keeps the stop token in the output, as infer.Completion does.
	SkipSpecialTokens bool `json:"skip_special_tokens"`
}

func (sglangDialect) encode(b []byte, _ *Server, req infer.Request) ([]byte, error) {
	topP, topK := req.Sampling.TopP, req.Sampling.TopK
	if topP == 0 {
		topP = 1
	}
	if topK == 0 {
		topK = -1
	}
	return appendJSON(b, sglangRequest{
		InputIDs: req.Prompt,
		SamplingParams: sglangSampling{
			MaxNewTokens: req.MaxTokens, Temperature: req.Sampling.Temperature, TopP: topP, TopK: topK,
			StopTokenIDs: req.Stop, SamplingSeed: req.Seed,
		},
		ReturnLogprob: true,
	})
}

type sglangResponse struct {
	OutputIDs []int32 `json:"output_ids"`
	MetaInfo  *struct {
		OutputTokenLogprobs [][]json.RawMessage `json:"output_token_logprobs"`
		FinishReason        *struct {
			Type string `json:"type"`
		} `json:"finish_reason"`
		WeightVersion json.RawMessage `json:"weight_version"`
	} `json:"meta_info"`
}

func (sglangDialect) accept() []string { return nil }

func (sglangDialect) decode(body []byte, _ string, version int32) (infer.Completion, error) {
	var r sglangResponse
	var c infer.Completion
	if err := json.Unmarshal(body, &r); err != nil {
		return c, fmt.Errorf("%w: %v", errProtocol, err)
	}
	m := r.MetaInfo
	if m == nil || m.OutputTokenLogprobs == nil {
		return c, fmt.Errorf("%w: no meta_info.output_token_logprobs (was return_logprob honoured?)", errProtocol)
	}
	for i, e := range m.OutputTokenLogprobs {
		if len(e) < 2 {
			return c, fmt.Errorf("%w: output_token_logprobs[%d] has %d fields, want [logprob, id, text]", errProtocol, i, len(e))
		}
		var lp *float32
		var id int32
		if err := json.Unmarshal(e[0], &lp); err != nil || lp == nil {
			return c, fmt.Errorf("%w: output_token_logprobs[%d] logprob %s", errProtocol, i, e[0])
		}
		if err := json.Unmarshal(e[1], &id); err != nil {
			return c, fmt.Errorf("%w: output_token_logprobs[%d] id %s", errProtocol, i, e[1])
		}
		c.Tokens = append(c.Tokens, id)
		c.Logprobs = append(c.Logprobs, *lp)
	}
	if r.OutputIDs != nil && !slices.Equal(r.OutputIDs, c.Tokens) {
		return c, fmt.Errorf("%w: output_ids %v differ from the logprobs' ids %v", errProtocol, r.OutputIDs, c.Tokens)
	}
	if m.FinishReason == nil {
		return c, fmt.Errorf("%w: no finish_reason", errProtocol)
	}
	switch m.FinishReason.Type {
	case "stop":
		c.Finish = infer.FinishStop
	case "length":
		c.Finish = infer.FinishLength
	default:
		return c, fmt.Errorf("%w: finish reason %q", errProtocol, m.FinishReason.Type)
	}
	if v, ok := parseVersion(m.WeightVersion); ok {
		version = v
	}
	c.Versions = sameVersion(len(c.Tokens), version)
	return c, checkCompletion(c)
}

// parseVersion reads SGLang's weight_version, a string or a number; "default" and other
// non-numbers are no version.
func parseVersion(raw json.RawMessage) (int32, bool) {
	if len(raw) == 0 {
		return 0, false
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		s = string(raw)
	}
	v, err := strconv.ParseInt(s, 10, 32)
	return int32(v), err == nil
}
