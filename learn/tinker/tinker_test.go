package tinker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/learn"
)

func testdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fakeTinker is a Tinker service over a context-free model: the logprob of a target is
// log_softmax(θ)[target], θ one logit per token id. Its routes, bodies and futures follow
// testdata/ (SkyRL's server and Tinker's documented types); cross_entropy's loss is
// −Σ weight·logprob, as Tinker defines it, and its gradient accumulates in grad.
type fakeTinker struct {
	t *testing.T

	mu       sync.Mutex
	theta    []float64
	grad     []float64
	futures  map[string]any
	pending  int // retrieve_future answers 408 this many times first
	next     int
	lastAdam map[string]float64
	calls    []string
	// samplerName, when set, is the name save_weights_for_sampler saves under, whatever was asked.
	samplerName string
}

func newFake(t *testing.T, vocab int) (*fakeTinker, *httptest.Server) {
	f := &fakeTinker{t: t, theta: make([]float64, vocab), grad: make([]float64, vocab), futures: map[string]any{}}
	for i := range f.theta {
		f.theta[i] = math.Sin(float64(i))
	}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv
}

func (f *fakeTinker) logprobs() []float64 {
	m := math.Inf(-1)
	for _, x := range f.theta {
		m = math.Max(m, x)
	}
	z := 0.0
	for _, x := range f.theta {
		z += math.Exp(x - m)
	}
	out := make([]float64, len(f.theta))
	for i, x := range f.theta {
		out[i] = x - m - math.Log(z)
	}
	return out
}

func (f *fakeTinker) future(result any) map[string]any {
	f.next++
	id := fmt.Sprint(f.next)
	f.futures[id] = result
	var fut map[string]any
	json.Unmarshal(testdata(f.t, "future.json"), &fut)
	fut["request_id"], fut["future_id"] = id, id
	return fut
}

func (f *fakeTinker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body map[string]json.RawMessage
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, `{"detail": "bad json"}`, http.StatusUnprocessableEntity)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, r.URL.Path)
	reply := func(v any) { json.NewEncoder(w).Encode(v) }
	file := func(name string) map[string]any {
		var v map[string]any
		if err := json.Unmarshal(testdata(f.t, name), &v); err != nil {
			f.t.Error(err)
		}
		return v
	}
	switch r.URL.Path {
	case "/api/v1/create_session":
		reply(file("create_session.json"))
	case "/api/v1/create_model":
		m := file("create_model.json")
		fut := f.future(map[string]any{"model_id": m["model_id"], "base_model": m["base_model"]})
		m["request_id"] = fut["request_id"]
		reply(m)
	case "/api/v1/forward", "/api/v1/forward_backward":
		key := "forward_input"
		if r.URL.Path == "/api/v1/forward_backward" {
			key = "forward_backward_input"
		}
		var in struct {
			Data []struct {
				ModelInput struct {
					Chunks []struct {
						Type   string `json:"type"`
						Tokens []int  `json:"tokens"`
					} `json:"chunks"`
				} `json:"model_input"`
				LossFnInputs map[string]struct {
					Data []float64 `json:"data"`
				} `json:"loss_fn_inputs"`
			} `json:"data"`
			LossFn string `json:"loss_fn"`
		}
		if err := json.Unmarshal(body[key], &in); err != nil || in.LossFn != "cross_entropy" {
			http.Error(w, `{"detail": "bad input"}`, http.StatusUnprocessableEntity)
			return
		}
		lp := f.logprobs()
		res := file("forward_backward_result.json")
		var outs []any
		for _, d := range in.Data {
			tg, wt := d.LossFnInputs["target_tokens"].Data, d.LossFnInputs["weights"].Data
			if len(d.ModelInput.Chunks) != 1 || d.ModelInput.Chunks[0].Type != "encoded_text" || len(tg) != len(d.ModelInput.Chunks[0].Tokens) || len(wt) != len(tg) {
				http.Error(w, `{"detail": "datum shapes"}`, http.StatusUnprocessableEntity)
				return
			}
			out := make([]float64, len(tg))
			for i, x := range tg {
				out[i] = lp[int(x)]
				if key == "forward_backward_input" { // d(−w·lp)/dθ = −w·(onehot − softmax)
					for v := range f.grad {
						g := math.Exp(lp[v])
						if v == int(x) {
							g -= 1
						}
						f.grad[v] += wt[i] * g
					}
				}
			}
			outs = append(outs, map[string]any{"logprobs": map[string]any{"data": out, "dtype": "float32", "shape": []int{len(out)}}})
		}
		res["loss_fn_outputs"] = outs
		reply(f.future(res))
	case "/api/v1/optim_step":
		var in struct {
			Adam map[string]float64 `json:"adam_params"`
		}
		json.Unmarshal(body["adam_params"], &in.Adam)
		f.lastAdam = in.Adam
		for v := range f.theta { // plain SGD: enough to see the update's direction
			f.theta[v] -= in.Adam["learning_rate"] * f.grad[v]
			f.grad[v] = 0
		}
		reply(f.future(file("optim_step_result.json")))
	case "/api/v1/save_weights_for_sampler":
		var path string
		json.Unmarshal(body["path"], &path)
		if f.samplerName != "" {
			path = f.samplerName
		}
		res := file("save_weights_for_sampler_result.json")
		res["path"] = "tinker://model_5e6f7a8b/sampler_weights/" + path
		reply(f.future(res))
	case "/api/v1/asample":
		reply(f.future(file("sample_result.json")))
	case "/api/v1/retrieve_future":
		var id string
		json.Unmarshal(body["request_id"], &id)
		if f.pending > 0 {
			f.pending--
			w.WriteHeader(http.StatusRequestTimeout)
			w.Write(testdata(f.t, "pending.json"))
			return
		}
		res, ok := f.futures[id]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"detail": "Future not found"}`))
			return
		}
		reply(res)
	default:
		http.NotFound(w, r)
	}
}

func batch() *learn.Seqs {
	return &learn.Seqs{Tokens: []int32{1, 4, 2, 7, 3, 5, 6}, Offsets: []int{0, 4, 5, 7}, Mask: []bool{false, true, true, false, false, true, true}}
}

func dial(t *testing.T, url string) *Client {
	c, err := Dial(context.Background(), Options{URL: url, BaseModel: "Qwen/Qwen3-4B-Instruct-2507", Rank: 8, Timeout: 2 * time.Second, Beta1: 0.9, Beta2: 0.99, Eps: 1e-8})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Forward gives each masked token the service's logprob of it; ForwardBackward with the
// loss's per-token gradients c accumulates, through cross_entropy with weights −c, exactly the
// gradient of Σ c·logprob; the update moves the weights along it; the sampler weights are named
// by version and sampled from.
func TestTinkerBackend(t *testing.T) {
	f, srv := newFake(t, 10)
	f.pending = 2 // retrieve_future's 408 while pending is asked again
	c := dial(t, srv.URL)
	if c.ModelID() != "model_5e6f7a8b" {
		t.Fatalf("model id %q", c.ModelID())
	}
	s := batch()
	out := learn.Outputs{Logprobs: make([]float32, len(s.Tokens))}
	if err := c.Forward(context.Background(), s, learn.ForwardOptions{}, &out); err != nil {
		t.Fatal(err)
	}
	lp := f.logprobs()
	for i, tok := range s.Tokens {
		want := float32(0)
		if s.Mask[i] && i != 0 && i != 4 && i != 5 { // first tokens of the sequences have none
			want = float32(lp[tok])
		}
		if out.Logprobs[i] != want {
			t.Fatalf("token %d: logprob %v, want %v", i, out.Logprobs[i], want)
		}
	}
	coef := []float32{0, 0.5, -1.5, 0, 0, 2, -0.25}
	if err := c.ForwardBackward(context.Background(), s, learn.Coefficients{DLogprobs: coef}); err != nil {
		t.Fatal(err)
	}
	// ∇θ Σ c_t·logprob(t) = Σ c_t·(onehot(x_t) − softmax), over masked tokens with a prefix.
	want := make([]float64, 10)
	for i, tok := range s.Tokens {
		if !s.Mask[i] || i == 0 || i == 4 || i == 5 {
			continue
		}
		for v := range want {
			g := -math.Exp(lp[v])
			if v == int(tok) {
				g += 1
			}
			want[v] += float64(coef[i]) * g
		}
	}
	for v := range want {
		if math.Abs(f.grad[v]-want[v]) > 1e-6 {
			t.Fatalf("gradient[%d] %v, want %v (the weights sent are not −c)", v, f.grad[v], want[v])
		}
	}
	u, err := c.OptimStep(context.Background(), learn.OptimStep{LR: 0.1})
	if err != nil || u.LR != float64(float32(0.1)) || !math.IsNaN(u.GradNorm) || c.OptimizerSteps() != 1 {
		t.Fatalf("optim step: %+v, %v, steps %d", u, err, c.OptimizerSteps())
	}
	if f.lastAdam["beta2"] != 0.99 || math.Abs(f.lastAdam["learning_rate"]-0.1) > 1e-7 {
		t.Fatalf("adam params %v", f.lastAdam)
	}
	art, err := c.SaveForSampler(context.Background(), 3)
	if err != nil || art.URI != "tinker://model_5e6f7a8b/sampler_weights/v3" || art.Version != 3 {
		t.Fatalf("save for sampler: %+v, %v", art, err)
	}
	smp := NewSampler(c, 10)
	if _, err := smp.Generate(context.Background(), infer.Request{Prompt: []int32{1, 2}, MaxTokens: 4, Stop: []int32{2}}); err == nil || !strings.Contains(err.Error(), "no weights saved for sampling") {
		t.Fatalf("sample before any weights: %v", err)
	}
	if err := smp.Use(art); err != nil {
		t.Fatal(err)
	}
	comp, err := smp.Generate(context.Background(), infer.Request{Prompt: []int32{1, 2}, MaxTokens: 4, Stop: []int32{2}, Sampling: infer.Sampling{Temperature: 1}, Seed: 7})
	if err != nil || !slices.Equal(comp.Tokens, []int32{5, 6, 2}) || comp.Logprobs[1] != -1.25 || comp.Finish != infer.FinishStop || !slices.Equal(comp.Versions, []int32{3, 3, 3}) {
		t.Fatalf("sample: %+v %v", comp, err)
	}
	// A service that saves the sampler weights under another name than the version asked.
	f.mu.Lock()
	f.samplerName = "v2"
	f.mu.Unlock()
	if _, err := c.SaveForSampler(context.Background(), 4); err == nil || !strings.Contains(err.Error(), "not the one asked for") {
		t.Fatalf("save for sampler answered another path: %v", err)
	}
}

// What Tinker cannot do is refused by name before anything is sent.
func TestTinkerRefusals(t *testing.T) {
	err := Check(Needs{Entropies: true, Values: true, Reference: true, GradClip: 1})
	for _, w := range []string{"entropy terms", "value terms", "reference logprobs", "grad_clip 1"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Fatalf("Check: %v, want it to name %q", err, w)
		}
	}
	if err := Check(Needs{}); err != nil {
		t.Fatal(err)
	}
	f, srv := newFake(t, 10)
	c := dial(t, srv.URL)
	before := len(f.calls)
	s := batch()
	out := learn.Outputs{Logprobs: make([]float32, len(s.Tokens)), Entropies: make([]float32, len(s.Tokens))}
	if err := c.Forward(context.Background(), s, learn.ForwardOptions{Entropies: true}, &out); err == nil || !strings.Contains(err.Error(), "entropy") {
		t.Fatalf("forward with entropies: %v", err)
	}
	ent := make([]float32, len(s.Tokens))
	ent[1] = 0.01
	if err := c.ForwardBackward(context.Background(), s, learn.Coefficients{DLogprobs: make([]float32, len(s.Tokens)), DEntropies: ent}); err == nil || !strings.Contains(err.Error(), "entropy") {
		t.Fatalf("forward_backward with an entropy term: %v", err)
	}
	if _, err := c.OptimStep(context.Background(), learn.OptimStep{LR: 0.1, GradClip: 1}); err == nil || !strings.Contains(err.Error(), "grad_clip") {
		t.Fatalf("optim step with clipping: %v", err)
	}
	if err := c.SaveState(context.Background(), t.TempDir()); err == nil {
		t.Fatal("SaveState to a folder succeeded")
	}
	if len(f.calls) != before {
		t.Fatalf("refused calls reached the service: %v", f.calls[before:])
	}
}

// A service that fails a future, answers another shape or does not answer ends the call with
// an error naming the route, within the deadline.
func TestTinkerFailures(t *testing.T) {
	f, srv := newFake(t, 10)
	c := dial(t, srv.URL)
	s := batch()
	out := learn.Outputs{Logprobs: make([]float32, len(s.Tokens))}
	// A future that failed.
	f.mu.Lock()
	f.next = 100
	f.mu.Unlock()
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/retrieve_future" {
			w.WriteHeader(http.StatusBadRequest)
			w.Write(testdata(t, "failed.json"))
			return
		}
		w.Write(testdata(t, "future.json"))
	}))
	defer bad.Close()
	c.opts.URL = bad.URL
	if err := c.Forward(context.Background(), s, learn.ForwardOptions{}, &out); err == nil || !strings.Contains(err.Error(), "Model not found") || !strings.Contains(err.Error(), "forward") {
		t.Fatalf("failed future: %v", err)
	}
	// Logprobs of another length than the targets.
	short := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/retrieve_future" {
			w.Write(testdata(t, "forward_backward_result.json"))
			return
		}
		w.Write(testdata(t, "future.json"))
	}))
	defer short.Close()
	c.opts.URL = short.URL
	if err := c.Forward(context.Background(), s, learn.ForwardOptions{}, &out); err == nil || !strings.Contains(err.Error(), "loss_fn_outputs") {
		t.Fatalf("short answer: %v", err)
	}
	// A service that never answers: the deadline ends the call.
	stop := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	defer hang.Close()
	defer close(stop)
	c.opts.URL, c.opts.Timeout = hang.URL, 200*time.Millisecond
	t0 := time.Now()
	err := c.Forward(context.Background(), s, learn.ForwardOptions{}, &out)
	if err == nil || !errors.Is(err, learn.ErrLearner) || !strings.Contains(err.Error(), "no answer within") || time.Since(t0) > 2*time.Second {
		t.Fatalf("hung service: %v after %v", err, time.Since(t0))
	}
}

// FuzzDecode feeds retrieve_future answers to the forward decoder: an error or a result,
// never a panic.
func FuzzDecode(f *testing.F) {
	for _, n := range []string{"forward_backward_result.json", "optim_step_result.json", "sample_result.json", "failed.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", n))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var res fbOutput
		if json.Unmarshal(data, &res) != nil {
			return
		}
		s := batch()
		_, kept := data2(s)
		scatter(s, kept, res, make([]float32, len(s.Tokens)))
		detail(data)
	})
}

func data2(s *learn.Seqs) ([]datum, []int) { return data(s, func(int) float64 { return 1 }) }
