package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/tokenizer"
)

// TestTokenizeChat: `agentrl tokenize --chat` prints exactly the ids of the conversation as
// agentrl's tokenizer renders it with its ChatML template.
func TestTokenizeChat(t *testing.T) {
	tok, err := tokenizer.Train([]string{"hello there, what is two plus two? four. tools and calls"}, tokenizer.TrainOptions{VocabSize: 300})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := tok.Save(dir); err != nil {
		t.Fatal(err)
	}
	conv := filepath.Join(dir, "conv.json")
	if err := os.WriteFile(conv, []byte(`[{"role": "system", "content": "be brief"}, {"role": "user", "content": "what is two plus two?"}, {"role": "assistant", "content": "four"}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	msgs := []tokenizer.Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "what is two plus two?"}, {Role: "assistant", Content: "four"}}
	for _, gen := range []bool{true, false} {
		args := []string{"tokenize", "--tokenizer", dir, "--chat", conv}
		if !gen {
			args = append(args, "--no-generation-prompt")
		}
		out, err := runCLI(t, args...)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		want := tok.EncodeChat(msgs, gen)
		var b strings.Builder
		fmt.Fprintf(&b, "# rendered: %q\n", tokenizer.RenderChat(msgs, gen))
		for i, id := range want {
			fmt.Fprintf(&b, "%d\t%d\t%q\n", i, id, tok.Decode([]int32{id}))
		}
		fmt.Fprintf(&b, "# %d tokens\n", len(want))
		if out != b.String() {
			t.Fatalf("gen=%v:\n%s\nwant\n%s", gen, out, b.String())
		}
	}
	out, err := runCLI(t, "tokenize", "--tokenizer", dir, "two<|im_end|>")
	if err != nil || !strings.Contains(out, fmt.Sprintf("\t%d\t\"<|im_end|>\"\n", tok.EndOfTurn())) {
		t.Fatalf("plain text: %v\n%s", err, out)
	}
	if _, err := runCLI(t, "tokenize", "--tokenizer", dir, "--tools", conv, "x"); err == nil {
		t.Fatal("--tools without --chat was accepted")
	}
}
