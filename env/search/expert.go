package search

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"

	"github.com/agentrl/agentrl/tool"
)

// namePat matches an entity name: capitalized words separated by single spaces.
const namePat = `([A-Z][a-z]+(?: [A-Z][a-z]+)*)`

// factRe and decoyRe find, in one result line, the target of a relation and of its distractor.
var factRe, decoyRe [numRels]*regexp.Regexp

func init() {
	for r, ri := range rels {
		factRe[r] = regexp.MustCompile(`\b` + regexp.QuoteMeta(ri.phrase) + ` ` + namePat)
		if ri.decoy != "" {
			decoyRe[r] = regexp.MustCompile(`\b` + regexp.QuoteMeta(ri.decoy) + ` ` + namePat)
		}
	}
}

// Expert answers by reading: for a chain it searches the named entity, reads the hop's fact from
// that entity's result line, searches what it found, and so on; for an intersection it searches
// both constraints and picks the result that satisfies both. It learns nothing from the knowledge
// base except when it errs on purpose, so a retrieval that misses the fact makes it fail — the
// expert's success rate measures the tool as much as the policy.
//
// With probability noise, at each decision it errs: before the first search it guesses an answer
// of the right type without searching; after a search it follows a wrong hop (the document's
// distractor fact, e.g. "visited" for "born in", or a random entity of the right type).
type Expert struct {
	w     *world
	q     question
	noise float64
	rng   *rand.Rand
	err   error

	turn int    // actions taken
	hop  int    // chain relations resolved so far
	cur  string // the entity the next lookup is about
}

// NewExpert returns the expert for the task of seed. A nil rng gets one seeded from seed.
func NewExpert(seed int64, noise float64, rng *rand.Rand) *Expert {
	return NewExpertAt(0, seed, noise, rng)
}

// NewExpertAt returns the expert for the task of seed at level (Config.Level: 0 the default
// mix).
func NewExpertAt(level int, seed int64, noise float64, rng *rand.Rand) *Expert {
	if rng == nil {
		rng = rand.New(rand.NewPCG(uint64(seed), 0x657870))
	}
	x := &Expert{noise: noise, rng: rng}
	w, err := sharedWorld()
	if err != nil {
		x.err = err
		return x
	}
	x.w = w
	x.q = w.kb.newQuestion(seed, heldoutSeeds.Contains(seed), level)
	x.cur = w.kb.ents[x.q.start].name
	return x
}

// randomName is a uniformly drawn entity of kind kd: a guess.
func (x *Expert) randomName(kd kind) string {
	ids := x.w.kb.byKind[kd]
	return x.w.kb.ents[ids[x.rng.IntN(len(ids))]].name
}

// errs decides whether this decision is a mistake.
func (x *Expert) errs() bool { return x.noise > 0 && x.rng.Float64() < x.noise }

// Act implements env.Agent.
func (x *Expert) Act(ctx context.Context, obs string) (string, error) {
	if x.err != nil {
		return "", x.err
	}
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("search expert: %w", err)
	}
	x.turn++
	k := x.w.kb
	if x.turn == 1 {
		if x.errs() {
			return answer(x.randomName(k.ents[x.q.answer].kind)), nil
		}
		if x.q.form == formIntersect {
			return searchCallK(k.intersectQuery(&x.q), 2), nil
		}
		return searchCall(x.cur), nil
	}
	lines := resultLines(obs)
	if x.q.form == formIntersect {
		return answer(x.pickIntersection(lines)), nil
	}
	r := x.q.chain[x.hop]
	next, found := readFact(lines, x.cur, factRe[r])
	if x.errs() {
		next, found = "", false
		if decoyRe[r] != nil {
			next, found = readFact(lines, x.cur, decoyRe[r])
		}
		if !found {
			next, found = x.randomName(rels[r].to), true
		}
	}
	if !found {
		return answer("unknown"), nil // the search did not return the fact: fail honestly
	}
	x.hop++
	x.cur = next
	if x.hop == len(x.q.chain) {
		return answer(x.cur), nil
	}
	return searchCall(x.cur), nil
}

// pickIntersection returns the title of the first result that states both constraints.
func (x *Expert) pickIntersection(lines [][2]string) string {
	k := x.w.kb
	want := [2]string{k.ents[x.q.vals[0]].name, k.ents[x.q.vals[1]].name}
	for _, l := range lines {
		a := factRe[x.q.pair[0]].FindStringSubmatch(l[1])
		b := factRe[x.q.pair[1]].FindStringSubmatch(l[1])
		if a != nil && b != nil && a[1] == want[0] && b[1] == want[1] {
			return l[0]
		}
	}
	return "unknown"
}

// tagBreaks turns the tool-response tags of an observation into line breaks.
var tagBreaks = strings.NewReplacer("<tool_response>", "\n", "</tool_response>", "\n")

// resultLines splits a tool observation into (title, text) pairs, one per result.
func resultLines(obs string) [][2]string {
	var out [][2]string
	for l := range strings.SplitSeq(tagBreaks.Replace(obs), "\n") {
		if title, text, ok := strings.Cut(l, ": "); ok {
			out = append(out, [2]string{strings.TrimSpace(title), text})
		}
	}
	return out
}

// readFact finds the result about subject and extracts what re captures from it.
func readFact(lines [][2]string, subject string, re *regexp.Regexp) (string, bool) {
	for _, l := range lines {
		if l[0] != subject {
			continue
		}
		if m := re.FindStringSubmatch(l[1]); m != nil {
			return m[1], true
		}
	}
	return "", false
}

// searchCall is the tool call for query, in the syntax WithTools parses.
func searchCall(query string) string {
	return tool.OpenTag + `{"name": "search", "arguments": {"query": ` + quoteJSON(query) + `}}` + tool.CloseTag
}

// searchCallK asks for k results: an intersection query matches several people's documents,
// and the one that states both facts need not rank first.
func searchCallK(query string, k int) string {
	return tool.OpenTag + `{"name": "search", "arguments": {"query": ` + quoteJSON(query) + `, "k": ` + strconv.Itoa(k) + `}}` + tool.CloseTag
}

// quoteJSON is json.Marshal of s as a string. Entity names are plain ASCII, which it quotes
// without the encoder.
func quoteJSON(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			return string(q)
		}
	}
	return `"` + s + `"`
}

func answer(name string) string { return "Answer: " + name }
