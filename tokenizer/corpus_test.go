package tokenizer

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// Fixed fragments that exercise every branch of the pre-tokenizer and the added-token matcher.
var edgeTexts = []string{
	"",
	" ",
	"  ",
	"\n",
	"\n\n\n",
	"a",
	"Hello, world!",
	"  leading and trailing  ",
	"tabs\tand\t\tmore\t",
	"windows\r\nline\r\nends\r\n",
	"It's, we're, they've, I'm, you'll, he'd, don't; IT'S 'S 'sat 'll 'lx 're 'r 'v",
	"''s ' s 's's",
	"x'y ''' ' '",
	"numbers 123 4567890 3.14159 -42 1e10 0x1F 1,000,000",
	"  12  345   6789",
	"12345678901234567890123456789012345678901234567890",
	"full-width digits ０１２ and superscripts ²³ and fractions ½ ¾ and roman Ⅻ",
	"arabic-indic ٣٤٥ devanagari १२३",
	"Café naïve résumé Ångström Straße",
	"Привет, мир! Ёлка.",
	"日本語のテキストと中文字符",
	"한국어 텍스트",
	"مرحبا بالعالم",
	"emoji 😀😃 👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️ ✨",
	"nbsp\u00a0here and ideographic\u3000space and en\u2002space",
	"line\u2028separator and para\u2029sep and nel\u0085x",
	"mixed   \n\n  \t spaces\n  \n",
	"trailing spaces before special   <|im_end|>",
	"<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
	"<tool_call>{\"name\": \"calculator\", \"arguments\": {\"expression\": \"123456789 * 987654321\"}}</tool_call>",
	"<tool_response>121932631112635269</tool_response>",
	"<|im_end|><|im_end|><|endoftext|>",
	"almost <|im_end| special <|im_start <tool_call <tool_ and </tool_response>",
	"<<|im_end|>> <</tool_call>>",
	"func main() {\n\tfmt.Println(\"hi\")\n}\n",
	"def f(x):\n    return x ** 2  # square\n",
	"!!!??? ... --- *** ### $$$ %%% ^^^ &&& @@@",
	"a1b2c3 x86_64 utf-8 e.g. i.e. U.S.A.",
	"\u0000\u0001\u001f control \u007f chars",
	"combining e\u0301 and a\u0308 marks",
	"    indented code\n        deeper\n",
	"The answer is 42.\n\nThe answer is  42.",
}

var (
	words     = []string{"the", "agent", "calls", "a", "tool", "and", "reads", "its", "answer", "number", "sum", "of", "is", "what", "compute", "then", "result", "value", "multiply", "add"}
	uniWords  = []string{"größe", "naïve", "日本", "Ελληνικά", "данные", "🙂", "über", "façade", "数字", "ℕ"}
	spaceRuns = []string{" ", " ", " ", "  ", "\n", "\n\n", "\t", "   ", " \n", "\u00a0", "\r\n"}
	puncts    = []string{".", ",", "?", "!", ":", ";", "'s", "'re", "\"", "(", ")", "...", " -", "'"}
)

// genCorpus returns n deterministic documents in the style of agent turns: prose, arithmetic with
// large numbers, tool calls and responses, chat markup, unicode and odd whitespace.
func genCorpus(seed uint64, n int) []string {
	rng := rand.New(rand.NewPCG(seed, 0x70c))
	docs := make([]string, 0, n)
	for i := 0; i < n; i++ {
		docs = append(docs, genDoc(rng))
	}
	return docs
}

func genNumber(rng *rand.Rand) string {
	d := 1 + rng.IntN(18)
	var b strings.Builder
	b.WriteByte(byte('1' + rng.IntN(9)))
	for j := 1; j < d; j++ {
		b.WriteByte(byte('0' + rng.IntN(10)))
	}
	return b.String()
}

func genProse(rng *rand.Rand, n int) string {
	var b strings.Builder
	for j := 0; j < n; j++ {
		switch r := rng.IntN(20); {
		case r < 12:
			b.WriteString(words[rng.IntN(len(words))])
		case r < 14:
			b.WriteString(uniWords[rng.IntN(len(uniWords))])
		case r < 16:
			b.WriteString(genNumber(rng))
		case r < 18:
			b.WriteString(puncts[rng.IntN(len(puncts))])
		default:
			w := words[rng.IntN(len(words))]
			b.WriteString(strings.ToUpper(w[:1]) + w[1:])
		}
		b.WriteString(spaceRuns[rng.IntN(len(spaceRuns))])
	}
	return b.String()
}

func genDoc(rng *rand.Rand) string {
	a, b := genNumber(rng), genNumber(rng)
	switch rng.IntN(5) {
	case 0:
		return fmt.Sprintf("%s\n%s%s\n%s%s", ImStart+"user", "What is "+a+" + "+b+"?", ImEnd, ImStart+"assistant\n", genProse(rng, 8))
	case 1:
		return fmt.Sprintf("%s{\"name\": \"calculator\", \"arguments\": {\"expression\": \"%s * %s\"}}%s%s\n%s\n%s%s",
			ToolCallOpen, a, b, ToolCallClose, ImEnd, ImStart+"tool", ToolResponseOpen+a+b, ToolResponseClose+ImEnd)
	case 2:
		return edgeTexts[rng.IntN(len(edgeTexts))] + genProse(rng, 5)
	default:
		return genProse(rng, 10+rng.IntN(30))
	}
}
