package checkpoint

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/optim"
	"github.com/agentrl/agentrl/tokenizer"
)

var (
	sharedTokOnce sync.Once
	sharedTok     *tokenizer.Tokenizer
	sharedTokErr  error
)

// testTokenizer is a small trained tokenizer (300 ids), shared because training is the slow part.
func testTokenizer(t testing.TB) *tokenizer.Tokenizer {
	t.Helper()
	sharedTokOnce.Do(func() {
		corpus := []string{
			strings.Repeat("the agent calls a tool and reads the answer. ", 20),
			strings.Repeat("checkpoints hold weights, moments and the step count. ", 20),
			"<|im_start|>user\nwhat is 12 + 30?<|im_end|>\n<|im_start|>assistant\n42<|im_end|>",
		}
		sharedTok, sharedTokErr = tokenizer.Train(corpus, tokenizer.DefaultTrainOptions(300))
	})
	if sharedTokErr != nil {
		t.Fatal(sharedTokErr)
	}
	return sharedTok
}

// tinyConfig has grouped-query heads and two layers, and a vocabulary that holds testTokenizer.
func tinyConfig(tied bool) model.Config {
	return model.Config{Vocab: 300, Dim: 16, Layers: 2, Heads: 4, KVHeads: 2, Hidden: 24, MaxSeq: 32,
		RopeTheta: 10000, NormEps: 1e-5, TieEmbeddings: tied}
}

func newModel(t testing.TB, cfg model.Config, seed uint64) *model.Model {
	t.Helper()
	m, err := model.New(cfg, seed)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// randomState is an optimizer state with distinct values everywhere, so a moment read into the
// wrong tensor or the wrong half shows up.
func randomState(n int, seed uint64) *optim.State {
	rng := rand.New(rand.NewPCG(seed, 7))
	s := &optim.State{Step: int64(rng.IntN(1000) + 1), M: make([]float32, n), V: make([]float32, n)}
	for i := range s.M {
		s.M[i] = float32(rng.NormFloat64())
		s.V[i] = float32(rng.ExpFloat64())
	}
	return s
}

// firstDiff is the first index where a and b differ bitwise, or -1 when they are identical.
func firstDiff(a, b []float32) int {
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

func mustSave(t testing.TB, dir string, m *model.Model, st *State) {
	t.Helper()
	if err := Save(dir, m, testTokenizer(t), st); err != nil {
		t.Fatal(err)
	}
}

// siblings lists the entries of dir's parent that are not dir itself: leftovers of a Save.
func siblings(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Dir(dir))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.Name() != filepath.Base(dir) {
			out = append(out, e.Name())
		}
	}
	return out
}

// expectErr fails unless err is non-nil and mentions every fragment.
func expectErr(t *testing.T, err error, fragments ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one mentioning %q", fragments)
	}
	t.Log(err)
	for _, f := range fragments {
		if !strings.Contains(err.Error(), f) {
			t.Fatalf("error %q does not mention %q", err, f)
		}
	}
}
