package search

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// kind is an entity type.
type kind uint8

const (
	person kind = iota
	city
	country
	company
	university
	numKinds
)

// rel is a functional relation: every entity of its From kind has exactly one target of its To
// kind. Functional relations make every chain question's answer unique by construction.
type rel uint8

const (
	bornIn    rel = iota // person → city
	worksFor             // person → company
	studiedAt            // person → university
	foundedBy            // company → person
	hqIn                 // company → city
	locatedIn            // university → city
	countryOf            // city → country
	capitalOf            // country → city
	numRels
)

// relInfo says how a relation reads in questions and in documents.
type relInfo struct {
	from, to kind
	np       string // noun phrase in questions: "the birthplace of X"
	phrase   string // what precedes the target in a document: "born in"
	// decoy is the distractor relation's phrase in the same document ("visited" for "born in"):
	// a confusable fact the noisy expert's wrong hop follows.
	decoy string
}

var rels = [numRels]relInfo{
	bornIn:    {person, city, "the birthplace of", "born in", "visited"},
	worksFor:  {person, company, "the employer of", "works for", ""},
	studiedAt: {person, university, "the school of", "studied at", ""},
	foundedBy: {company, person, "the founder of", "founded by", ""},
	hqIn:      {company, city, "the headquarters of", "headquartered in", "has an office in"},
	locatedIn: {university, city, "the city of", "located in", ""},
	countryOf: {city, country, "the country of", "a city in", "trades with"},
	capitalOf: {country, city, "the capital of", "its capital is", ""},
}

// entity is one node of the knowledge base. rel holds the target of each relation whose From is
// the entity's kind (-1 elsewhere); decoy holds one distractor entity for the document.
type entity struct {
	kind    kind
	name    string
	rel     [numRels]int32
	decoy   int32 // a city (person, company) or a country (city, country); -1 for universities
	founded int32 // the company a person founded, or -1
}

// kb is the synthetic knowledge base: entities grouped by kind, all names distinct.
type kb struct {
	ents   []entity
	byKind [numKinds][]int32
	byName map[string]int32
}

// Sizes of the knowledge base: about 2,000 entities, one document each.
const (
	kbSeed       = 0x5eac4
	numCountries = 24
	citiesPer    = 10
	numUnis      = 80
	numCompanies = 300
	numPeople    = 1400
)

// templateWords must never be names: a name equal to a word of the document templates would make
// the relation patterns ambiguous.
var templateWords = map[string]bool{}

func init() {
	for _, r := range rels {
		for _, w := range strings.Fields(r.np + " " + r.phrase + " " + r.decoy) {
			templateWords[strings.ToLower(w)] = true
		}
	}
	for _, w := range []string{"answer", "city", "country", "corp", "labs", "group", "systems", "university", "founded", "who", "what", "and", "partners", "borders"} {
		templateWords[w] = true
	}
}

// namer draws pronounceable made-up words that are distinct from every word drawn before.
type namer struct {
	rng  *rand.Rand
	used map[string]bool
}

const (
	onsets = "bdfgklmnprstvz"
	nuclei = "aeiou"
	codas  = "nrls"
)

func (n *namer) word(minSyl, maxSyl int) string {
	for {
		var b strings.Builder
		syl := minSyl + n.rng.IntN(maxSyl-minSyl+1)
		for i := 0; i < syl; i++ {
			b.WriteByte(onsets[n.rng.IntN(len(onsets))])
			b.WriteByte(nuclei[n.rng.IntN(len(nuclei))])
		}
		if n.rng.IntN(2) == 0 {
			b.WriteByte(codas[n.rng.IntN(len(codas))])
		}
		w := b.String()
		if n.used[w] || templateWords[w] {
			continue
		}
		n.used[w] = true
		return strings.ToUpper(w[:1]) + w[1:]
	}
}

// buildKB generates the knowledge base from kbSeed. It is deterministic.
func buildKB() *kb {
	rng := rand.New(rand.NewPCG(kbSeed, 1))
	nm := &namer{rng: rng, used: map[string]bool{}}
	k := &kb{byName: map[string]int32{}}
	add := func(kd kind, name string) int32 {
		id := int32(len(k.ents))
		e := entity{kind: kd, name: name, decoy: -1, founded: -1}
		for i := range e.rel {
			e.rel[i] = -1
		}
		k.ents = append(k.ents, e)
		k.byKind[kd] = append(k.byKind[kd], id)
		if _, dup := k.byName[name]; dup {
			panic(fmt.Sprintf("search: duplicate name %q", name)) // namer guarantees distinct words
		}
		k.byName[name] = id
		return id
	}
	pick := func(kd kind, not int32) int32 {
		ids := k.byKind[kd]
		for {
			if id := ids[rng.IntN(len(ids))]; id != not {
				return id
			}
		}
	}

	for i := 0; i < numCountries; i++ {
		c := add(country, nm.word(2, 3)+"ia")
		for j := 0; j < citiesPer; j++ {
			ct := add(city, nm.word(2, 3))
			k.ents[ct].rel[countryOf] = c
			if j == 0 {
				k.ents[c].rel[capitalOf] = ct
			}
		}
	}
	for i := 0; i < numUnis; i++ {
		u := add(university, nm.word(2, 2)+" University")
		k.ents[u].rel[locatedIn] = pick(city, -1)
	}
	suffixes := []string{"Corp", "Labs", "Group", "Systems"}
	for i := 0; i < numCompanies; i++ {
		add(company, nm.word(2, 3)+" "+suffixes[rng.IntN(len(suffixes))])
	}
	firsts := make([]string, 48)
	for i := range firsts {
		firsts[i] = nm.word(1, 2)
	}
	for i := 0; i < numPeople; i++ {
		p := add(person, firsts[rng.IntN(len(firsts))]+" "+nm.word(2, 3))
		e := &k.ents[p]
		e.rel[bornIn] = pick(city, -1)
		e.rel[worksFor] = pick(company, -1)
		e.rel[studiedAt] = pick(university, -1)
		e.decoy = pick(city, e.rel[bornIn])
	}
	// Founders are distinct people, and each works for the company it founded.
	people := k.byKind[person]
	order := rng.Perm(len(people))
	for i, co := range k.byKind[company] {
		p := people[order[i]]
		k.ents[co].rel[foundedBy] = p
		k.ents[p].founded = co
		k.ents[p].rel[worksFor] = co
		k.ents[co].rel[hqIn] = pick(city, -1)
		k.ents[co].decoy = pick(city, k.ents[co].rel[hqIn])
	}
	for _, ct := range k.byKind[city] {
		k.ents[ct].decoy = pick(country, k.ents[ct].rel[countryOf])
	}
	for _, c := range k.byKind[country] {
		k.ents[c].decoy = pick(country, c)
	}
	return k
}

// doc renders entity id as a short document: its relations first (so snippet trimming cuts
// distractors before facts), then one distractor sentence.
func (k *kb) doc(id int32) string {
	e := &k.ents[id]
	n := func(x int32) string { return k.ents[x].name }
	switch e.kind {
	case person:
		s := fmt.Sprintf("%s was born in %s, works for %s and studied at %s.", e.name, n(e.rel[bornIn]), n(e.rel[worksFor]), n(e.rel[studiedAt]))
		if e.founded >= 0 {
			s += fmt.Sprintf(" %s founded %s.", e.name, n(e.founded))
		}
		return s + fmt.Sprintf(" %s visited %s.", e.name, n(e.decoy))
	case company:
		return fmt.Sprintf("%s was founded by %s and is headquartered in %s. It has an office in %s.", e.name, n(e.rel[foundedBy]), n(e.rel[hqIn]), n(e.decoy))
	case university:
		return fmt.Sprintf("%s is located in %s.", e.name, n(e.rel[locatedIn]))
	case city:
		return fmt.Sprintf("%s is a city in %s. It trades with %s.", e.name, n(e.rel[countryOf]), n(e.decoy))
	default: // country
		return fmt.Sprintf("%s is a country; its capital is %s. It borders %s.", e.name, n(e.rel[capitalOf]), n(e.decoy))
	}
}
