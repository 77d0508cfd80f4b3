package tokenizer

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// peerModule locates the npm tokenizers package that scripts/setup installs, or skips the test.
func peerModule(t *testing.T) (node, module string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed; run scripts/setup")
	}
	module, err = filepath.Abs(filepath.Join("..", "scripts", "peers", "node_modules", "tokenizers"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(module, "index.js")); err != nil {
		t.Skip("npm package tokenizers is not installed; run scripts/setup")
	}
	return node, module
}

// peerTexts is what both implementations encode: valid UTF-8 only (JavaScript strings cannot
// carry anything else), covering the edge cases, generated agent turns, and long words that take
// the heap path of the merge loop.
func peerTexts() []string {
	texts := append([]string{}, edgeTexts...)
	texts = append(texts, genCorpus(99, 300)...)
	texts = append(texts,
		strings.Repeat("ab", 400),
		strings.Repeat("the", 300)+" "+strings.Repeat("é", 200),
		strings.Repeat(" ", 300)+"x"+strings.Repeat("\n", 100),
		strings.Repeat("1234567890", 40),
		strings.Join(edgeTexts, ""),
	)
	return texts
}

type peerResult struct {
	Ours struct {
		IDs     [][]int32 `json:"ids"`
		Decoded []string  `json:"decoded"`
	} `json:"ours"`
	Merges   [][2]string `json:"merges"`
	Variants map[string]struct {
		Dir string    `json:"dir"`
		IDs [][]int32 `json:"ids"`
	} `json:"variants"`
}

func runPeer(t *testing.T, ours *Tokenizer, corpus, texts []string, vocabSize int) peerResult {
	t.Helper()
	node, module := peerModule(t)
	dir := t.TempDir()
	oursDir := filepath.Join(dir, "ours")
	if err := ours.Save(oursDir); err != nil {
		t.Fatal(err)
	}
	var specials [][2]any
	for _, s := range chatSpecials {
		specials = append(specials, [2]any{s.content, s.special})
	}
	job, err := json.Marshal(map[string]any{
		"ours": oursDir, "texts": texts, "corpus": corpus, "vocabSize": vocabSize,
		"specials": specials, "variantsDir": filepath.Join(dir, "hf"),
	})
	if err != nil {
		t.Fatal(err)
	}
	jobPath, resPath := filepath.Join(dir, "job.json"), filepath.Join(dir, "result.json")
	if err := os.WriteFile(jobPath, job, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, filepath.Join("testdata", "hfpeer.js"), module, jobPath, resPath)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("node peer failed: %v\n%s", err, out)
	}
	data, err := os.ReadFile(resPath)
	if err != nil {
		t.Fatal(err)
	}
	var res peerResult
	if err := json.Unmarshal(data, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Ours.IDs) != len(texts) {
		t.Fatalf("peer returned %d encodings for %d texts", len(res.Ours.IDs), len(texts))
	}
	return res
}

// TestHuggingFacePeer checks compatibility against the official implementation: Hugging Face
// encodes and decodes with the file Save wrote exactly as Encode and Decode do; an independent
// trainer over Hugging Face's pre-tokenizer learns the same merges as Train; and files Hugging
// Face wrote, in several configurations, load and encode identically.
func TestHuggingFacePeer(t *testing.T) {
	corpus := append(genCorpus(7, 600), edgeTexts...)
	const vocabSize = 450
	ours, err := Train(corpus, DefaultTrainOptions(vocabSize))
	if err != nil {
		t.Fatal(err)
	}
	texts := peerTexts()
	res := runPeer(t, ours, corpus, texts, vocabSize)

	t.Run("encode_our_file", func(t *testing.T) {
		for i, text := range texts {
			if got := ours.Encode(text); !slices.Equal(got, res.Ours.IDs[i]) {
				t.Errorf("text %d %q:\n ours %v\n   hf %v", i, clip(text), got, res.Ours.IDs[i])
			}
			if got := ours.Decode(res.Ours.IDs[i]); got != res.Ours.Decoded[i] {
				t.Errorf("decode of text %d: ours %q, hf %q", i, clip(got), clip(res.Ours.Decoded[i]))
			}
		}
	})
	t.Run("trainer_merges", func(t *testing.T) {
		if !slices.Equal(ours.mergeList, res.Merges) {
			n := min(len(ours.mergeList), len(res.Merges))
			for i := 0; i < n; i++ {
				if ours.mergeList[i] != res.Merges[i] {
					t.Fatalf("merge %d: ours %q, independent trainer %q (lengths %d, %d)",
						i, ours.mergeList[i], res.Merges[i], len(ours.mergeList), len(res.Merges))
				}
			}
			t.Fatalf("merge lists differ in length: ours %d, independent trainer %d", len(ours.mergeList), len(res.Merges))
		}
	})
	for name, v := range res.Variants {
		t.Run("load_hf_"+name, func(t *testing.T) {
			tok, err := Load(v.Dir)
			if err != nil {
				t.Fatal(err)
			}
			for i, text := range texts {
				if got := tok.Encode(text); !slices.Equal(got, v.IDs[i]) {
					t.Errorf("text %d %q:\n ours %v\n   hf %v", i, clip(text), got, v.IDs[i])
				}
			}
		})
	}
	if len(res.Variants) < 9 {
		t.Errorf("peer built %d variants, want 9", len(res.Variants))
	}
}

func clip(s string) string {
	if len(s) > 120 {
		return s[:120] + "..."
	}
	return s
}
