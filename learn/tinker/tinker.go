// Package tinker is a learn.Backend that speaks the Tinker API (Thinking Machines' hosted
// service, or SkyRL's open-source server of the same API): the run's RL math stays in Go, and
// the weights (a LoRA adapter on the service's base model) and the optimizer live on the service.
//
// The contract maps onto Tinker's calls, each submitted as a future and collected with
// retrieve_future under the client's deadline:
//
//   - Forward: /api/v1/forward with loss_fn cross_entropy; each sequence is a Datum whose
//     model_input is its tokens but the last and whose loss_fn_inputs.target_tokens are its
//     tokens but the first; loss_fn_outputs[i].logprobs are the targets' logprobs.
//   - ForwardBackward: /api/v1/forward_backward with loss_fn cross_entropy, whose loss is
//     Σ −weight·logprob over a Datum's targets: weights −c (c the loss's gradient with respect to
//     each token's logprob, 0 where the mask is off) make its gradient the contract's, exactly.
//   - OptimStep: /api/v1/optim_step with adam_params (learning_rate, beta1, beta2, eps,
//     weight_decay).
//   - SaveForSampler: /api/v1/save_weights_for_sampler under the name v<version>; the artifact's
//     URI is the tinker:// path a Sampler samples from, checked to be the one asked for
//     (tinker://<model_id>/sampler_weights/v<version>).
//
// Beside the contract: SaveWeights and LoadWeights keep and restore the training state (adapter
// and optimizer) on the service under a tinker:// path (save_weights, load_weights: Tinker's
// save_state and load_state), Info asks get_info, and Sampler is an infer.Generator over asample
// whose answers are checked before the agent loop sees them. Every call has the client's
// deadline, the wait for its future included, and every answer is bounded (MaxBody).
//
// What the contract needs and Tinker cannot do is refused by name before anything is sent
// (Check): entropy and value terms and outputs (Tinker's losses see logprobs alone), the frozen
// reference policy's logprobs, gradient clipping (optim_step has no clipping), and saving or
// loading the state to a local folder (Tinker keeps it on the service: save_weights and
// load_weights name tinker:// paths).
package tinker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/agentrl/agentrl/learn"
)

// MaxBody bounds an answer of the service.
const MaxBody = 256 << 20

// Options configure a Client.
type Options struct {
	URL       string // the service's base URL, e.g. http://127.0.0.1:8000 (SkyRL) or Tinker's
	Key       string // sent as a bearer token and X-API-Key (empty: none)
	BaseModel string // e.g. Qwen/Qwen3-4B-Instruct-2507
	Rank      int    // the LoRA rank of the adapter the service trains
	// Seed, when set, seeds the adapter's initialization on the service (lora_config.seed), so
	// that a run is the same every time; nil leaves the service to draw one.
	Seed *int64
	// Timeout is the deadline of each call, the wait for its future included (default 5m).
	Timeout time.Duration
	// Adam holds the optimizer's fixed settings; OptimStep gives the learning rate.
	Beta1, Beta2, Eps, WeightDecay float64
	// Client is the HTTP client (default http.DefaultClient).
	Client *http.Client
}

// Needs is what a run asks of its learner, checked against what Tinker offers.
type Needs struct {
	Entropies bool    // entropy terms or outputs (rl.loss.entropy_coef, entropy metrics)
	Values    bool    // a value head (rl.loss.critic)
	Reference bool    // the frozen reference policy's logprobs (a KL term)
	GradClip  float64 // a gradient-norm bound (grad_clip)
}

// Check refuses, by name, what Tinker cannot do.
func Check(n Needs) error {
	var errs []error
	if n.Entropies {
		errs = append(errs, errors.New("entropy terms: Tinker's losses and forward outputs carry logprobs alone"))
	}
	if n.Values {
		errs = append(errs, errors.New("value terms: Tinker trains no value head"))
	}
	if n.Reference {
		errs = append(errs, errors.New("reference logprobs: Tinker's forward scores the model being trained, not a frozen reference"))
	}
	if n.GradClip > 0 {
		errs = append(errs, fmt.Errorf("grad_clip %g: Tinker's optim_step has no gradient clipping", n.GradClip))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("learn/tinker: the run needs what the Tinker API cannot do:\n%w", err)
	}
	return nil
}

// Client is a learn.Backend on a Tinker service. It is used by one goroutine.
type Client struct {
	opts    Options
	http    *http.Client
	session string
	model   string
	steps   int64
}

var _ learn.LogprobsOnly = (*Client)(nil)

// LogprobsOnly implements learn.LogprobsOnly: Tinker's forward returns logprobs alone.
func (c *Client) LogprobsOnly() {}

// Dial opens a session and creates the LoRA model the client trains.
func Dial(ctx context.Context, o Options) (*Client, error) {
	if o.URL == "" || o.BaseModel == "" || o.Rank < 1 {
		return nil, errors.New("learn/tinker: a url, a base_model and a LoRA rank are needed")
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Minute
	}
	c := &Client{opts: o, http: o.Client}
	if c.http == nil {
		c.http = http.DefaultClient
	}
	o.URL = strings.TrimRight(o.URL, "/")
	c.opts.URL = o.URL
	var s struct {
		SessionID string `json:"session_id"`
	}
	if err := c.post(ctx, "/api/v1/create_session", map[string]any{"tags": []string{"agentrl"}, "sdk_version": "agentrl", "type": "create_session"}, &s); err != nil {
		return nil, err
	}
	if s.SessionID == "" {
		return nil, errors.New("learn/tinker: create_session: no session_id")
	}
	c.session = s.SessionID
	var m struct {
		ModelID   string `json:"model_id"`
		RequestID string `json:"request_id"`
	}
	lora := map[string]any{"rank": o.Rank}
	if o.Seed != nil {
		lora["seed"] = *o.Seed
	}
	if err := c.post(ctx, "/api/v1/create_model", map[string]any{"session_id": s.SessionID, "base_model": o.BaseModel,
		"lora_config": lora}, &m); err != nil {
		return nil, err
	}
	if m.ModelID == "" || m.RequestID == "" {
		return nil, errors.New("learn/tinker: create_model: no model_id or request_id")
	}
	if err := c.wait(ctx, "create_model", m.RequestID, nil); err != nil {
		return nil, err
	}
	c.model = m.ModelID
	return c, nil
}

// Heartbeat tells the service the session is alive (session_heartbeat), as Tinker's SDK does
// every few seconds: a hosted session that hears nothing for a while is closed.
func (c *Client) Heartbeat(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	return c.post(ctx, "/api/v1/session_heartbeat", map[string]any{"session_id": c.session, "type": "session_heartbeat"}, nil)
}

// SetAdam sets the optimizer's fixed settings that OptimStep sends from now on.
func (c *Client) SetAdam(beta1, beta2, eps, weightDecay float64) {
	c.opts.Beta1, c.opts.Beta2, c.opts.Eps, c.opts.WeightDecay = beta1, beta2, eps, weightDecay
}

// ModelID is the service's id of the model being trained.
func (c *Client) ModelID() string { return c.model }

// OptimizerSteps is how many updates the client applied.
func (c *Client) OptimizerSteps() int64 { return c.steps }

type tensorData struct {
	Data  []float64 `json:"data"`
	Dtype string    `json:"dtype,omitempty"`
	Shape []int     `json:"shape,omitempty"`
}

type chunk struct {
	Type   string  `json:"type"`
	Tokens []int32 `json:"tokens"`
}

type datum struct {
	ModelInput struct {
		Chunks []chunk `json:"chunks"`
	} `json:"model_input"`
	LossFnInputs map[string]tensorData `json:"loss_fn_inputs"`
}

// data lays s out as Tinker Datums: sequence i predicts its tokens 1..n-1 from 0..n-2 with
// weight(t) for token t; sequences shorter than 2 tokens have nothing to predict and are
// skipped (kept: the indices of those sent).
func data(s *learn.Seqs, weight func(t int) float64) (out []datum, kept []int) {
	for i := range s.NumSeqs() {
		lo, hi := s.Offsets[i], s.Offsets[i+1]
		if hi-lo < 2 {
			continue
		}
		var d datum
		d.ModelInput.Chunks = []chunk{{Type: "encoded_text", Tokens: s.Tokens[lo : hi-1]}}
		tgt := make([]float64, hi-lo-1)
		w := make([]float64, hi-lo-1)
		for t := lo + 1; t < hi; t++ {
			tgt[t-lo-1] = float64(s.Tokens[t])
			if s.Mask[t] {
				w[t-lo-1] = weight(t)
			}
		}
		d.LossFnInputs = map[string]tensorData{"target_tokens": {Data: tgt, Dtype: "int64"}, "weights": {Data: w, Dtype: "float32"}}
		out = append(out, d)
		kept = append(kept, i)
	}
	return out, kept
}

// fbOutput is a forward or forward_backward future's result.
type fbOutput struct {
	LossFnOutputType string                  `json:"loss_fn_output_type"`
	LossFnOutputs    []map[string]tensorData `json:"loss_fn_outputs"`
	Metrics          map[string]float64      `json:"metrics"`
}

// Forward implements learn.Backend: the logprobs of s's masked tokens.
func (c *Client) Forward(ctx context.Context, s *learn.Seqs, o learn.ForwardOptions, out *learn.Outputs) error {
	if o.Entropies || o.Values || o.Reference {
		return Check(Needs{Entropies: o.Entropies, Values: o.Values, Reference: o.Reference})
	}
	if err := s.Validate(); err != nil {
		return err
	}
	if len(out.Logprobs) != len(s.Tokens) {
		return fmt.Errorf("learn/tinker: %d logprob slots for %d tokens", len(out.Logprobs), len(s.Tokens))
	}
	ds, kept := data(s, func(int) float64 { return 1 })
	var res fbOutput
	if err := c.call(ctx, "forward", "/api/v1/forward", map[string]any{"model_id": c.model,
		"forward_input": map[string]any{"data": ds, "loss_fn": "cross_entropy"}}, &res); err != nil {
		return err
	}
	clear(out.Logprobs)
	return scatter(s, kept, res, out.Logprobs)
}

// scatter checks res against the datums sent and writes each masked target's logprob into lp.
func scatter(s *learn.Seqs, kept []int, res fbOutput, lp []float32) error {
	if len(res.LossFnOutputs) != len(kept) {
		return fmt.Errorf("learn/tinker: %d loss_fn_outputs for %d datums", len(res.LossFnOutputs), len(kept))
	}
	for k, i := range kept {
		lo, hi := s.Offsets[i], s.Offsets[i+1]
		got, ok := res.LossFnOutputs[k]["logprobs"]
		if !ok || len(got.Data) != hi-lo-1 {
			return fmt.Errorf("learn/tinker: loss_fn_outputs[%d].logprobs has %d values for %d targets", k, len(got.Data), hi-lo-1)
		}
		for t := lo + 1; t < hi; t++ {
			v := got.Data[t-lo-1]
			if !(v <= 1e-4) || math.IsInf(v, -1) {
				return fmt.Errorf("learn/tinker: loss_fn_outputs[%d].logprobs[%d] is %v, not a logprob", k, t-lo-1, v)
			}
			if s.Mask[t] {
				lp[t] = float32(v)
			}
		}
	}
	return nil
}

// ForwardBackward implements learn.Backend through cross_entropy with weights −c.
func (c *Client) ForwardBackward(ctx context.Context, s *learn.Seqs, co learn.Coefficients) error {
	if nonzero(co.DEntropies) || nonzero(co.DValues) {
		return Check(Needs{Entropies: nonzero(co.DEntropies), Values: nonzero(co.DValues)})
	}
	if err := s.Validate(); err != nil {
		return err
	}
	if len(co.DLogprobs) != len(s.Tokens) {
		return fmt.Errorf("learn/tinker: %d coefficients for %d tokens", len(co.DLogprobs), len(s.Tokens))
	}
	ds, kept := data(s, func(t int) float64 { return -float64(co.DLogprobs[t]) })
	if len(ds) == 0 {
		return nil
	}
	var res fbOutput
	if err := c.call(ctx, "forward_backward", "/api/v1/forward_backward", map[string]any{"model_id": c.model,
		"forward_backward_input": map[string]any{"data": ds, "loss_fn": "cross_entropy"}}, &res); err != nil {
		return err
	}
	return scatter(s, kept, res, make([]float32, len(s.Tokens)))
}

func nonzero(v []float32) bool {
	for _, x := range v {
		if x != 0 {
			return true
		}
	}
	return false
}

// OptimStep implements learn.Backend: AdamW at o.LR on the service. Tinker reports no gradient
// norm: Update.GradNorm is NaN unless the result's metrics carry one (grad_norm).
func (c *Client) OptimStep(ctx context.Context, o learn.OptimStep) (learn.Update, error) {
	if o.GradClip > 0 {
		return learn.Update{}, Check(Needs{GradClip: float64(o.GradClip)})
	}
	if !(o.LR >= 0) || math.IsInf(float64(o.LR), 0) {
		return learn.Update{}, fmt.Errorf("learn/tinker: learning rate %v", o.LR)
	}
	var res struct {
		Metrics map[string]float64 `json:"metrics"`
	}
	adam := map[string]any{"learning_rate": o.LR, "beta1": c.opts.Beta1, "beta2": c.opts.Beta2, "eps": c.opts.Eps, "weight_decay": c.opts.WeightDecay}
	if err := c.call(ctx, "optim_step", "/api/v1/optim_step", map[string]any{"model_id": c.model, "adam_params": adam}, &res); err != nil {
		return learn.Update{}, err
	}
	c.steps++
	u := learn.Update{GradNorm: math.NaN(), LR: float64(o.LR)}
	if g, ok := res.Metrics["grad_norm"]; ok {
		u.GradNorm = g
	}
	return u, nil
}

// SaveForSampler implements learn.Backend: the adapter saved for sampling as v<version>; the
// artifact's URI is its tinker:// path.
func (c *Client) SaveForSampler(ctx context.Context, version int32) (learn.Artifact, error) {
	var res struct {
		Path string `json:"path"`
	}
	if err := c.call(ctx, "save_weights_for_sampler", "/api/v1/save_weights_for_sampler", map[string]any{"model_id": c.model,
		"path": fmt.Sprintf("v%d", version), "type": "save_weights_for_sampler"}, &res); err != nil {
		return learn.Artifact{}, err
	}
	if err := c.checkPath(res.Path, "sampler_weights", fmt.Sprintf("v%d", version)); err != nil {
		return learn.Artifact{}, fmt.Errorf("learn/tinker: save_weights_for_sampler v%d: %w", version, err)
	}
	return learn.Artifact{Version: version, URI: res.Path}, nil
}

// checkPath checks that path, a service's answer to a save under name, is the tinker:// path of
// that name for the model being trained: tinker://<model_id>/<kind>/<name>.
func (c *Client) checkPath(path, kind, name string) error {
	want := "tinker://" + c.model + "/" + kind + "/" + name
	if path != want {
		return fmt.Errorf("the service answered path %q, not the one asked for (%s)", path, want)
	}
	return nil
}

// ModelInfo is what get_info says of the model being trained.
type ModelInfo struct {
	BaseModel   string
	ModelName   string
	TokenizerID string // hosted Tinker names the tokenizer its sampler uses; SkyRL's server does not
	Rank        int
}

// Info asks the service about the model being trained (get_info) and checks it is the base model
// and LoRA rank the client created.
func (c *Client) Info(ctx context.Context) (ModelInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	var res struct {
		ModelID   string `json:"model_id"`
		ModelData struct {
			BaseModel   string `json:"base_model"`
			ModelName   string `json:"model_name"`
			TokenizerID string `json:"tokenizer_id"`
			LoRAConfig  *struct {
				Rank int `json:"rank"`
			} `json:"lora_config"`
		} `json:"model_data"`
	}
	if err := c.post(ctx, "/api/v1/get_info", map[string]any{"model_id": c.model, "type": "get_info"}, &res); err != nil {
		return ModelInfo{}, err
	}
	d := res.ModelData
	info := ModelInfo{BaseModel: d.BaseModel, ModelName: d.ModelName, TokenizerID: d.TokenizerID}
	if d.LoRAConfig != nil {
		info.Rank = d.LoRAConfig.Rank
	}
	if res.ModelID != c.model || info.BaseModel != c.opts.BaseModel || info.Rank != c.opts.Rank {
		return info, fmt.Errorf("learn/tinker: get_info describes model %q on %q with LoRA rank %d; the client created %q on %q with rank %d",
			res.ModelID, info.BaseModel, info.Rank, c.model, c.opts.BaseModel, c.opts.Rank)
	}
	return info, nil
}

// SaveWeights saves the training state (the adapter and the optimizer's moments) on the service
// under name (save_weights, Tinker's save_state) and returns its tinker:// path, which LoadWeights
// restores, in this session or a later one.
func (c *Client) SaveWeights(ctx context.Context, name string) (string, error) {
	var res struct {
		Path string `json:"path"`
	}
	if err := c.call(ctx, "save_weights", "/api/v1/save_weights", map[string]any{"model_id": c.model, "path": name, "type": "save_weights"}, &res); err != nil {
		return "", err
	}
	if err := c.checkPath(res.Path, "weights", name); err != nil {
		return "", fmt.Errorf("learn/tinker: save_weights %s: %w", name, err)
	}
	return res.Path, nil
}

// LoadWeights replaces the model's adapter and optimizer state with those saved at path
// (load_weights with the optimizer, Tinker's load_state), and takes steps as the count of
// updates they hold.
func (c *Client) LoadWeights(ctx context.Context, path string, steps int64) error {
	if !strings.HasPrefix(path, "tinker://") || !strings.Contains(path, "/weights/") {
		return fmt.Errorf("learn/tinker: %q is not the tinker:// path of saved training weights", path)
	}
	if err := c.call(ctx, "load_weights", "/api/v1/load_weights", map[string]any{"model_id": c.model, "path": path, "optimizer": true, "type": "load_weights"}, nil); err != nil {
		return err
	}
	c.steps = steps
	return nil
}

// SaveState and LoadState are refused: Tinker keeps the training state on the service.
func (c *Client) SaveState(context.Context, string) error {
	return errors.New("learn/tinker: the training state stays on the Tinker service (save_weights names a tinker:// path), not in a local folder")
}

// LoadState is refused, as SaveState.
func (c *Client) LoadState(context.Context, string) error {
	return errors.New("learn/tinker: the training state is loaded on the Tinker service from a tinker:// path (load_weights), not from a local folder")
}

// call submits a request whose answer is a future and waits for its result into out.
func (c *Client) call(ctx context.Context, what, route string, body, out any) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	var f struct {
		RequestID string `json:"request_id"`
	}
	if err := c.post(ctx, route, body, &f); err != nil {
		return err
	}
	if f.RequestID == "" {
		return fmt.Errorf("learn/tinker: %s: no request_id in the answer", what)
	}
	return c.wait(ctx, what, f.RequestID, out)
}

// wait collects future id's result with retrieve_future into out (nil: discarded), asking again
// while the service answers that it is still pending (SkyRL's 408, hosted Tinker's try_again),
// until ctx's deadline. A result that is Tinker's failure shape ({"error": …}) is an error.
func (c *Client) wait(ctx context.Context, what, id string, out any) error {
	for {
		var raw json.RawMessage
		err := c.post(ctx, "/api/v1/retrieve_future", map[string]any{"request_id": id}, &raw)
		var he *httpError
		if errors.As(err, &he) && he.status == http.StatusRequestTimeout && ctx.Err() == nil {
			pause(ctx, 10*time.Millisecond)
			continue
		}
		if err != nil {
			return fmt.Errorf("learn/tinker: %s (future %s): %w", what, id, err)
		}
		var st struct {
			Type  string `json:"type"`
			Error string `json:"error"`
		}
		if json.Unmarshal(raw, &st) == nil {
			if st.Type == "try_again" {
				pause(ctx, 50*time.Millisecond)
				if ctx.Err() != nil {
					return fmt.Errorf("learn/tinker: %s (future %s): still pending after %v: %w", what, id, c.opts.Timeout, learn.ErrLearner)
				}
				continue
			}
			if st.Error != "" {
				return fmt.Errorf("learn/tinker: %s (future %s) failed: %s", what, id, clip(st.Error))
			}
		}
		if out == nil {
			return nil
		}
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("learn/tinker: %s (future %s): the result is not the documented shape: %v", what, id, err)
		}
		return nil
	}
}

// pause waits d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

type httpError struct {
	route  string
	status int
	msg    string
}

func (e *httpError) Error() string { return fmt.Sprintf("%s: HTTP %d: %s", e.route, e.status, e.msg) }

// post sends body as JSON and decodes a 200 answer into out (nil: discarded).
func (c *Client) post(ctx context.Context, route string, body, out any) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.opts.URL+route, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.opts.Key != "" {
		req.Header.Set("Authorization", "Bearer "+c.opts.Key)
		req.Header.Set("X-API-Key", c.opts.Key)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("learn/tinker: %s: no answer within %v: %w", route, c.opts.Timeout, learn.ErrLearner)
		}
		return fmt.Errorf("learn/tinker: %s: %v: %w", route, err, learn.ErrLearner)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxBody+1))
	if err != nil {
		return fmt.Errorf("learn/tinker: %s: reading the answer: %v: %w", route, err, learn.ErrLearner)
	}
	if len(data) > MaxBody {
		return fmt.Errorf("learn/tinker: %s: the answer is larger than %d bytes", route, MaxBody)
	}
	if resp.StatusCode != http.StatusOK {
		return &httpError{route: route, status: resp.StatusCode, msg: detail(data)}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("learn/tinker: %s: the answer is not the documented shape: %v", route, err)
	}
	return nil
}

// detail is the message of an error answer: FastAPI's detail, Tinker's error, or the body.
func detail(data []byte) string {
	var e struct {
		Detail json.RawMessage `json:"detail"`
		Error  string          `json:"error"`
	}
	if json.Unmarshal(data, &e) == nil {
		var s string
		if json.Unmarshal(e.Detail, &s) == nil && s != "" {
			return s
		}
		if len(e.Detail) > 0 {
			return string(e.Detail)
		}
		if e.Error != "" {
			return clip(e.Error)
		}
	}
	return clip(strings.TrimSpace(string(data)))
}

// clip shortens a message from the service to 300 bytes.
func clip(s string) string {
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
