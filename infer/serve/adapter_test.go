package serve

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/checkpoint"
	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/tokenizer"
)

// adapterFor saves a LoRA adapter with random weights for m's shape into a fresh folder, PEFT's
// files alone, recording base as its base_model_name_or_path.
func adapterFor(t *testing.T, m *model.Model, base string) (string, *model.Model) {
	t.Helper()
	m = m.Merged()
	if err := m.AddLoRA(model.LoRAConfig{Rank: 4, Alpha: 8, Targets: []string{"q_proj", "v_proj", "down_proj"}}, 1); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(2, 2))
	for i := range m.LoRA.Data {
		m.LoRA.Data[i] = float32(rng.NormFloat64())
	}
	dir := filepath.Join(t.TempDir(), "adapter")
	if err := checkpoint.SaveAdapter(dir, m, base); err != nil {
		t.Fatal(err)
	}
	return dir, m
}

// serve --checkpoint BASE --adapter DIR: the base with the adapter decodes as the merged model.
func TestOpenAdapter(t *testing.T) {
	base := testCheckpoint(t)
	m, err := checkpoint.LoadModel(base)
	if err != nil {
		t.Fatal(err)
	}
	ad, adapted := adapterFor(t, m, "org/tiny")
	srv, err := OpenAdapter(base, "org/tiny", ad, Options{Slots: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	hs := newHTTPTest(t, srv)
	code, body := post(t, hs.URL+"/agentrl/v1/generate", "", infer.Request{Prompt: []int32{10, 11, 12}, MaxTokens: 12, Sampling: infer.Sampling{Temperature: 0}})
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	got := mustDecode[infer.Completion](t, body).Tokens
	want := greedyLocal(t, adapted.Merged(), []int32{10, 11, 12}, 12)
	plain := greedyLocal(t, m, []int32{10, 11, 12}, 12)
	n := min(len(got), len(want))
	if n == 0 || !slices.Equal(got[:n], want[:n]) || slices.Equal(want, plain) {
		t.Fatalf("served %v; merged locally %v; base alone %v", got, want, plain)
	}
}

// An adapter for another base is refused by name: its tensors' shapes, its recorded base's
// repository (given, or read from the Hub cache's folder name), its folder's own architecture;
// and a base that holds an adapter already.
func TestOpenAdapterRefusesAnotherBase(t *testing.T) {
	base := testCheckpoint(t)
	m, err := checkpoint.LoadModel(base)
	if err != nil {
		t.Fatal(err)
	}
	ad, _ := adapterFor(t, m, "org/tiny")

	wider := m.Cfg
	wider.Dim, wider.Hidden = 2*m.Cfg.Dim, 2*m.Cfg.Hidden
	other, err := model.New(wider, 1)
	if err != nil {
		t.Fatal(err)
	}
	otherAd, _ := adapterFor(t, other, "org/wide")

	// The base as huggingface_hub's cache lays out org/other.
	cached := filepath.Join(t.TempDir(), "models--org--other", "snapshots", "0123abcd")
	copyDir(t, base, cached)
	withAdapter := filepath.Join(t.TempDir(), "with")
	copyDir(t, base, withAdapter)
	copyDir(t, ad, withAdapter)
	// A run's checkpoint folder: an adapter beside a base of another shape.
	runCk := filepath.Join(t.TempDir(), "run")
	if err := checkpoint.Save(runCk, other, mustTok(t, base), nil); err != nil {
		t.Fatal(err)
	}
	copyDir(t, ad, runCk)

	for _, tc := range []struct {
		name, base, baseName, adapter string
		want                          []string
	}{
		{"shapes", base, "", otherAd, []string{"adapter", "lora_A"}},
		{"named base", base, "org/base", ad, []string{`trained on "org/tiny"`, "org/base"}},
		{"cached base", cached, "", ad, []string{`trained on "org/tiny"`, "org/other"}},
		{"base with an adapter", withAdapter, "", ad, []string{"holds an adapter already"}},
		{"run folder of another architecture", base, "", runCk, []string{"another architecture"}},
	} {
		_, err := OpenAdapter(tc.base, tc.baseName, tc.adapter, Options{Slots: 2})
		if err == nil {
			t.Errorf("%s: served", tc.name)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", tc.name, err, w)
			}
		}
	}
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if err := os.MkdirAll(to, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func mustTok(t *testing.T, dir string) *tokenizer.Tokenizer {
	t.Helper()
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
