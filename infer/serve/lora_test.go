package serve

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/agentrl/agentrl/checkpoint"
	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/model"
)

// A folder of the base weights and a LoRA adapter pushed to the weight route is served as the
// next version with its adapter: greedy decoding then follows the adapted model; pushing the
// plain base again goes back to it.
func TestWeightsRouteSwapsAdapters(t *testing.T) {
	base := testCheckpoint(t)
	srv, err := Open(base, Options{Slots: 2, APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	hs := newHTTPTest(t, srv)
	greedy := func() []int32 {
		code, body := post(t, hs.URL+"/agentrl/v1/generate", "k", infer.Request{Prompt: []int32{10, 11, 12}, MaxTokens: 12, Sampling: infer.Sampling{Temperature: 0}})
		if code != 200 {
			t.Fatalf("%d %s", code, body)
		}
		return mustDecode[infer.Completion](t, body).Tokens
	}
	before := greedy()

	// The adapter folder: the base's files, and an adapter with large random weights.
	dir := filepath.Join(t.TempDir(), "adapted")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"config.json", "model.safetensors"} {
		data, err := os.ReadFile(filepath.Join(base, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m, err := checkpoint.LoadModel(base)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.AddLoRA(model.LoRAConfig{Rank: 4, Alpha: 8, Targets: []string{"q_proj", "v_proj", "down_proj"}}, 1); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	for i := range m.LoRA.Data {
		m.LoRA.Data[i] = float32(rng.NormFloat64())
	}
	if err := checkpoint.SaveAdapter(dir, m, "base"); err != nil {
		t.Fatal(err)
	}
	if code, body := post(t, hs.URL+"/agentrl/v1/weights", "k", map[string]any{"path": dir, "version": 5}); code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	adapted := greedy()
	if slices.Equal(adapted, before) {
		t.Fatalf("greedy tokens %v unchanged by the adapter", adapted)
	}
	// The same as a local model with the adapter merged.
	want := greedyLocal(t, m.Merged(), []int32{10, 11, 12}, 12)
	n := min(len(adapted), len(want)) // the server stops at an end-of-turn token
	if n == 0 || !slices.Equal(adapted[:n], want[:n]) {
		t.Fatalf("served with the adapter %v, merged locally %v", adapted, want)
	}
	if code, body := post(t, hs.URL+"/agentrl/v1/weights", "k", map[string]any{"path": base, "version": 6}); code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	if got := greedy(); !slices.Equal(got, before) {
		t.Fatalf("back on the base: %v, first %v", got, before)
	}
}

// greedyLocal decodes n tokens greedily from prompt (stopping at nothing).
func greedyLocal(t *testing.T, m *model.Model, prompt []int32, n int) []int32 {
	t.Helper()
	c := m.NewKVCache(1, len(prompt)+n)
	logits := make([]float32, m.Cfg.Vocab)
	if err := m.Prefill(c, 0, prompt, logits); err != nil {
		t.Fatal(err)
	}
	var out []int32
	for range n {
		best := int32(0)
		for i, v := range logits {
			if v > logits[best] {
				best = int32(i)
			}
		}
		out = append(out, best)
		if len(out) == n {
			break
		}
		if err := m.Step(c, []int{0}, []int32{best}, logits); err != nil {
			t.Fatal(err)
		}
	}
	return out
}
