package search

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/env/envtest"
	"github.com/agentrl/agentrl/reward"
)

func TestSuite(t *testing.T) {
	envtest.Run(t, Spec())
}

func testWorld(t *testing.T) *world {
	t.Helper()
	w, err := sharedWorld()
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestKnowledgeBase checks the generated world: distinct names, every relation of every entity
// set to an entity of the right kind, and every document stating each fact so that the relation's
// pattern reads it back — the documents are the only way the agent learns the facts.
func TestKnowledgeBase(t *testing.T) {
	k := testWorld(t).kb
	wantCount := [numKinds]int{person: numPeople, city: numCountries * citiesPer, country: numCountries, company: numCompanies, university: numUnis}
	for kd, n := range wantCount {
		if len(k.byKind[kd]) != n {
			t.Errorf("kind %d: %d entities, want %d", kd, len(k.byKind[kd]), n)
		}
	}
	if len(k.byName) != len(k.ents) {
		t.Errorf("%d names for %d entities: names repeat", len(k.byName), len(k.ents))
	}
	for id := range k.ents {
		e := &k.ents[id]
		doc := k.doc(int32(id))
		for r, ri := range rels {
			if ri.from != e.kind {
				if e.rel[r] != -1 {
					t.Fatalf("%s has relation %s of another kind", e.name, ri.phrase)
				}
				continue
			}
			target := e.rel[r]
			if target < 0 || k.ents[target].kind != ri.to || target == int32(id) {
				t.Fatalf("%s: relation %q points to %d", e.name, ri.phrase, target)
			}
			m := factRe[r].FindStringSubmatch(doc)
			if m == nil || m[1] != k.ents[target].name {
				t.Fatalf("%s: document %q does not read back %q %s (got %v)", e.name, doc, ri.phrase, k.ents[target].name, m)
			}
			if decoyRe[r] != nil {
				if d := decoyRe[r].FindStringSubmatch(doc); d == nil || d[1] == k.ents[target].name {
					t.Fatalf("%s: document %q lacks a distinct %q distractor", e.name, doc, ri.decoy)
				}
			}
		}
		if len(doc) > DefaultConfig().Search.SnippetChars {
			t.Errorf("%s: document of %d characters would be trimmed: %q", e.name, len(doc), doc)
		}
	}
	if a, b := fmt.Sprint(buildKB().ents), fmt.Sprint(k.ents); a != b {
		t.Error("buildKB is not deterministic")
	}
}

// TestQuestions checks generated questions: deterministic per seed, a unique answer (a chain is
// re-derived relation by relation; an intersection has exactly one qualifying person), no entity
// visited twice, the held-out share respected, and every form and hop count present.
func TestQuestions(t *testing.T) {
	k := testWorld(t).kb
	n := 2000
	if testing.Short() {
		n = 500
	}
	forms := map[string]int{}
	for _, heldout := range []bool{false, true} {
		for seed := int64(0); seed < int64(n); seed++ {
			q := k.newQuestion(seed, heldout, 0)
			if q2 := k.newQuestion(seed, heldout, 0); fmt.Sprint(q) != fmt.Sprint(q2) {
				t.Fatalf("seed %d: two different questions", seed)
			}
			forms[fmt.Sprint(q.form, q.hops())]++
			switch q.form {
			case formChain:
				if len(q.chain) < 1 || len(q.chain) > 3 {
					t.Fatalf("seed %d: %d hops", seed, len(q.chain))
				}
				seen := map[int32]bool{q.start: true}
				cur := q.start
				for _, r := range q.chain {
					cur = k.ents[cur].rel[r]
					if seen[cur] {
						t.Fatalf("seed %d: %q revisits %s", seed, q.text, k.ents[cur].name)
					}
					seen[cur] = true
				}
				if cur != q.answer {
					t.Fatalf("seed %d: %q answer %s, derived %s", seed, q.text, k.ents[q.answer].name, k.ents[cur].name)
				}
				if heldoutEntity(q.start) != heldout {
					t.Fatalf("seed %d heldout=%v: start %d from the wrong share", seed, heldout, q.start)
				}
				if !strings.Contains(q.text, k.ents[q.start].name) {
					t.Fatalf("seed %d: %q does not name its start", seed, q.text)
				}
			case formIntersect:
				if c := k.countBoth(q.pair, q.vals); c != 1 {
					t.Fatalf("seed %d: %q has %d answers", seed, q.text, c)
				}
				if heldoutEntity(q.answer) != heldout {
					t.Fatalf("seed %d heldout=%v: answer from the wrong share", seed, heldout)
				}
			default:
				t.Fatalf("seed %d: unknown form %q", seed, q.form)
			}
		}
	}
	for _, f := range []string{"chain1", "chain2", "chain3", "intersect1"} {
		if forms[f] < n/10 {
			t.Errorf("form %s: %d of %d questions", f, forms[f], 2*n)
		}
	}
}

func TestAnswerNormalization(t *testing.T) {
	cases := []struct {
		action, gold string
		ok           bool
	}{
		{"Answer: Miravo", "Miravo", true},
		{"answer:   miravo.", "Miravo", true},
		{"ANSWER: The Miravo!", "Miravo", true},
		{"Miravo", "Miravo", true},
		{"I searched.\nAnswer: Anu  Kessel\nthanks", "Anu Kessel", true},
		{"Answer: Lorno\nAnswer: Miravo", "Miravo", true},
		{"Answer: Miravo Corp", "Miravo", false},
		{"Answer:", "Miravo", false},
		{"Answer: Mir avo", "Miravo", false},
		{"the", "The", true},
		{"", "Miravo", false},
	}
	for _, c := range cases {
		score, err := grade.Score(context.Background(), reward.Sample{Response: c.action, Answer: c.gold})
		if got := score == 1; err != nil || got != c.ok {
			t.Errorf("answer %q vs %q: match %v (error %v), want %v", c.action, c.gold, got, err, c.ok)
		}
	}
}

// TestExpertByForm: the clean expert, which only reads what the tool returns, solves every form;
// noise costs it. This is also the end-to-end check of retrieval quality at the default k.
func TestExpertByForm(t *testing.T) {
	ctx := context.Background()
	e, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	n := 400
	if testing.Short() {
		n = 120
	}
	type tally struct{ clean, noisy, total int }
	by := map[string]*tally{}
	for i := 0; i < n; i++ {
		seed := heldoutSeeds.Lo + int64(i)
		x := NewExpert(seed, 0, nil)
		key := fmt.Sprint(x.q.form, x.q.hops())
		if by[key] == nil {
			by[key] = &tally{}
		}
		by[key].total++
		ep, err := env.Play(ctx, e, x, seed, 16)
		if err != nil {
			t.Fatal(err)
		}
		if ep.Success {
			by[key].clean++
		} else {
			t.Errorf("seed %d (%s): clean expert failed: %q, steps %+v", seed, key, ep.Start.Text, ep.Steps)
		}
		if ep.Steps[len(ep.Steps)-1].Transition.Info[InfoHops] != fmt.Sprint(x.q.hops()) {
			t.Errorf("seed %d: Info hops %q", seed, ep.Steps[len(ep.Steps)-1].Transition.Info[InfoHops])
		}
		ep, err = env.Play(ctx, e, NewExpert(seed, 0.5, rand.New(rand.NewPCG(9, uint64(seed)))), seed, 16)
		if err != nil {
			t.Fatal(err)
		}
		if ep.Success {
			by[key].noisy++
		}
	}
	for key, c := range by {
		t.Logf("%s: clean %d/%d, noise 0.5 %d/%d", key, c.clean, c.total, c.noisy, c.total)
		if c.noisy >= c.clean {
			t.Errorf("%s: noise did not hurt (%d >= %d)", key, c.noisy, c.clean)
		}
	}
}

// TestSharedWorldConcurrent builds the world from many goroutines at once (under -race) and
// queries it concurrently through separate instances.
func TestSharedWorldConcurrent(t *testing.T) {
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e, err := New(DefaultConfig())
			if err != nil {
				errs <- err
				return
			}
			seed := int64(g)
			ep, err := env.Play(context.Background(), e, NewExpert(seed, 0, nil), seed, 16)
			if err == nil && !ep.Success {
				err = fmt.Errorf("seed %d: expert failed", seed)
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name string
		mod  func(*Config)
		ok   bool
	}{
		{"default", func(*Config) {}, true},
		{"no turns", func(c *Config) { c.MaxTurns = 0 }, false},
		{"negative tool limit", func(c *Config) { c.Tools.MaxCallsPerTurn = -1 }, false},
		{"k above max", func(c *Config) { c.Search.DefaultK, c.Search.MaxK = 6, 5 }, false},
	}
	for _, c := range cases {
		cfg := DefaultConfig()
		c.mod(&cfg)
		if _, err := New(cfg); (err == nil) != c.ok {
			t.Errorf("%s: New error %v, want ok=%v", c.name, err, c.ok)
		}
	}
}

// quoteJSON avoids the allocations of its plain form; it must give the same strings.
func FuzzQuoteJSON(f *testing.F) {
	for _, s := range []string{"The Miravo.", "a", "An  Velora-Corp!", "ÜBER straße İstanbul", "\xff the x", "", "the", "Tom & <Jerry> \"q\" \\ \u2028"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q, _ := json.Marshal(s)
		if got := quoteJSON(s); got != string(q) {
			t.Fatalf("quoteJSON(%q) = %s, want %s", s, got, q)
		}
	})
}

// TestLevels checks that level h poses h-hop chains only, the same for a seed every time, and
// that a level's environment poses them.
func TestLevels(t *testing.T) {
	k := testWorld(t).kb
	for _, h := range Levels {
		for seed := int64(0); seed < 200; seed++ {
			q := k.newQuestion(seed, seed%2 == 0, h)
			if q.form != formChain || q.hops() != h {
				t.Fatalf("level %d seed %d: %s of %d hops", h, seed, q.form, q.hops())
			}
			if q2 := k.newQuestion(seed, seed%2 == 0, h); fmt.Sprint(q) != fmt.Sprint(q2) {
				t.Fatalf("level %d seed %d: two different questions", h, seed)
			}
		}
		e, err := Spec().AtLevel(h).New()
		if err != nil {
			t.Fatal(err)
		}
		tr := playExpert(t, e, NewExpertAt(h, 5, 0, nil), 5)
		if tr.Info[InfoHops] != fmt.Sprint(h) || tr.Info[env.InfoSuccess] != "true" {
			t.Errorf("level %d: final transition %+v", h, tr)
		}
	}
	cfg := DefaultConfig()
	cfg.Level = MaxLevel + 1
	if _, err := New(cfg); err == nil {
		t.Errorf("level %d accepted", cfg.Level)
	}
}

func playExpert(t *testing.T, e env.Env, x env.Agent, seed int64) env.Transition {
	t.Helper()
	ep, err := env.Play(context.Background(), e, x, seed, 16)
	if err != nil || len(ep.Steps) == 0 {
		t.Fatalf("seed %d: %v", seed, err)
	}
	return ep.Steps[len(ep.Steps)-1].Transition
}
