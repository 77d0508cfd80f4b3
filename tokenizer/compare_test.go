package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCompatible(t *testing.T) {
	corpus := []string{"the agent calls the calculator", "2 + 3 = 5", "search for the capital"}
	a, err := Train(corpus, DefaultTrainOptions(300))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := a.Save(dir); err != nil {
		t.Fatal(err)
	}
	same, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := Compatible(a, same); err != nil {
		t.Fatalf("a saved and reloaded tokenizer: %v", err)
	}
	other, _ := Train([]string{"quite another corpus of words", "with other merges entirely"}, DefaultTrainOptions(300))
	if err := Compatible(a, other); err == nil {
		t.Fatal("another vocabulary passed")
	}
	// The same vocabulary with one special token renamed.
	data, err := os.ReadFile(filepath.Join(dir, TokenizerFile))
	if err != nil {
		t.Fatal(err)
	}
	renamed := strings.ReplaceAll(string(data), `"<|endoftext|>"`, `"<|end_of_text|>"`)
	if renamed == string(data) {
		t.Fatal("no <|endoftext|> in the saved tokenizer.json")
	}
	dir2 := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir2, TokenizerFile), []byte(renamed), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := Load(dir2)
	if err != nil {
		t.Fatal(err)
	}
	if err := Compatible(a, b); err == nil || !strings.Contains(err.Error(), "end_of_text") {
		t.Fatalf("a renamed special token: %v", err)
	}
}
