package tokenizer

import (
	"sync"
	"testing"
)

var (
	sharedOnce sync.Once
	sharedTok  *Tokenizer
	sharedErr  error
)

// testTokenizer is trained once per test binary on the generated corpus.
func testTokenizer(t testing.TB) *Tokenizer {
	t.Helper()
	sharedOnce.Do(func() {
		corpus := append(genCorpus(1, 3000), edgeTexts...)
		sharedTok, sharedErr = Train(corpus, DefaultTrainOptions(1200))
	})
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	return sharedTok
}

func TestRoundTrip(t *testing.T) {
	tok := testTokenizer(t)
	for _, text := range append(edgeTexts, genCorpus(2, 200)...) {
		ids := tok.Encode(text)
		if got := tok.Decode(ids); got != text {
			t.Errorf("Decode(Encode(%q)) = %q", text, got)
		}
	}
}
