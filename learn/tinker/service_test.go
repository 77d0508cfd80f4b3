package tinker

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/infer/local"
	"github.com/agentrl/agentrl/learn"
	"github.com/agentrl/agentrl/learn/tinker/tinkerfake"
	"github.com/agentrl/agentrl/model"
)

func tinyBase(t *testing.T) *model.Model {
	t.Helper()
	m, err := model.New(model.Config{Vocab: 32, Dim: 32, Layers: 2, Heads: 4, KVHeads: 2, Hidden: 48, MaxSeq: 64,
		RopeTheta: 10000, NormEps: 1e-5, TieEmbeddings: true}, 7)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// service is the fake Tinker service over the built-in model base, served on loopback.
func service(t *testing.T, base *model.Model) (*tinkerfake.Service, string) {
	svc := &tinkerfake.Service{Base: base, BaseModel: "agentrl/tiny", TokenizerID: "agentrl/tiny"}
	srv := httptest.NewServer(svc)
	t.Cleanup(func() { srv.Close(); svc.Close() })
	return svc, srv.URL
}

func dialTiny(t *testing.T, url string, timeout time.Duration) *Client {
	t.Helper()
	c, err := Dial(context.Background(), Options{URL: url, BaseModel: "agentrl/tiny", Rank: 4, Timeout: timeout, Beta1: 0.9, Beta2: 0.99, Eps: 1e-8})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func forward(t *testing.T, c learn.Backend, s *learn.Seqs) []float32 {
	t.Helper()
	out := learn.Outputs{Logprobs: make([]float32, len(s.Tokens))}
	if err := c.Forward(context.Background(), s, learn.ForwardOptions{}, &out); err != nil {
		t.Fatal(err)
	}
	return out.Logprobs
}

func trainStep(t *testing.T, c *Client, s *learn.Seqs) {
	t.Helper()
	coef := make([]float32, len(s.Tokens))
	for i := range coef {
		if s.Mask[i] {
			coef[i] = -1 // the loss −Σ logprob: make the batch likelier
		}
	}
	if err := c.ForwardBackward(context.Background(), s, learn.Coefficients{DLogprobs: coef}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.OptimStep(context.Background(), learn.OptimStep{LR: 0.02}); err != nil {
		t.Fatal(err)
	}
}

// Against a service that computes (the built-in model behind Tinker's routes): the untrained
// adapter scores and samples as the base model does; training makes the batch likelier and the
// sampler samples the version saved; saved training weights load into a new model of another
// session with the optimizer's moments, so the next update is the same on both.
func TestServiceRoundTrip(t *testing.T) {
	base := tinyBase(t)
	svc, url := service(t, base)
	c := dialTiny(t, url, 10*time.Second)
	if err := c.Heartbeat(context.Background()); err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(context.Background())
	if err != nil || info.TokenizerID != "agentrl/tiny" || info.Rank != 4 {
		t.Fatalf("info %+v, %v", info, err)
	}
	s := &learn.Seqs{Tokens: []int32{1, 5, 9, 3, 7, 2, 4, 8, 6}, Offsets: []int{0, 5, 9}, Mask: []bool{false, true, true, true, true, false, true, true, true}}
	want := forward(t, &learn.Builtin{Model: base, RowLen: 64}, s)
	got := forward(t, c, s)
	for i := range want {
		if math.Abs(float64(want[i]-got[i])) > 1e-5 {
			t.Fatalf("token %d: the service scores %v, the base model %v", i, got[i], want[i])
		}
	}
	art, err := c.SaveForSampler(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	smp := NewSampler(c, 32)
	if err := smp.Use(art); err != nil {
		t.Fatal(err)
	}
	req := infer.Request{Prompt: []int32{1, 2, 3}, MaxTokens: 8, Stop: []int32{0}, Seed: 11, Sampling: infer.Sampling{Temperature: 1}}
	comp, err := smp.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := local.NewEngine(base, 0, local.EngineConfig{Slots: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	ref, err := eng.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(comp.Tokens, ref.Tokens) || !slices.Equal(comp.Logprobs, ref.Logprobs) || comp.Finish != ref.Finish {
		t.Fatalf("the sampler of the untrained adapter gave %+v, the base model %+v", comp, ref)
	}

	for range 3 {
		trainStep(t, c, s)
	}
	after := forward(t, c, s)
	var gain float64
	for i := range after {
		gain += float64(after[i] - got[i])
	}
	if !(gain > 0.1) {
		t.Fatalf("three updates raised the batch's logprob by %v", gain)
	}
	art, err = c.SaveForSampler(context.Background(), 3)
	if err != nil || !strings.HasSuffix(art.URI, "/sampler_weights/v3") {
		t.Fatalf("save for sampler: %+v %v", art, err)
	}
	smp.Use(art)
	if comp, err = smp.Generate(context.Background(), req); err != nil || comp.Versions[0] != 3 {
		t.Fatalf("sample v3: %+v %v", comp, err)
	}
	svc.Lock()
	n := svc.Samples[art.URI]
	svc.Unlock()
	if n != 1 {
		t.Fatalf("v3 sampled %d times", n)
	}

	path, err := c.SaveWeights(context.Background(), "ck-3")
	if err != nil || path != "tinker://"+c.ModelID()+"/weights/ck-3" {
		t.Fatalf("save weights: %q %v", path, err)
	}
	c2 := dialTiny(t, url, 10*time.Second)
	if err := c2.LoadWeights(context.Background(), path, c.OptimizerSteps()); err != nil {
		t.Fatal(err)
	}
	if c2.OptimizerSteps() != 3 || svc.Steps(c2.ModelID()) != 3 {
		t.Fatalf("loaded: client at %d updates, service at %d", c2.OptimizerSteps(), svc.Steps(c2.ModelID()))
	}
	if l2 := forward(t, c2, s); !slices.Equal(l2, after) {
		t.Fatalf("the loaded weights score %v, the saved ones %v", l2, after)
	}
	trainStep(t, c, s)
	trainStep(t, c2, s)
	if a, b := forward(t, c, s), forward(t, c2, s); !slices.Equal(a, b) {
		t.Fatalf("the update after loading differs (the optimizer's moments were not restored): %v vs %v", a, b)
	}
	if err := c2.LoadWeights(context.Background(), "tinker://x/sampler_weights/v1", 0); err == nil {
		t.Fatal("loading sampler weights as training weights succeeded")
	}
}

// Faults end each call with a clear error within its deadline: a service down at the start, a
// sample past its deadline, a future that fails, a malformed sample (counted), hosted Tinker's
// failure and try-again shapes.
func TestServiceFaults(t *testing.T) {
	down := httptest.NewServer(http.NotFoundHandler())
	url := down.URL
	down.Close()
	t0 := time.Now()
	if _, err := Dial(context.Background(), Options{URL: url, BaseModel: "agentrl/tiny", Rank: 4, Timeout: time.Second}); err == nil || !errors.Is(err, learn.ErrLearner) || time.Since(t0) > 3*time.Second {
		t.Fatalf("service down: %v after %v", err, time.Since(t0))
	}

	svc, url := service(t, tinyBase(t))
	c := dialTiny(t, url, 300*time.Millisecond)
	art, err := c.SaveForSampler(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	smp := NewSampler(c, 32)
	smp.Use(art)
	req := infer.Request{Prompt: []int32{1, 2, 3}, MaxTokens: 6, Stop: []int32{0}, Seed: 1, Sampling: infer.Sampling{Temperature: 1}}

	svc.Lock()
	svc.Hang = map[string]bool{"/api/v1/asample": true}
	svc.Unlock()
	t0 = time.Now()
	if _, err := smp.Generate(context.Background(), req); err == nil || !strings.Contains(err.Error(), "no answer within") || time.Since(t0) > 3*time.Second {
		t.Fatalf("sample past its deadline: %v after %v", err, time.Since(t0))
	}
	svc.Lock()
	svc.Hang = nil
	svc.Fail = map[string]string{"/api/v1/optim_step": "CUDA out of memory"}
	svc.Unlock()
	if _, err := c.OptimStep(context.Background(), learn.OptimStep{LR: 0.01}); err == nil || !strings.Contains(err.Error(), "CUDA out of memory") || !strings.Contains(err.Error(), "optim_step") {
		t.Fatalf("failed future: %v", err)
	}
	svc.Lock()
	svc.Fail = nil
	svc.Sample = func(res map[string]any) map[string]any {
		seq := res["sequences"].([]any)[0].(map[string]any)
		seq["logprobs"] = seq["logprobs"].([]float64)[1:]
		return res
	}
	svc.Unlock()
	if _, err := smp.Generate(context.Background(), req); err == nil || !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "logprobs") || smp.ProtocolErrors() != 1 {
		t.Fatalf("malformed sample: %v (%d counted)", err, smp.ProtocolErrors())
	}
	if n, first := smp.Failed(); n != 2 || first == nil || !strings.Contains(first.Error(), "no answer within") {
		t.Fatalf("failures: %d, first %v", n, first)
	}

	for _, tc := range []struct{ file, want string }{{"request_failed.json", "CUDA out of memory"}, {"try_again.json", "still pending"}} {
		body, err := os.ReadFile(filepath.Join("testdata", tc.file))
		if err != nil {
			t.Fatal(err)
		}
		hosted := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/api/v1/retrieve_future" {
				w.Write(body)
				return
			}
			w.Write(testdata(t, "future.json"))
		}))
		c.opts.URL = hosted.URL
		t0 = time.Now()
		if _, err := c.OptimStep(context.Background(), learn.OptimStep{LR: 0.01}); err == nil || !strings.Contains(err.Error(), tc.want) || time.Since(t0) > 3*time.Second {
			t.Fatalf("%s: %v after %v", tc.file, err, time.Since(t0))
		}
		hosted.Close()
	}
}

// decodeSample refuses what breaks the protocol, by what it is.
func TestDecodeSample(t *testing.T) {
	req := infer.Request{MaxTokens: 3, Stop: []int32{2}}
	cases := []struct{ body, want string }{
		{`{"sequences": [{"stop_reason": "stop", "tokens": [5, 6, 2], "logprobs": [-0.5, -1.25, -0.01]}]}`, ""},
		{`{"sequences": [{"stop_reason": "length", "tokens": [5, 6, 3], "logprobs": [-0.5, -1.25, -0.01]}]}`, ""},
		{`{"sequences": []}`, "0 sequences"},
		{`{"sequences": [{"stop_reason": "stop", "tokens": [5, 2], "logprobs": [-0.5]}]}`, "2 tokens with 1 logprobs"},
		{`{"sequences": [{"stop_reason": "stop", "tokens": [5, 2], "logprobs": null}]}`, "no logprobs"},
		{`{"sequences": [{"stop_reason": "stop", "tokens": [5, 6, 7, 2], "logprobs": [-1, -1, -1, -1]}]}`, "4 tokens for max_tokens 3"},
		{`{"sequences": [{"stop_reason": "stop", "tokens": [5, 40], "logprobs": [-1, -1]}]}`, "outside the vocabulary"},
		{`{"sequences": [{"stop_reason": "stop", "tokens": [5, 2], "logprobs": [-1, 0.5]}]}`, "logprob 1 is 0.5"},
		{`{"sequences": [{"stop_reason": "stop", "tokens": [5, 6], "logprobs": [-1, -1]}]}`, "none of the stop tokens"},
		{`{"sequences": [{"stop_reason": "abort", "tokens": [5, 6], "logprobs": [-1, -1]}]}`, `stop_reason "abort"`},
		{`[1, 2]`, "not a SampleOutput"},
	}
	for _, tc := range cases {
		c, err := decodeSample([]byte(tc.body), req, 32)
		if tc.want == "" {
			if err != nil || len(c.Tokens) != 3 {
				t.Errorf("%s: %+v %v", tc.body, c, err)
			}
			continue
		}
		if err == nil || !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.body, err, tc.want)
		}
	}
}

// FuzzDecodeSample: an asample result decodes into a completion that keeps the protocol, or
// into an error; never a panic.
func FuzzDecodeSample(f *testing.F) {
	f.Add(testdata(f, "sample_result.json"))
	f.Add([]byte(`{"sequences": [{"stop_reason": "length", "tokens": [1, 1, 1, 1], "logprobs": [-0.1, -0.2, -0.3, -1e9]}]}`))
	f.Add([]byte(`{"sequences": [{"stop_reason": "stop", "tokens": [-1], "logprobs": [1e400]}]}`))
	f.Add([]byte(`{"sequences": null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		req := infer.Request{MaxTokens: 4, Stop: []int32{2}}
		c, err := decodeSample(data, req, 10)
		if err != nil {
			return
		}
		if len(c.Tokens) != len(c.Logprobs) || len(c.Tokens) == 0 || len(c.Tokens) > 4 {
			t.Fatalf("lengths %d/%d", len(c.Tokens), len(c.Logprobs))
		}
		for i, lp := range c.Logprobs {
			if !(lp <= 0) || math.IsInf(float64(lp), 0) || c.Tokens[i] < 0 || c.Tokens[i] >= 10 {
				t.Fatalf("token %d: %d at %v", i, c.Tokens[i], lp)
			}
		}
		if c.Finish == infer.FinishStop && c.Tokens[len(c.Tokens)-1] != 2 {
			t.Fatal("stop without a stop token")
		}
		var v any
		if json.Unmarshal(data, &v) != nil {
			t.Fatal("decoded what is not JSON")
		}
	})
}
