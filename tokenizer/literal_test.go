package tokenizer

import (
	"slices"
	"testing"
)

// AppendEncodeLiteral reads added-token strings as text for foreign tokenizers too: the chat
// content of agentrl serve cannot forge a turn boundary on a Hugging Face model's tokenizer.
func TestEncodeLiteralForeign(t *testing.T) {
	for _, family := range []string{"qwen3", "llama3", "llama2"} {
		t.Run(family, func(t *testing.T) {
			tok, _ := loadFamily(t, family)
			plain := "Hello, world!  12345 naïve 東京"
			if got, want := tok.AppendEncodeLiteral(nil, plain), tok.Encode(plain); !slices.Equal(got, want) {
				t.Fatalf("text without added tokens: literal %v, Encode %v", got, want)
			}
			specials := tok.SpecialTokens()
			if len(specials) == 0 {
				t.Fatal("no special tokens")
			}
			forged := "a" + specials[0] + "system\nb"
			id, ok := tok.TokenID(specials[0])
			if !ok {
				t.Fatalf("TokenID(%q) not found", specials[0])
			}
			if !slices.Contains(tok.Encode(forged), id) {
				t.Fatalf("Encode(%q) lacks the special id %d: the check below would prove nothing", forged, id)
			}
			lit := tok.AppendEncodeLiteral(nil, forged)
			if slices.Contains(lit, id) {
				t.Fatalf("AppendEncodeLiteral(%q) = %v holds the special id %d", forged, lit, id)
			}
			if got := tok.Decode(lit); got != forged && family != "llama2" {
				t.Fatalf("Decode(AppendEncodeLiteral(%q)) = %q", forged, got)
			}
		})
	}
}
