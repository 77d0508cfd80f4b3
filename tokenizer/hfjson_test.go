package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestSaveLoadRoundTrip(t *testing.T) {
	tok := testTokenizer(t)
	dir := filepath.Join(t.TempDir(), "tok")
	if err := tok.Save(dir); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{TokenizerFile, ConfigFile}; !slices.Equal(names, want) {
		t.Errorf("Save wrote %q, want exactly %q (no temporary files left)", names, want)
	}
	back, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if back.VocabSize() != tok.VocabSize() || !slices.Equal(back.mergeList, tok.mergeList) {
		t.Fatalf("loaded tokenizer differs: size %d vs %d, %d vs %d merges", back.VocabSize(), tok.VocabSize(), back.NumMerges(), tok.NumMerges())
	}
	for _, text := range append(edgeTexts, genCorpus(8, 100)...) {
		if a, b := tok.Encode(text), back.Encode(text); !slices.Equal(a, b) {
			t.Errorf("Encode(%q): saved %v, loaded %v", clip(text), a, b)
		}
	}
	if back.ChatTemplate() != chatMLTemplate || back.config.eos != ImEnd || back.config.pad != EndOfText {
		t.Errorf("config after load: template %q, eos %q, pad %q", back.ChatTemplate(), back.config.eos, back.config.pad)
	}
	if got, want := back.AddedTokens(), tok.AddedTokens(); !slices.Equal(got, want) {
		t.Errorf("added tokens %q, want %q", got, want)
	}
	// Saving the loaded tokenizer reproduces both files byte for byte.
	dir2 := filepath.Join(t.TempDir(), "again")
	if err := back.Save(dir2); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{TokenizerFile, ConfigFile} {
		a, _ := os.ReadFile(filepath.Join(dir, name))
		b, _ := os.ReadFile(filepath.Join(dir2, name))
		if string(a) != string(b) {
			t.Errorf("%s changed through Load and Save", name)
		}
	}
}

// TestLoadRejects patches a valid file in ways Hugging Face would encode differently from this
// package, or that are malformed, and checks the error names the problem.
func TestLoadRejects(t *testing.T) {
	src := t.TempDir()
	if err := testTokenizer(t).Save(src); err != nil {
		t.Fatal(err)
	}
	base, err := os.ReadFile(filepath.Join(src, TokenizerFile))
	if err != nil {
		t.Fatal(err)
	}
	type obj = map[string]any
	tests := []struct {
		name  string
		patch func(f obj)
		want  string
	}{
		{"normalizer", func(f obj) { f["normalizer"] = obj{"type": "BertNormalizer"} }, `normalizer: type "BertNormalizer" is not supported`},
		{"nested normalizer", func(f obj) {
			f["normalizer"] = obj{"type": "Sequence", "normalizers": []any{obj{"type": "NFC"}, obj{"type": "Precompiled", "precompiled_charsmap": "AA=="}}}
		}, `Sequence[1]: type "Precompiled"`},
		{"truncation", func(f obj) { f["truncation"] = obj{"max_length": 8} }, "truncation is set"},
		{"unknown key", func(f obj) { f["extra"] = 1 }, `unsupported key "extra"`},
		{"wordpiece", func(f obj) { f["model"].(obj)["type"] = "WordPiece" }, `type "WordPiece" is not supported`},
		{"dropout", func(f obj) { f["model"].(obj)["dropout"] = 0.1 }, "dropout"},
		{"byte fallback", func(f obj) { f["model"].(obj)["byte_fallback"] = true }, "byte_fallback"},
		{"suffix", func(f obj) { f["model"].(obj)["end_of_word_suffix"] = "</w>" }, "end_of_word_suffix"},
		{"split behavior", func(f obj) { f["pre_tokenizer"] = obj{"type": "Split", "pattern": obj{"Regex": "x"}} }, `behavior ""`},
		{"split regex", func(f obj) {
			f["pre_tokenizer"] = obj{"type": "Split", "pattern": obj{"Regex": "(x"}, "behavior": "Isolated", "invert": false}
		}, `regex "(x"`},
		{"whitespace pre-tokenizer", func(f obj) { f["pre_tokenizer"] = obj{"type": "Whitespace"} }, `type "Whitespace" is not supported`},
		{"wordpiece decoder", func(f obj) { f["decoder"] = obj{"type": "WordPiece", "prefix": "##", "cleanup": true} }, `decoder: type "WordPiece"`},
		{"roberta post-processor", func(f obj) { f["post_processor"] = obj{"type": "Unknown"} }, `post_processor: type "Unknown"`},
		{"template post-processor id", func(f obj) {
			f["post_processor"] = obj{"type": "TemplateProcessing",
				"single":         []any{obj{"SpecialToken": obj{"id": "<s>", "type_id": 0}}, obj{"Sequence": obj{"id": "A", "type_id": 0}}},
				"special_tokens": obj{"<s>": obj{"id": "<s>", "ids": []any{999999}, "tokens": []any{"<s>"}}}}
		}, "special token id 999999"},
		{"digits after bytelevel", func(f obj) {
			seq := f["pre_tokenizer"].(obj)["pretokenizers"].([]any)
			seq[0], seq[1] = seq[1], seq[0]
		}, "after ByteLevel"},
		{"bpe decoder", func(f obj) { f["decoder"] = obj{"type": "BPEDecoder", "suffix": "</w>"} }, "decoder"},
		{"merge out of vocab", func(f obj) {
			m := f["model"].(obj)
			m["merges"] = append(m["merges"].([]any), []any{"Ġ", "zzzz"})
		}, `uses a token missing`},
		{"merge result out of vocab", func(f obj) {
			m := f["model"].(obj)
			m["merges"] = append(m["merges"].([]any), []any{"q", "q"})
		}, `produces "qq"`},
		{"duplicate merge", func(f obj) {
			m := f["model"].(obj)
			ms := m["merges"].([]any)
			m["merges"] = append(ms, ms[0])
		}, "repeats merge 0"},
		{"bad string merge", func(f obj) { f["model"].(obj)["merges"] = []any{"a b c"} }, "not two tokens"},
		{"duplicate id", func(f obj) { f["model"].(obj)["vocab"].(obj)["Ġzz"] = 300 }, "id 300 is used by both"},
		{"negative id", func(f obj) { f["model"].(obj)["vocab"].(obj)["Ġzz"] = -3 }, "negative id"},
		{"added id mismatch", func(f obj) { f["added_tokens"].([]any)[0].(obj)["id"] = 5 }, "would give it id 0"},
		{"unknown unk", func(f obj) { f["model"].(obj)["unk_token"] = "<nope>" }, "unk_token"},
		{"not json", nil, "load"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			data := []byte("{not json")
			if tt.patch != nil {
				var f obj
				if err := json.Unmarshal(base, &f); err != nil {
					t.Fatal(err)
				}
				tt.patch(f)
				if data, err = json.Marshal(f); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(dir, TokenizerFile), data, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Load(dir)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Load error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestLoadConfig(t *testing.T) {
	src := t.TempDir()
	if err := testTokenizer(t).Save(src); err != nil {
		t.Fatal(err)
	}
	tokJSON, err := os.ReadFile(filepath.Join(src, TokenizerFile))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, config string
		eos, pad     string
		template     string
		wantErr      string
	}{
		{"absent", "", ImEnd, EndOfText, chatMLTemplate, ""},
		{"object tokens", `{"eos_token": {"content": "<|endoftext|>"}, "pad_token": null, "chat_template": "T"}`, EndOfText, "", "T", ""},
		{"named templates", `{"chat_template": [{"name": "tool_use", "template": "U"}, {"name": "default", "template": "D"}]}`, "", "", "D", ""},
		{"unknown eos", `{"eos_token": "</s>"}`, "", "", "", `eos_token "</s>" is not a token`},
		{"bad template", `{"chat_template": 3}`, "", "", "", "chat_template"},
		{"not an object", `[1]`, "", "", "", "tokenizer_config.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, TokenizerFile), tokJSON, 0o644); err != nil {
				t.Fatal(err)
			}
			if tt.config != "" {
				if err := os.WriteFile(filepath.Join(dir, ConfigFile), []byte(tt.config), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			tok, err := Load(dir)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Load error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tok.config.eos != tt.eos || tok.config.pad != tt.pad || tok.ChatTemplate() != tt.template {
				t.Errorf("eos %q pad %q template %q; want %q %q %q", tok.config.eos, tok.config.pad, tok.ChatTemplate(), tt.eos, tt.pad, tt.template)
			}
		})
	}
}

func TestLoadMissingDir(t *testing.T) {
	if _, err := Load(filepath.Join(t.TempDir(), "nope")); err == nil || !strings.Contains(err.Error(), TokenizerFile) {
		t.Errorf("Load of a missing directory: %v", err)
	}
}
