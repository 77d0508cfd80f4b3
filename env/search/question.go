package search

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
)

// Question forms, after WebShaper's knowledge projections (Tao et al., 2025, arXiv 2507.15061):
// a target set is built from a seed entity by projections R(S) = {y : (x, y) ∈ R, x ∈ S} and
// intersections S₁ ∩ S₂. A chain is R_h(…R_1({e})…), 1–3 projections of a named entity; an
// intersection is R₁⁻¹({a}) ∩ R₂⁻¹({b}) over people ("who was born in A and works for B?"), kept
// only when exactly one person qualifies. Every question therefore has exactly one answer, and a
// chain of h hops needs h lookups, each naming what the previous one found.
const (
	formChain     = "chain"
	formIntersect = "intersect"
)

// question is one task.
type question struct {
	form   string
	text   string
	answer int32
	// chain: start entity and relations applied in order.
	start int32
	chain []rel
	// intersection: the two relations and their targets.
	pair [2]rel
	vals [2]int32
}

// hops is how many lookups the question needs.
func (q *question) hops() int {
	if q.form == formIntersect {
		return 1
	}
	return len(q.chain)
}

// intersectPairs are the person relations an intersection combines, and how each reads.
var intersectPairs = [][2]rel{{bornIn, worksFor}, {bornIn, studiedAt}, {worksFor, studiedAt}}

// heldoutEntity reports whether entity id is reserved for held-out questions: chains start from,
// and intersections answer with, an entity of the seed range's own share, so a held-out question
// is never a train question (intermediate entities are shared, as in any fixed corpus).
func heldoutEntity(id int32) bool { return id%8 == 0 }

// Levels are the difficulty levels: level h is a chain of h hops (intersections belong to no
// level; the default mix has them).
var Levels = []int{1, 2, 3}

// MaxLevel is the highest level.
const MaxLevel = 3

// newQuestion generates the question of seed; heldout selects the entity share. At level 0 the
// mix is 25% one hop, 30% two hops, 20% three hops and 25% intersections, drawn from the seed;
// at level h (1–MaxLevel) it is a chain of h hops.
func (k *kb) newQuestion(seed int64, heldout bool, level int) question {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x71756573)) // "ques"
	if level > 0 {
		return k.chainQuestion(rng, level, heldout)
	}
	r := rng.IntN(100)
	if r >= 75 {
		if q, ok := k.intersection(rng, heldout); ok {
			return q
		}
	}
	hops := 1
	switch {
	case r >= 55:
		hops = 3
	case r >= 25:
		hops = 2
	}
	return k.chainQuestion(rng, hops, heldout)
}

// pickShare draws an entity of kind kd from the train or held-out share.
func (k *kb) pickShare(rng *rand.Rand, kd kind, heldout bool) int32 {
	ids := k.byKind[kd]
	for {
		if id := ids[rng.IntN(len(ids))]; heldoutEntity(id) == heldout {
			return id
		}
	}
}

// chainQuestion walks hops functional relations from a random start, never revisiting an entity
// (a walk back to the start would make "the country of the capital of X" answer X itself).
func (k *kb) chainQuestion(rng *rand.Rand, hops int, heldout bool) question {
	for {
		start := k.pickShare(rng, kind(rng.IntN(int(numKinds))), heldout)
		q := question{form: formChain, start: start}
		var seenBuf [4]int32 // the start and up to 3 hops
		seen := append(seenBuf[:0], start)
		cur := start
		ok := true
		for h := 0; h < hops && ok; h++ {
			var outBuf [numRels]rel
			out := outBuf[:0]
			for r, ri := range rels {
				if ri.from == k.ents[cur].kind {
					out = append(out, rel(r))
				}
			}
			r := out[rng.IntN(len(out))]
			next := k.ents[cur].rel[r]
			if slices.Contains(seen, next) {
				ok = false
				break
			}
			seen = append(seen, next)
			q.chain = append(q.chain, r)
			cur = next
		}
		if !ok {
			continue
		}
		q.answer = cur
		np := k.ents[start].name
		for _, r := range q.chain {
			np = rels[r].np + " " + np
		}
		// The noun phrases read "the birthplace of"; joining with a space nests them.
		lead := "What is "
		if k.ents[cur].kind == person {
			lead = "Who is "
		}
		q.text = lead + np + "?"
		return q
	}
}

// intersection picks a person and two of its relations; it fails when another person shares both
// targets (the answer would not be unique) after a few tries.
func (k *kb) intersection(rng *rand.Rand, heldout bool) (question, bool) {
	for try := 0; try < 32; try++ {
		p := k.pickShare(rng, person, heldout)
		pair := intersectPairs[rng.IntN(len(intersectPairs))]
		vals := [2]int32{k.ents[p].rel[pair[0]], k.ents[p].rel[pair[1]]}
		if k.countBoth(pair, vals) != 1 {
			continue
		}
		text := fmt.Sprintf("Who %s %s and %s %s?", verb(pair[0]), k.ents[vals[0]].name, verb(pair[1]), k.ents[vals[1]].name)
		return question{form: formIntersect, text: text, answer: p, pair: pair, vals: vals}, true
	}
	return question{}, false
}

// countBoth counts the people whose pair relations have exactly vals.
func (k *kb) countBoth(pair [2]rel, vals [2]int32) int {
	n := 0
	for _, id := range k.byKind[person] {
		if k.ents[id].rel[pair[0]] == vals[0] && k.ents[id].rel[pair[1]] == vals[1] {
			n++
		}
	}
	return n
}

// verb is a person relation as a question predicate: "was born in", "works for", "studied at".
func verb(r rel) string {
	if r == bornIn {
		return "was born in"
	}
	return rels[r].phrase
}

// intersectQuery is what the expert searches for an intersection: the two constraints.
func (k *kb) intersectQuery(q *question) string {
	return strings.TrimSpace(fmt.Sprintf("%s %s %s %s", rels[q.pair[0]].phrase, k.ents[q.vals[0]].name, rels[q.pair[1]].phrase, k.ents[q.vals[1]].name))
}
