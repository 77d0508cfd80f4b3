package search

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"unicode"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/reward"
)

// normalizeBefore is the environment's own normalisation as it was before grading moved to
// reward.NormalizeName, kept verbatim so the test below can show that no answer's reward changed.
func normalizeBefore(s string) string {
	s = strings.ToLower(s)
	sep := func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }
	n := 0
	for range strings.FieldsFuncSeq(s, sep) {
		n++
	}
	var b strings.Builder
	b.Grow(len(s))
	i := 0
	for f := range strings.FieldsFuncSeq(s, sep) {
		i++
		if i == 1 && n > 1 && (f == "the" || f == "a" || f == "an") {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(f)
	}
	return b.String()
}

// trickyAnswers cover case, punctuation, articles, whitespace, numbers and Unicode, including
// the spellings on which reward.Normalize (SQuAD) would grade differently.
var trickyAnswers = []string{
	"", " ", "Miravo", "miravo", "MIRAVO", "The Miravo.", "the miravo", "THE  MIRAVO!!", "a Miravo",
	"An Miravo", "Miravo the", "the", "The", "the.", "a", "an", "the the", "The A", "a the miravo",
	"Anu Kessel", "anu  kessel", "Anu\tKessel", "Anu\nKessel", " Anu Kessel ", "Anu-Kessel", "Anu_Kessel",
	"Anu Kessel.", "Anu, Kessel", "Anu Kessel (the elder)", "Bank of the West", "bank of West",
	"Mir avo", "Mir-avo", "O'Brien", "OBrien", "O Brien", "Tom & Jerry", "Tom and Jerry", "Tom+Jerry",
	"42", "4 2", "42nd Street", "the 42nd street", "1,234", "1 234", "1234", "3.14", "3 14", "-7", "7",
	"x²", "x 2", "x2", "½", "Ⅻ", "Ⅻ Legion", "Café", "cafe\u0301", "cafe", "ÜBER straße", "über STRASSE",
	"İstanbul", "istanbul", "i\u0307stanbul", "Straße", "\xff the x", "the\u200bmiravo", "the miravo\u00a0",
	"«Miravo»", "Miravo™", "$Miravo", "Miravo$", "日本", "日 本", "Answer: Miravo",
}

func TestNormalizeNameIsTheEnvRule(t *testing.T) {
	for _, s := range trickyAnswers {
		if got, want := reward.NormalizeName(s), normalizeBefore(s); got != want {
			t.Errorf("reward.NormalizeName(%q) = %q, before %q", s, got, want)
		}
	}
}

// TestGradeUnchanged grades every pair of tricky answers, bare and after "Answer:", against
// the rule the environment used before: the reward must be the same for each.
func TestGradeUnchanged(t *testing.T) {
	ctx := context.Background()
	squadDiffers := 0
	for _, gold := range trickyAnswers {
		for _, ans := range trickyAnswers {
			for _, action := range []string{ans, "I looked it up.\nANSWER: " + ans + "\nthanks", "answer:" + ans} {
				want := normalizeBefore(answerText(action)) == normalizeBefore(gold)
				score, err := grade.Score(ctx, reward.Sample{Response: action, Answer: gold})
				if err != nil || (score == 1) != want || (score != 0 && score != 1) {
					t.Errorf("action %q, gold %q: score %v (error %v), want match %v", action, gold, score, err, want)
				}
				if squad := reward.Normalize(answerText(action)) == reward.Normalize(gold); squad != want {
					squadDiffers++
				}
			}
		}
	}
	// The reason the environment does not use reward.Normalize: it grades some of these
	// differently ("Bank of the West" vs "bank of West", "the" vs "", "x²" vs "x 2").
	if squadDiffers == 0 {
		t.Error("reward.Normalize grades every tricky answer as the environment does; the table has lost its hard cases")
	}
}

// TestStepRewardUnchanged checks the same through Step, on real questions: the reward and
// Info[success] agree with the rule from before for variants of the gold answer.
func TestStepRewardUnchanged(t *testing.T) {
	ctx := context.Background()
	e, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for seed := int64(0); seed < 5; seed++ {
		if _, err := e.Reset(ctx, seed); err != nil {
			t.Fatal(err)
		}
		tr, err := e.Step(ctx, "no idea")
		if err != nil {
			t.Fatal(err)
		}
		gold := tr.Info[InfoExpected]
		for _, action := range []string{
			"Answer: " + gold, "answer: THE " + strings.ToUpper(gold) + "!", "Answer: " + gold + " the",
			"Answer: " + strings.ReplaceAll(gold, " ", "-"), "Answer: " + strings.ReplaceAll(gold, " ", ""),
			"Answer: a", "Answer: " + gold + "²", gold + "\nAnswer: nobody",
		} {
			if _, err := e.Reset(ctx, seed); err != nil {
				t.Fatal(err)
			}
			tr, err := e.Step(ctx, action)
			if err != nil {
				t.Fatal(err)
			}
			want := normalizeBefore(answerText(action)) == normalizeBefore(gold)
			if got := tr.Reward == 1; got != want || tr.Info[env.InfoSuccess] != fmt.Sprint(want) {
				t.Errorf("seed %d, action %q, gold %q: reward %v, success %s, want match %v", seed, action, gold, tr.Reward, tr.Info[env.InfoSuccess], want)
			}
		}
	}
}

// answerText is the answer a final turn gives, as grade reads it.
func answerText(action string) string {
	a, _ := reward.AnswerLine(action)
	return a
}
