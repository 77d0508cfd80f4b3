package tokenizer

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// agentTurns returns n texts shaped like what the rollout encodes: prompts with arithmetic tasks,
// tool calls, tool responses with large numbers, and free-text observations.
func agentTurns(n int) []string {
	rng := rand.New(rand.NewPCG(31, 32))
	out := make([]string, n)
	for i := range out {
		a, b := genNumber(rng), genNumber(rng)
		switch i % 4 {
		case 0:
			out[i] = fmt.Sprintf("%ssystem\nYou are a careful assistant. Use the calculator tool for arithmetic.%s\n%suser\nWhat is %s * %s? Answer with the number only.%s\n%sassistant\n",
				ImStart, ImEnd, ImStart, a, b, ImEnd, ImStart)
		case 1:
			out[i] = fmt.Sprintf(`%s{"name": "calculator", "arguments": {"expression": "%s * %s"}}%s`, ToolCallOpen, a, b, ToolCallClose)
		case 2:
			out[i] = fmt.Sprintf("\n%stool\n%s%s%s%s\n%sassistant\n", ImStart, ToolResponseOpen, a+b, ToolResponseClose, ImEnd, ImStart)
		default:
			out[i] = genProse(rng, 40)
		}
	}
	return out
}

// BenchmarkEncode measures Encode on the agent-turn mix with a warm cache (the steady state of a
// rollout) and with the cache turned off (every word merged from scratch).
func BenchmarkEncode(b *testing.B) {
	tok := testTokenizer(b)
	texts := agentTurns(512)
	var bytes, tokens int
	for _, s := range texts {
		bytes += len(s)
		tokens += len(tok.Encode(s))
	}
	b.Run("warm", func(b *testing.B) {
		dst := make([]int32, 0, 4096)
		b.SetBytes(int64(bytes))
		b.ReportAllocs()
		for b.Loop() {
			for _, s := range texts {
				dst = tok.AppendEncode(dst[:0], s)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*tokens), "ns/token")
	})
	b.Run("nocache", func(b *testing.B) {
		saved := tok.cache
		tok.cache = nil
		defer func() { tok.cache = saved }()
		dst := make([]int32, 0, 4096)
		b.SetBytes(int64(bytes))
		b.ReportAllocs()
		for b.Loop() {
			for _, s := range texts {
				dst = tok.AppendEncode(dst[:0], s)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*tokens), "ns/token")
	})
}

func BenchmarkDecode(b *testing.B) {
	tok := testTokenizer(b)
	var ids [][]int32
	bytes := 0
	for _, s := range agentTurns(512) {
		ids = append(ids, tok.Encode(s))
		bytes += len(s)
	}
	b.SetBytes(int64(bytes))
	for b.Loop() {
		for _, x := range ids {
			_ = tok.Decode(x)
		}
	}
}

// trainCorpus is about 4 MB of text with a natural-language-like word distribution: a lexicon of
// 30,000 pseudo-words built from syllables, drawn Zipf-distributed, with numbers, punctuation,
// capitals and the chat markup mixed in.
func trainCorpus() []string {
	rng := rand.New(rand.NewPCG(41, 42))
	onsets := []string{"", "b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "st", "tr", "ch", "th", "sh", "pl", "gr"}
	vowels := []string{"a", "e", "i", "o", "u", "ea", "ou", "ai", "io"}
	codas := []string{"", "", "n", "r", "s", "t", "l", "nd", "ng", "st", "ck", "m"}
	lexicon := make([]string, 30000)
	for i := range lexicon {
		var w strings.Builder
		for n := 1 + rng.IntN(4); n > 0; n-- {
			w.WriteString(onsets[rng.IntN(len(onsets))] + vowels[rng.IntN(len(vowels))] + codas[rng.IntN(len(codas))])
		}
		lexicon[i] = w.String()
	}
	zipf := rand.NewZipf(rng, 1.1, 2, uint64(len(lexicon)-1))
	var docs []string
	for size := 0; size < 4<<20; {
		var d strings.Builder
		for n := 20 + rng.IntN(200); n > 0; n-- {
			w := lexicon[zipf.Uint64()]
			switch r := rng.IntN(40); {
			case r == 0:
				w = genNumber(rng)
			case r == 1:
				w = strings.ToUpper(w[:1]) + w[1:]
			case r == 2:
				w += puncts[rng.IntN(len(puncts))]
			}
			d.WriteString(w)
			d.WriteString(spaceRuns[rng.IntN(len(spaceRuns))])
		}
		if rng.IntN(4) == 0 {
			d.WriteString(ImEnd + "\n" + ImStart + "assistant\n")
		}
		docs = append(docs, d.String())
		size += d.Len()
	}
	return docs
}

// BenchmarkTrain1000 learns 1000 merges (vocabulary 1263) from trainCorpus.
func BenchmarkTrain1000(b *testing.B) {
	corpus := trainCorpus()
	size := 0
	for _, d := range corpus {
		size += len(d)
	}
	for b.Loop() {
		tok, err := Train(corpus, DefaultTrainOptions(len(chatSpecials)+256+1000))
		if err != nil {
			b.Fatal(err)
		}
		if tok.NumMerges() < 1000 {
			b.Fatalf("learned %d merges", tok.NumMerges())
		}
	}
	b.ReportMetric(float64(size)/1e6, "corpus-MB")
}
