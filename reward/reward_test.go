package reward

import (
	"context"
	"errors"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/agentrl/agentrl/traj"
)

func TestVerifiers(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name   string
		s      Scorer
		resp   string
		answer string
		want   float64
	}{
		{"exact normalised", ExactMatch{}, "The Eiffel  Tower.", "eiffel tower", 1},
		{"exact wrong", ExactMatch{}, "Louvre", "eiffel tower", 0},
		{"exact boxed", ExactMatch{Extract: Boxed}, `so \boxed{\frac{1}{2}} done`, `\frac{1}{2}`, 1},
		{"exact tagged missing", ExactMatch{Extract: Tagged("answer")}, "no tags", "x", 0},
		{"exact tagged last", ExactMatch{Extract: Tagged("answer")}, "<answer>a</answer> <answer>B</answer>", "b", 1},
		{"numeric thousands", Numeric{}, "the total is 1,234.", "1234", 1},
		{"numeric tolerance", Numeric{AbsTol: 0.01}, "x = 3.141", "3.14", 1},
		{"numeric outside tolerance", Numeric{AbsTol: 1e-6}, "3.15", "3.14", 0},
		{"numeric relative", Numeric{RelTol: 0.01}, "1005", "1000", 1},
		{"numeric fraction and percent", Numeric{AbsTol: 1e-9}, "answer: 3/4", "75%", 1},
		{"numeric none", Numeric{}, "no idea", "4", 0},
		{"set equal any order", SetMatch{}, "Paris, rome ,Berlin", "berlin,paris,rome", 1},
		{"set missing item", SetMatch{}, "paris, rome", "berlin,paris,rome", 0},
		{"set partial f1", SetMatch{Partial: true}, "paris, rome", "berlin,paris,rome", 0.8},
		{"format ok", Format{Pattern: regexp.MustCompile(`(?s)^<think>.*</think>\s*<answer>.*</answer>$`)}, "<think>hm</think> <answer>4</answer>", "", 1},
		{"format bad", Format{Pattern: regexp.MustCompile(`(?s)^<think>.*</think>\s*<answer>.*</answer>$`)}, "<answer>4</answer>", "", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.s.Score(ctx, Sample{Response: tc.resp, Answer: tc.answer})
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(got-tc.want) > 1e-12 {
				t.Fatalf("score %v, want %v", got, tc.want)
			}
		})
	}
	if _, err := (Numeric{}).Score(ctx, Sample{Response: "3", Answer: "three"}); err == nil {
		t.Fatal("non-numeric reference accepted")
	}
}

func TestWeighted(t *testing.T) {
	w, err := NewWeighted(Part{"correct", 1, ExactMatch{}}, Part{"format", 0.1, Format{Pattern: regexp.MustCompile(`^\w+$`)}})
	if err != nil {
		t.Fatal(err)
	}
	total, parts, err := w.Breakdown(context.Background(), Sample{Response: "paris", Answer: "Paris"})
	if err != nil || total != 1.1 || parts["format"] != 1 {
		t.Fatalf("total %v parts %v err %v", total, parts, err)
	}
	if _, err := NewWeighted(Part{"a", 1, ExactMatch{}}, Part{"a", 1, ExactMatch{}}); err == nil {
		t.Fatal("repeated name accepted")
	}
	if _, err := NewWeighted(Part{"a", math.NaN(), ExactMatch{}}); err == nil {
		t.Fatal("NaN weight accepted")
	}
}

type fakeGen struct {
	reply string
	err   error
	wait  bool // block until the context ends
	got   string
}

func (f *fakeGen) Complete(ctx context.Context, prompt string) (string, error) {
	f.got = prompt
	if f.wait {
		<-ctx.Done()
		return "", ctx.Err()
	}
	return f.reply, f.err
}

func TestJudge(t *testing.T) {
	cfg := JudgeConfig{Rubric: "Q: {{.Prompt}}\nA: {{.Response}}\nRef: {{.Answer}}\nEnd with Score: 0-10.", MaxScore: 10, Timeout: 50 * time.Millisecond, Fallback: 0.25}
	tests := []struct {
		name    string
		gen     *fakeGen
		want    float64
		wantErr string
	}{
		{"score", &fakeGen{reply: "Good.\nScore: 7"}, 0.7, ""},
		{"last score wins, bold", &fakeGen{reply: "Score: 2 ... on reflection Score: **9**"}, 0.9, ""},
		{"matching denominator", &fakeGen{reply: "score = 5/10"}, 0.5, ""},
		{"other denominator", &fakeGen{reply: "Score: 4/5"}, 0.25, ""},
		{"unparseable", &fakeGen{reply: "I think it is fine."}, 0.25, ""},
		{"out of range", &fakeGen{reply: "Score: 11"}, 0.25, ""},
		{"generator error", &fakeGen{err: errors.New("connection refused")}, 0, "connection refused"},
		{"timeout", &fakeGen{wait: true}, 0.25, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j, err := NewJudge(tc.gen, cfg)
			if err != nil {
				t.Fatal(err)
			}
			got, err := j.Score(context.Background(), Sample{Prompt: "2+2?", Response: "4", Answer: "4"})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || math.Abs(got-tc.want) > 1e-12 {
				t.Fatalf("score %v err %v, want %v", got, err, tc.want)
			}
			if !strings.Contains(tc.gen.got, "Q: 2+2?\nA: 4\nRef: 4") {
				t.Fatalf("rubric not rendered: %q", tc.gen.got)
			}
		})
	}
	for _, bad := range []JudgeConfig{
		{Rubric: "{{.Nope}}", MaxScore: 10, Timeout: time.Second},
		{Rubric: "x", MaxScore: 0, Timeout: time.Second},
		{Rubric: "x", MaxScore: 10},
		{Rubric: "x", MaxScore: 10, Timeout: time.Second, Fallback: 2},
	} {
		if _, err := NewJudge(&fakeGen{}, bad); err == nil {
			t.Errorf("config %+v accepted", bad)
		}
	}
}

func TestOverlongPenalty(t *testing.T) {
	o := OverlongPenalty{MaxLen: 100, Cache: 20}
	for _, tc := range []struct {
		n    int
		want float64
	}{{0, 0}, {80, 0}, {90, -0.5}, {100, -1}, {101, -1}} {
		got, err := o.Penalty(tc.n)
		if err != nil || math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("Penalty(%d) = %v, %v; want %v", tc.n, got, err, tc.want)
		}
	}
	if _, err := (OverlongPenalty{MaxLen: 10, Cache: 20}).Penalty(5); err == nil {
		t.Error("cache > max_len accepted")
	}
}

func TestProgressive(t *testing.T) {
	p := Progressive{From: 0.2, Steps: 100}
	for _, tc := range []struct {
		step int
		want float64
	}{{0, 0.2}, {50, 0.6}, {100, 1}, {500, 1}} {
		if got := p.OutcomeWeight(tc.step); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("w(%d) = %v, want %v", tc.step, got, tc.want)
		}
	}
	if got := (Progressive{Steps: 100, Cosine: true}).OutcomeWeight(50); math.Abs(got-0.5) > 1e-12 {
		t.Errorf("cosine midpoint %v", got)
	}
	tr := &traj.Trajectory{Reward: 1, Turns: []traj.Turn{{Reward: 0.5}, {Reward: 1}}}
	if err := p.Apply(tr, 50); err != nil {
		t.Fatal(err)
	}
	if math.Abs(tr.Reward-0.6) > 1e-12 || math.Abs(tr.Turns[0].Reward-0.2) > 1e-12 || math.Abs(tr.Turns[1].Reward-0.4) > 1e-12 {
		t.Fatalf("applied: outcome %v turns %v", tr.Reward, tr.Turns)
	}
	if err := (Progressive{From: 2, Steps: 1}).Apply(tr, 0); err == nil {
		t.Fatal("bad schedule accepted")
	}
}

func TestToolProcess(t *testing.T) {
	tr := &traj.Trajectory{Turns: []traj.Turn{
		{ToolCalls: []traj.ToolCall{{Name: "calc"}, {Name: "calc", Error: "bad json"}}},
		{},
	}}
	ToolProcess{ValidCall: 0.1, InvalidCall: -0.2, StepCost: -0.01}.Apply(tr)
	if math.Abs(tr.Turns[0].Reward-(-0.11)) > 1e-12 || math.Abs(tr.Turns[1].Reward-(-0.01)) > 1e-12 {
		t.Fatalf("turn rewards %v %v", tr.Turns[0].Reward, tr.Turns[1].Reward)
	}
}

// NormalizeName avoids the allocations of its plain form; it must give the same strings.
func FuzzNormalizeName(f *testing.F) {
	for _, s := range []string{"The Miravo.", "a", "An  Velora-Corp!", "ÜBER straße İstanbul", "\xff the x", "", "the", "Tom & <Jerry> \"q\" \\ \u2028", "x² ½ cafe\u0301"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fields := strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
		if len(fields) > 1 && (fields[0] == "the" || fields[0] == "a" || fields[0] == "an") {
			fields = fields[1:]
		}
		if want, got := strings.Join(fields, " "), NormalizeName(s); got != want {
			t.Fatalf("NormalizeName(%q) = %q, want %q", s, got, want)
		}
	})
}

func TestNormalizeName(t *testing.T) {
	for _, c := range []struct{ in, want, squad string }{
		{"The Miravo.", "miravo", "miravo"},
		{"Bank of the West", "bank of the west", "bank of west"},
		{"The", "the", ""},
		{"x²", "x", "x²"},
		{"Anu_Kessel", "anu kessel", "anu kessel"},
	} {
		if got := NormalizeName(c.in); got != c.want {
			t.Errorf("NormalizeName(%q) = %q, want %q", c.in, got, c.want)
		}
		if got := Normalize(c.in); got != c.squad {
			t.Errorf("Normalize(%q) = %q, want %q", c.in, got, c.squad)
		}
	}
	got, _ := ExactMatch{Normalize: NormalizeName}.Score(context.Background(), Sample{Response: "bank of West", Answer: "Bank of the West"})
	if got != 0 {
		t.Errorf("ExactMatch with NormalizeName: %v, want 0 (the article inside a name counts)", got)
	}
}
