package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/checkpoint"
	"github.com/agentrl/agentrl/hub/hubtest"
	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/tokenizer"
)

// tinyModel is a model of one small layer, at its seeded initial weights, and a tokenizer trained
// on corpus.
func tinyModel(t *testing.T, corpus string) (*model.Model, *tokenizer.Tokenizer) {
	t.Helper()
	tok, err := tokenizer.Train([]string{corpus}, tokenizer.TrainOptions{VocabSize: 300})
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.New(model.Config{Vocab: tok.VocabSize(), Dim: 16, Layers: 1, Heads: 2, KVHeads: 1, Hidden: 32, MaxSeq: 384, RopeTheta: 10000, NormEps: 1e-5, TieEmbeddings: true}, 1)
	if err != nil {
		t.Fatal(err)
	}
	return m, tok
}

// tinyCheckpoint saves tinyModel(corpus) as a checkpoint in a fresh directory and returns it.
func tinyCheckpoint(t *testing.T, corpus string) string {
	t.Helper()
	m, tok := tinyModel(t, corpus)
	ck := filepath.Join(t.TempDir(), "ck")
	if err := checkpoint.Save(ck, m, tok, nil); err != nil {
		t.Fatal(err)
	}
	return ck
}

// hubCheckpoint publishes a small checkpoint on a local test Hub as org/tiny and points the
// HF_* variables at it and at a fresh cache.
func hubCheckpoint(t *testing.T) (local string, h *hubtest.Hub) {
	t.Helper()
	local = tinyCheckpoint(t, "What is 1 + 2? Answer: 3")
	files := map[string][]byte{}
	entries, err := os.ReadDir(local)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Type().IsRegular() {
			b, err := os.ReadFile(filepath.Join(local, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			files[e.Name()] = b
		}
	}
	h = hubtest.New(t, "org/tiny", files, "model.safetensors")
	home := t.TempDir()
	t.Setenv("HF_HOME", home)
	t.Setenv("HF_HUB_CACHE", "")
	t.Setenv("HUGGINGFACE_HUB_CACHE", "")
	t.Setenv("HF_ENDPOINT", h.API.URL)
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_TOKEN_PATH", "")
	t.Setenv("HF_HUB_OFFLINE", "")
	return local, h
}

// `agentrl eval --checkpoint hf:…` and `agentrl tokenize --tokenizer hf:…` download into the
// huggingface_hub cache and then read the snapshot as the local folder.
func TestHubReferencesOnTheCommandLine(t *testing.T) {
	local, h := hubCheckpoint(t)
	out, err := runCLI(t, "eval", "--checkpoint", "hf:org/tiny", "--env", "calc", "--tasks", "2", "--k", "0")
	if err != nil {
		t.Fatalf("eval hf:org/tiny: %v\n%s", err, out)
	}
	snap := filepath.Join(os.Getenv("HF_HOME"), "hub", "models--org--tiny", "snapshots", h.Commit, "model.safetensors")
	if _, err := os.Lstat(snap); err != nil {
		t.Fatalf("the weights are not in the cache: %v", err)
	}
	want, err := runCLI(t, "tokenize", "--tokenizer", local, "What is 1 + 2?")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("HF_HUB_OFFLINE", "1") // the tokenizer is cached now
	got, err := runCLI(t, "tokenize", "--tokenizer", "hf:org/tiny@main", "What is 1 + 2?")
	if err != nil || got != want {
		t.Fatalf("tokenize hf:org/tiny: %v\n%s\nwant\n%s", err, got, want)
	}
	if _, err := runCLI(t, "eval", "--checkpoint", "hf:org/absent", "--tasks", "2"); err == nil || !strings.Contains(err.Error(), "HF_HUB_OFFLINE") {
		t.Fatalf("offline, not cached: %v", err)
	}
	if _, err := runCLI(t, "serve", "--checkpoint", "hf:../escape"); err == nil || !strings.Contains(err.Error(), "ORG/NAME") {
		t.Fatalf("a bad reference: %v", err)
	}
	if _, err := runCLI(t, "eval", "--checkpoint", filepath.Join(local, "config.json")); err == nil || !strings.Contains(err.Error(), "not a folder") {
		t.Fatalf("a file as --checkpoint: %v", err)
	}
}
