// Package tinkerfake is a Tinker API service over the built-in model, for tests of learn/tinker
// and of runs with `learner: {backend: tinker}`: it speaks the routes, bodies and futures that
// learn/tinker/testdata documents (SkyRL's open-source server and Tinker's types), and computes
// for real. Each created model is the base model with a LoRA adapter of the asked rank (zero
// at the start, as Tinker's); forward and forward_backward run learn.Builtin over it with
// cross_entropy's loss −Σ weight·logprob, optim_step steps AdamW with the adam_params sent,
// save_weights and load_weights keep and restore the adapter and the optimizer's moments under
// tinker://<model_id>/weights/<name>, save_weights_for_sampler freezes a copy under
// tinker://<model_id>/sampler_weights/<name>, and asample decodes from such a copy with the
// local engine (infer/local), tokens and logprobs.
//
// Faults are injected through the Service's fields: futures that stay pending, routes that never
// answer, futures that fail, sample results rewritten.
package tinkerfake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/infer/local"
	"github.com/agentrl/agentrl/learn"
	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/optim"
)

// Service is the fake. Set its fields before serving; the fault fields may change while it
// serves, under Lock.
type Service struct {
	Base        *model.Model // the base model every created model starts from (not modified)
	BaseModel   string       // its name, which create_model must ask for
	TokenizerID string       // get_info's model_data.tokenizer_id ("" leaves it out, as SkyRL's server does)
	// Slots is how many samples the engine of a sampler copy decodes together (default 16).
	Slots int

	sync.Mutex
	// Pending makes retrieve_future answer 408 this many times (in all) before it answers.
	Pending int
	// Hang names routes ("/api/v1/asample") that never answer: they wait for the caller to give up.
	Hang map[string]bool
	// Fail names routes whose futures fail, with the detail given.
	Fail map[string]string
	// Sample, when set, rewrites each asample result before it is stored.
	Sample func(res map[string]any) map[string]any
	// Calls lists the routes called, in order.
	Calls []string
	// Samples counts asample calls by model_path.
	Samples map[string]int

	sessions int
	models   map[string]*trained
	weights  map[string]*saved
	samplers map[string]*sampler
	futures  map[string]result
	next     int
}

type trained struct {
	m     *model.Model
	b     *learn.Builtin
	opt   *optim.AdamW
	adam  optim.Config
	steps int64
}

type saved struct {
	params []float32
	opt    optim.State
	adam   optim.Config
	hasOpt bool
	steps  int64
}

type sampler struct {
	m    *model.Model
	once sync.Once
	eng  *local.Engine
	err  error
}

type result struct {
	v   any
	err error
}

// Close stops the engines of the sampler copies.
func (s *Service) Close() {
	s.Lock()
	defer s.Unlock()
	for _, sm := range s.samplers {
		if sm.eng != nil {
			sm.eng.Close()
		}
	}
}

// Steps is how many optimizer updates model id has applied.
func (s *Service) Steps(id string) int64 {
	s.Lock()
	defer s.Unlock()
	if t := s.models[id]; t != nil {
		return t.steps
	}
	return -1
}

func (s *Service) future(v any, err error) map[string]any {
	s.next++
	id := fmt.Sprint(s.next)
	if s.futures == nil {
		s.futures = map[string]result{}
	}
	s.futures[id] = result{v, err}
	return map[string]any{"future_id": id, "status": "pending", "request_id": id}
}

type httpErr struct {
	code int
	msg  string
}

func (e *httpErr) Error() string { return e.msg }

func reply(w http.ResponseWriter, v any, err error) {
	var he *httpErr
	if errors.As(err, &he) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(he.code)
		json.NewEncoder(w).Encode(map[string]any{"detail": he.msg})
		return
	}
	if err != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		json.NewEncoder(w).Encode(map[string]any{"detail": err.Error()})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// ServeHTTP implements http.Handler.
func (s *Service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	route := r.URL.Path
	s.Lock()
	s.Calls = append(s.Calls, route)
	hang := s.Hang[route]
	s.Unlock()
	var body map[string]json.RawMessage
	err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<20)).Decode(&body)
	if hang { // the body is read, so the server notices when the caller gives up
		io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
		return
	}
	if err != nil {
		reply(w, nil, &httpErr{http.StatusUnprocessableEntity, "body: " + err.Error()})
		return
	}
	if route == "/api/v1/asample" {
		v, err := s.sample(r.Context(), body)
		s.Lock()
		defer s.Unlock()
		if err == nil {
			if f := s.Fail[route]; f != "" {
				err = errors.New(f)
			}
		}
		var he *httpErr
		if errors.As(err, &he) {
			reply(w, nil, err)
			return
		}
		reply(w, s.future(v, err), nil)
		return
	}
	s.Lock()
	defer s.Unlock()
	v, err := s.handle(route, body)
	reply(w, v, err)
}

func field[T any](body map[string]json.RawMessage, key string) (T, error) {
	var v T
	raw, ok := body[key]
	if !ok {
		return v, &httpErr{http.StatusUnprocessableEntity, "missing field " + key}
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return v, &httpErr{http.StatusUnprocessableEntity, key + ": " + err.Error()}
	}
	return v, nil
}

// handle serves every route but asample, under the lock.
func (s *Service) handle(route string, body map[string]json.RawMessage) (any, error) {
	if s.models == nil {
		s.models, s.weights, s.samplers = map[string]*trained{}, map[string]*saved{}, map[string]*sampler{}
	}
	if route == "/api/v1/create_session" {
		s.sessions++
		return map[string]any{"type": "create_session", "info_message": nil, "warning_message": nil, "error_message": nil,
			"session_id": fmt.Sprintf("session_%08x", s.sessions)}, nil
	}
	if route == "/api/v1/session_heartbeat" {
		id, err := field[string](body, "session_id")
		if err != nil {
			return nil, err
		}
		var n int
		if _, err := fmt.Sscanf(id, "session_%08x", &n); err != nil || n < 1 || n > s.sessions {
			return nil, &httpErr{http.StatusNotFound, "Session not found"}
		}
		return map[string]any{"type": "session_heartbeat"}, nil
	}
	if route == "/api/v1/retrieve_future" {
		id, err := field[string](body, "request_id")
		if err != nil {
			return nil, err
		}
		if s.Pending > 0 {
			s.Pending--
			return nil, &httpErr{http.StatusRequestTimeout, "Timeout waiting for result"}
		}
		res, ok := s.futures[id]
		if !ok {
			return nil, &httpErr{http.StatusNotFound, "Future not found"}
		}
		if res.err != nil {
			return nil, &httpErr{http.StatusBadRequest, res.err.Error()}
		}
		return res.v, nil
	}
	if route == "/api/v1/create_model" {
		base, err := field[string](body, "base_model")
		if err != nil {
			return nil, err
		}
		lc, err := field[struct {
			Rank int    `json:"rank"`
			Seed *int64 `json:"seed"`
		}](body, "lora_config")
		if err != nil {
			return nil, err
		}
		if base != s.BaseModel {
			return nil, &httpErr{http.StatusBadRequest, fmt.Sprintf("base model %q is not served (%s is)", base, s.BaseModel)}
		}
		if lc.Rank < 1 {
			return nil, &httpErr{http.StatusUnprocessableEntity, "lora_config.rank must be positive"}
		}
		id := fmt.Sprintf("model_%04d", len(s.models)+1)
		m := s.Base.Clone()
		seed := uint64(len(s.models) + 1) // a seed of its own unless one is asked, as Tinker draws one
		if lc.Seed != nil {
			seed = uint64(*lc.Seed)
		}
		if err := m.AddLoRA(model.LoRAConfig{Rank: lc.Rank, Alpha: 32, Targets: allLinear}, seed); err != nil {
			return nil, &httpErr{http.StatusBadRequest, err.Error()}
		}
		s.models[id] = &trained{m: m, b: &learn.Builtin{Model: m, RowLen: m.Cfg.MaxSeq}}
		fut := s.future(map[string]any{"model_id": id, "base_model": base}, nil)
		return map[string]any{"model_id": id, "base_model": base, "lora_config": map[string]any{"rank": lc.Rank, "seed": nil},
			"status": "created", "request_id": fut["request_id"]}, nil
	}
	id, err := field[string](body, "model_id")
	if err != nil {
		return nil, err
	}
	t := s.models[id]
	if t == nil {
		return nil, &httpErr{http.StatusNotFound, "Model not found"}
	}
	if route == "/api/v1/get_info" {
		data := map[string]any{"base_model": s.BaseModel, "lora_config": map[string]any{"rank": t.m.LoRA.Cfg.Rank}, "model_name": s.BaseModel}
		if s.TokenizerID != "" {
			data["tokenizer_id"] = s.TokenizerID
		}
		return map[string]any{"model_id": id, "status": "ready", "model_data": data}, nil
	}
	var v any
	switch route {
	case "/api/v1/forward", "/api/v1/forward_backward":
		key := "forward_input"
		if route == "/api/v1/forward_backward" {
			key = "forward_backward_input"
		}
		in, ferr := field[fbInput](body, key)
		if ferr != nil {
			return nil, ferr
		}
		v, err = t.forward(in, key == "forward_backward_input")
	case "/api/v1/optim_step":
		adam, ferr := field[map[string]float64](body, "adam_params")
		if ferr != nil {
			return nil, ferr
		}
		v, err = t.optimStep(adam)
	case "/api/v1/save_weights", "/api/v1/save_weights_for_sampler":
		name, ferr := field[string](body, "path")
		if ferr != nil {
			return nil, ferr
		}
		if name == "" || strings.ContainsAny(name, "/:") {
			return nil, &httpErr{http.StatusUnprocessableEntity, "path must be a checkpoint id"}
		}
		if route == "/api/v1/save_weights" {
			path := "tinker://" + id + "/weights/" + name
			if s.weights[path] != nil {
				return nil, &httpErr{http.StatusConflict, fmt.Sprintf("Checkpoint '%s' already exists for model '%s'", name, id)}
			}
			sv := &saved{params: slices.Clone(trainable(t.m)), steps: t.steps, adam: t.adam}
			if t.opt != nil {
				sv.opt, sv.hasOpt = t.opt.State(), true
			}
			s.weights[path] = sv
			v = map[string]any{"path": path, "type": "save_weights"}
		} else {
			path := "tinker://" + id + "/sampler_weights/" + name
			if s.samplers[path] != nil {
				return nil, &httpErr{http.StatusConflict, fmt.Sprintf("Checkpoint '%s' already exists for model '%s'", name, id)}
			}
			s.samplers[path] = &sampler{m: t.m.Clone()}
			v = map[string]any{"path": path, "type": "save_weights_for_sampler", "sampling_session_id": nil}
		}
	case "/api/v1/load_weights":
		path, ferr := field[string](body, "path")
		if ferr != nil {
			return nil, ferr
		}
		sv := s.weights[path]
		if sv == nil {
			return nil, &httpErr{http.StatusNotFound, "Checkpoint not found: " + path}
		}
		copy(trainable(t.m), sv.params)
		t.steps, t.opt, t.adam = sv.steps, nil, sv.adam
		if sv.hasOpt {
			params, _, _ := t.m.Trainable()
			if t.opt, err = optim.NewAdamW(sv.adam, len(params), nil); err == nil {
				err = t.opt.LoadState(sv.opt)
			}
		}
		t.b = &learn.Builtin{Model: t.m, Opt: t.opt, RowLen: t.m.Cfg.MaxSeq}
		v = map[string]any{"path": path, "type": "load_weights"}
	default:
		return nil, &httpErr{http.StatusNotFound, "Not Found"}
	}
	if f := s.Fail[route]; f != "" && err == nil {
		err = errors.New(f)
	}
	if he := (*httpErr)(nil); errors.As(err, &he) {
		return nil, err
	}
	return s.future(v, err), nil
}

func trainable(m *model.Model) []float32 {
	p, _, _ := m.Trainable()
	return p
}

type fbInput struct {
	Data []struct {
		ModelInput struct {
			Chunks []struct {
				Type   string  `json:"type"`
				Tokens []int32 `json:"tokens"`
			} `json:"chunks"`
		} `json:"model_input"`
		LossFnInputs map[string]struct {
			Data []float64 `json:"data"`
		} `json:"loss_fn_inputs"`
	} `json:"data"`
	LossFn string `json:"loss_fn"`
}

// forward scores (and with backward, accumulates the gradient of) cross_entropy over in's datums.
func (t *trained) forward(in fbInput, backward bool) (any, error) {
	if in.LossFn != "cross_entropy" {
		return nil, &httpErr{http.StatusUnprocessableEntity, "this service computes loss_fn cross_entropy only"}
	}
	s := &learn.Seqs{Offsets: []int{0}}
	var coef []float32
	for i, d := range in.Data {
		var toks []int32
		for _, c := range d.ModelInput.Chunks {
			if c.Type != "encoded_text" {
				return nil, &httpErr{http.StatusUnprocessableEntity, "chunk type " + c.Type}
			}
			toks = append(toks, c.Tokens...)
		}
		tg, wt := d.LossFnInputs["target_tokens"].Data, d.LossFnInputs["weights"].Data
		if len(tg) != len(toks) || len(wt) != len(tg) || len(toks) == 0 || len(toks)+1 > t.m.Cfg.MaxSeq {
			return nil, &httpErr{http.StatusUnprocessableEntity, fmt.Sprintf("datum %d: %d tokens, %d targets, %d weights", i, len(toks), len(tg), len(wt))}
		}
		for j := 0; j+1 < len(toks); j++ {
			if int32(tg[j]) != toks[j+1] {
				return nil, &httpErr{http.StatusUnprocessableEntity, fmt.Sprintf("datum %d: this service scores next-token targets only", i)}
			}
		}
		last := int32(tg[len(tg)-1])
		if last < 0 || int(last) >= t.m.Cfg.Vocab {
			return nil, &httpErr{http.StatusUnprocessableEntity, fmt.Sprintf("datum %d: target %d outside the vocabulary", i, last)}
		}
		s.Tokens = append(s.Tokens, toks...)
		s.Tokens = append(s.Tokens, last)
		s.Mask = append(s.Mask, false)
		coef = append(coef, 0)
		for _, w := range wt {
			s.Mask = append(s.Mask, true)
			coef = append(coef, -float32(w))
		}
		s.Offsets = append(s.Offsets, len(s.Tokens))
	}
	for _, x := range s.Tokens {
		if x < 0 || int(x) >= t.m.Cfg.Vocab {
			return nil, &httpErr{http.StatusUnprocessableEntity, fmt.Sprintf("token %d outside the vocabulary", x)}
		}
	}
	out := learn.Outputs{Logprobs: make([]float32, len(s.Tokens))}
	ctx := context.Background()
	if err := t.b.Forward(ctx, s, learn.ForwardOptions{}, &out); err != nil {
		return nil, err
	}
	loss := 0.0
	var outs []any
	for i := range len(in.Data) {
		lo, hi := s.Offsets[i], s.Offsets[i+1]
		lps := make([]float64, hi-lo-1)
		for k := range lps {
			lps[k] = float64(out.Logprobs[lo+1+k])
			loss += float64(coef[lo+1+k]) * lps[k]
		}
		outs = append(outs, map[string]any{"logprobs": map[string]any{"data": lps, "dtype": "float32", "shape": []int{len(lps)}}})
	}
	if backward {
		if err := t.b.ForwardBackward(ctx, s, learn.Coefficients{DLogprobs: coef}); err != nil {
			return nil, err
		}
	}
	return map[string]any{"loss_fn_output_type": "TensorData", "loss_fn_outputs": outs, "metrics": map[string]any{"loss:sum": loss}}, nil
}

// optimStep steps AdamW with adam's settings (the optimizer is made at the first step; later
// steps must keep its betas, eps and weight decay).
func (t *trained) optimStep(adam map[string]float64) (any, error) {
	cfg := optim.Config{Beta1: float32(adam["beta1"]), Beta2: float32(adam["beta2"]), Eps: float32(adam["eps"]), WeightDecay: float32(adam["weight_decay"])}
	if t.opt == nil {
		params, _, _ := t.m.Trainable()
		opt, err := optim.NewAdamW(cfg, len(params), nil)
		if err != nil {
			return nil, &httpErr{http.StatusUnprocessableEntity, "adam_params: " + err.Error()}
		}
		t.opt, t.adam, t.b.Opt = opt, cfg, opt
	} else if cfg != t.adam {
		return nil, &httpErr{http.StatusUnprocessableEntity, "adam_params changed their betas, eps or weight_decay"}
	}
	lr, ok := adam["learning_rate"]
	if !ok || !(lr >= 0) {
		return nil, &httpErr{http.StatusUnprocessableEntity, "adam_params.learning_rate"}
	}
	up, err := t.b.OptimStep(context.Background(), learn.OptimStep{LR: float32(lr)})
	if err != nil {
		return nil, err
	}
	t.steps++
	return map[string]any{"metrics": map[string]any{"grad_norm": up.GradNorm}}, nil
}

// sample serves asample outside the lock: the engine of the named sampler copy decodes.
func (s *Service) sample(ctx context.Context, body map[string]json.RawMessage) (any, error) {
	path, err := field[string](body, "model_path")
	if err != nil {
		return nil, err
	}
	n, err := field[int](body, "num_samples")
	if err != nil {
		return nil, err
	}
	prompt, err := field[struct {
		Chunks []struct {
			Type   string  `json:"type"`
			Tokens []int32 `json:"tokens"`
		} `json:"chunks"`
	}](body, "prompt")
	if err != nil {
		return nil, err
	}
	p, err := field[struct {
		MaxTokens   *int     `json:"max_tokens"`
		Seed        *int64   `json:"seed"`
		Stop        []int32  `json:"stop"`
		Temperature *float32 `json:"temperature"`
		TopK        *int     `json:"top_k"`
		TopP        *float32 `json:"top_p"`
	}](body, "sampling_params")
	if err != nil {
		return nil, err
	}
	if p.MaxTokens == nil || *p.MaxTokens < 1 {
		return nil, &httpErr{http.StatusBadRequest, "max_tokens is currently required"}
	}
	s.Lock()
	sm := s.samplers[path]
	if s.Samples == nil {
		s.Samples = map[string]int{}
	}
	s.Samples[path]++
	slots := s.Slots
	s.Unlock()
	if sm == nil {
		return nil, &httpErr{http.StatusNotFound, "Checkpoint not found: " + path}
	}
	sm.once.Do(func() {
		sm.eng, sm.err = local.NewEngine(sm.m, 0, local.EngineConfig{Slots: max(slots, 16)})
	})
	if sm.err != nil {
		return nil, sm.err
	}
	req := infer.Request{MaxTokens: *p.MaxTokens, Stop: p.Stop, Sampling: infer.Sampling{Temperature: 1}}
	for _, c := range prompt.Chunks {
		req.Prompt = append(req.Prompt, c.Tokens...)
	}
	if p.Temperature != nil {
		req.Sampling.Temperature = *p.Temperature
	}
	if p.TopK != nil && *p.TopK > 0 {
		req.Sampling.TopK = *p.TopK
	}
	if p.TopP != nil && *p.TopP < 1 {
		req.Sampling.TopP = *p.TopP
	}
	if p.Seed != nil {
		req.Seed = uint64(*p.Seed)
	}
	var seqs []any
	for k := range max(n, 1) {
		r := req
		r.Seed += uint64(k)
		c, err := sm.eng.Generate(ctx, r)
		if err != nil {
			return nil, err
		}
		lps := make([]float64, len(c.Logprobs))
		for i, x := range c.Logprobs {
			lps[i] = float64(x)
		}
		seqs = append(seqs, map[string]any{"stop_reason": string(c.Finish), "tokens": c.Tokens, "logprobs": lps})
	}
	res := map[string]any{"sequences": seqs, "prompt_logprobs": nil}
	s.Lock()
	rewrite := s.Sample
	s.Unlock()
	if rewrite != nil {
		res = rewrite(res)
	}
	return res, nil
}

// allLinear are the projections Tinker puts adapters on: every linear layer of the blocks.
var allLinear = []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
