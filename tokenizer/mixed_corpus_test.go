package tokenizer

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// The mixed corpus the model-family peer test and benchmarks encode: deterministic documents of
// prose, code, JSON, numbers, whitespace runs, CJK, emoji, special tokens of every family written
// in the text, accented Latin (composed and decomposed), rare Unicode and long words. All of it is
// valid UTF-8 (JavaScript strings cannot carry anything else).

var (
	familySpecials = []string{
		"<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|begin_of_text|>", "<|end_of_text|>",
		"<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>", "<|python_tag|>", "<s>", "</s>",
		"<unk>", "<think>", "</think>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
		"<|reserved_special_token_5|>", "<|vision_pad|>",
	}
	proseWords = []string{"the", "model", "reads", "a", "file", "and", "returns", "its", "answer", "because",
		"tokenizer", "should", "never", "drift", "between", "turns", "when", "agents", "call", "tools",
		"internationalization", "counterintuitively", "reinforcement", "learning", "is", "fun", "QUICK",
		"Brown", "fox", "jumps", "over", "LAZY", "dog", "I", "you", "we", "they"}
	contractions = []string{"'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'M", "'LL", "'D", "'x", "'"}
	accented     = []string{"café", "naïve", "résumé", "Ångström", "Straße", "façade", "jalapeño", "über", "crème brûlée",
		"Øresund", "Łódź", "Dvořák", "İstanbul", "ÉCOLE", "coöperate", "señor", "ĳssel", "ǅemal"}
	cjkRanges = [][2]rune{{0x4E00, 0x9FA5}, {0x3041, 0x3096}, {0x30A1, 0x30FA}, {0xAC00, 0xD7A3}}
	emojis    = []string{"😀", "🙂", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷", "🇯🇵", "❤️", "✨", "🚀", "🤖", "🧠", "1️⃣", "🏳️‍🌈", "👩🏿‍💻", "🫠"}
	rareRunes = []string{"\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u202e", "\u200f", "\ue000", "\U000F0000",
		"\ufffd", "\u0000", "\u0007", "\u001b", "\u007f", "\u0085", "\u00ad", "\u034f", "\u0301\u0302\u0303",
		"\U0001D400", "\U0001D7D8", "\U00010330", "\u2167", "\u00bd", "\u00b2", "\uff10\uff11", "\u0660\u0661",
		"\u0966", "\u1100\u1161\u11a8", "\u00a0", "\u3000", "\u2028", "\u2029", "\u180e", "\u0378", "\U0001F9FF",
		"\ufb01", "\u2460", "\u212b", "\u2126", "\u0344", "\u0f73", "\u1e9b\u0323", "\u00c5", "A\u030a", "\uffff"}
	whitespace = []string{" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", " \n", "\n ", " \t ", "\u00a0", "\u3000", "    \n\n  "}
)

func pick[T any](rng *rand.Rand, xs []T) T { return xs[rng.IntN(len(xs))] }

func mixNumber(rng *rand.Rand) string {
	switch rng.IntN(6) {
	case 0:
		return fmt.Sprintf("%d", rng.Int64())
	case 1:
		return fmt.Sprintf("%.*f", rng.IntN(8), rng.NormFloat64()*1e4)
	case 2:
		return fmt.Sprintf("%d,%03d,%03d", rng.IntN(999), rng.IntN(1000), rng.IntN(1000))
	case 3:
		return fmt.Sprintf("%x", rng.Uint64())
	case 4:
		return fmt.Sprintf("%de%d", rng.IntN(100), rng.IntN(40)-20)
	}
	return strings.Repeat(fmt.Sprint(rng.IntN(10)), 1+rng.IntN(30))
}

func mixCJK(rng *rand.Rand, n int) string {
	var b strings.Builder
	r := pick(rng, cjkRanges)
	for i := 0; i < n; i++ {
		if rng.IntN(8) == 0 {
			b.WriteString(pick(rng, []string{"，", "。", "「", "」", "、", "！", "？", " ", "：", "1", "年"}))
			continue
		}
		b.WriteRune(r[0] + rune(rng.IntN(int(r[1]-r[0]))))
	}
	return b.String()
}

func mixProse(rng *rand.Rand, n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		switch k := rng.IntN(24); {
		case k < 14:
			b.WriteString(pick(rng, proseWords))
		case k < 16:
			b.WriteString(pick(rng, contractions))
		case k < 18:
			w := pick(rng, accented)
			if rng.IntN(2) == 0 {
				w = norm.NFD.String(w)
			}
			b.WriteString(w)
		case k < 19:
			b.WriteString(mixNumber(rng))
		case k < 20:
			b.WriteString(pick(rng, emojis))
		case k < 21:
			b.WriteString(pick(rng, rareRunes))
		case k < 22:
			b.WriteString(pick(rng, familySpecials))
		default:
			b.WriteString(pick(rng, []string{".", ",", "!", "?", ";", ":", "...", "--", "(", ")", "\"", "'", "-", "—", "«", "»"}))
		}
		if rng.IntN(6) == 0 {
			b.WriteString(pick(rng, whitespace))
		} else if rng.IntN(5) != 0 {
			b.WriteByte(' ')
		}
	}
	return b.String()
}

func mixCode(rng *rand.Rand) string {
	name := pick(rng, proseWords)
	ind := pick(rng, []string{"\t", "    ", "  ", "        "})
	switch rng.IntN(3) {
	case 0:
		return fmt.Sprintf("func %s(x int) (int, error) {\n%sif x > %s {\n%s%sreturn 0, fmt.Errorf(\"%s: %%d too big\", x)\n%s}\n%sreturn x*x + %d, nil // %s\n}\n",
			name, ind, mixNumber(rng), ind, ind, name, ind, ind, rng.IntN(1000), mixProse(rng, 4))
	case 1:
		return fmt.Sprintf("def %s(self, items):\n%s\"\"\"%s\"\"\"\n%sfor i, x in enumerate(items):\n%s%sif x['%s'] != %s:\n%s%s%sreturn i\n%sreturn None\n\n",
			name, ind, mixProse(rng, 6), ind, ind, ind, name, mixNumber(rng), ind, ind, ind, ind)
	}
	return fmt.Sprintf("const %s = async (req, res) => {\n%sconst { data } = await fetch(`/api/%s?id=${req.id}&n=%s`);\n%sres.json({ ok: true, data });\n};\n/* %s */\n",
		name, ind, name, mixNumber(rng), ind, mixProse(rng, 5))
}

func mixJSON(rng *rand.Rand, depth int) string {
	if depth > 2 || rng.IntN(4) == 0 {
		switch rng.IntN(5) {
		case 0:
			return mixNumber(rng)
		case 1:
			return pick(rng, []string{"true", "false", "null"})
		case 2:
			return fmt.Sprintf("%q", mixCJK(rng, 1+rng.IntN(6)))
		}
		return fmt.Sprintf("%q", mixProse(rng, 1+rng.IntN(5)))
	}
	var b strings.Builder
	if rng.IntN(3) == 0 {
		b.WriteString("[")
		for i, n := 0, 1+rng.IntN(4); i < n; i++ {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(mixJSON(rng, depth+1))
		}
		b.WriteString("]")
		return b.String()
	}
	pretty := rng.IntN(2) == 0
	b.WriteString("{")
	for i, n := 0, 1+rng.IntN(4); i < n; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		if pretty {
			b.WriteString("\n" + strings.Repeat("  ", depth+1))
		}
		fmt.Fprintf(&b, "%q: %s", pick(rng, proseWords)+"_"+fmt.Sprint(rng.IntN(99)), mixJSON(rng, depth+1))
	}
	if pretty {
		b.WriteString("\n" + strings.Repeat("  ", depth))
	}
	b.WriteString("}")
	return b.String()
}

func mixLongWord(rng *rand.Rand) string {
	switch rng.IntN(5) {
	case 0:
		return strings.Repeat(pick(rng, []string{"a", "ab", "the", "é", "中", "😀", "-", " ", "\n", "1"}), 50+rng.IntN(400))
	case 1:
		var b strings.Builder
		for i := 0; i < 100+rng.IntN(300); i++ {
			b.WriteByte("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"[rng.IntN(64)])
		}
		return b.String() + "=="
	case 2:
		return "https://example.com/" + strings.Repeat(pick(rng, proseWords)+"/", 20) + "?q=" + mixNumber(rng)
	case 3:
		return strings.Repeat(pick(rng, proseWords), 10+rng.IntN(30))
	}
	return strings.Repeat("pneumonoultramicroscopicsilicovolcanoconiosis", 1+rng.IntN(6))
}

// mixedCorpus returns n deterministic documents of the mixed corpus.
func mixedCorpus(seed uint64, n int) []string {
	rng := rand.New(rand.NewPCG(seed, 0x25))
	docs := make([]string, 0, n)
	for i := 0; i < n; i++ {
		var b strings.Builder
		for k, parts := 0, 1+rng.IntN(4); k < parts; k++ {
			switch rng.IntN(9) {
			case 0, 1:
				b.WriteString(mixProse(rng, 20+rng.IntN(60)))
			case 2:
				b.WriteString(mixCode(rng))
			case 3:
				b.WriteString(mixJSON(rng, 0))
			case 4:
				b.WriteString(mixCJK(rng, 10+rng.IntN(80)))
			case 5:
				for j := 0; j < 5+rng.IntN(20); j++ {
					b.WriteString(mixNumber(rng) + pick(rng, whitespace))
				}
			case 6:
				b.WriteString(mixLongWord(rng))
			case 7:
				fmt.Fprintf(&b, "%s%s\n%s%s%s", pick(rng, familySpecials), pick(rng, []string{"user", "assistant", "system", "tool"}),
					mixProse(rng, 10), pick(rng, familySpecials), pick(rng, whitespace))
			default:
				for j := 0; j < 3+rng.IntN(10); j++ {
					b.WriteString(pick(rng, whitespace) + pick(rng, rareRunes) + pick(rng, emojis))
				}
			}
			if rng.IntN(2) == 0 {
				b.WriteString(pick(rng, whitespace))
			}
		}
		docs = append(docs, b.String())
	}
	return docs
}
