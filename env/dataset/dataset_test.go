package dataset

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/env/envtest"
	"github.com/parquet-go/parquet-go"
)

func jsonlOf(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"id": "q%d", "question": "What is %d + %d?", "answer": %d, "level": %d}`+"\n", i, i, i+1, 2*i+1, 1+i%2)
	}
	return b.String()
}

func cfg(path string) Config {
	return Config{Path: path, Prompt: "Q: {question}\nA:", Answer: "answer", ID: "id", Split: Split{HeldOut: 0.25}, Verifier: "numeric"}
}

func write(t *testing.T, name, data string) string {
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// A JSONL dataset is an environment that passes the shared suite; the split is the fraction asked
// for, and each row becomes its task.
func TestJSONLSuite(t *testing.T) {
	d, err := Load(cfg(write(t, "d.jsonl", jsonlOf(400))))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Tasks) != 400 || d.Train < 250 || d.Train > 350 || len(d.Skipped) != 0 {
		t.Fatalf("%d tasks, %d train, skipped %v", len(d.Tasks), d.Train, d.Skipped)
	}
	spec := d.Spec("mytasks")
	envtest.Run(t, spec)
	e, _ := spec.New()
	obs, err := e.Reset(context.Background(), 0)
	if err != nil || !strings.HasPrefix(obs.Text, "Q: What is ") || !strings.HasSuffix(obs.Text, "?\nA:") {
		t.Fatalf("observation %+v, %v", obs, err)
	}
	tr, err := e.Step(context.Background(), "The answer is "+d.Tasks[0].Answer)
	if err != nil || tr.Reward != 1 || tr.Info[env.InfoSuccess] != "true" || !tr.Done {
		t.Fatalf("the right answer: %+v, %v", tr, err)
	}
	if _, err := e.Reset(context.Background(), int64(len(d.Tasks))); err == nil {
		t.Fatal("a seed past the rows resets")
	}
}

// Malformed rows are skipped and counted by reason, or refused with their line when strict.
func TestMalformedRows(t *testing.T) {
	rows := jsonlOf(40) +
		`{"id": "a1", "question": "no answer"}` + "\n" + // missing_field (line 41)
		`{"id": "a2", "question": "x", "answer": {"n": 1}}` + "\n" + // wrong_type
		`{"id": "a3", "question": "x", "answer": "seven"}` + "\n" + // bad_answer (numeric)
		"{\"id\": \"a4\", \"question\": \"\xff\", \"answer\": 1}\n" + // invalid_utf8
		`{"id": "q3", "question": "dup", "answer": 1}` + "\n" + // duplicate_id
		`{"id": "a5", "question": "x", "answer": 1, "level": 0}` + "\n" + // bad_level with level
		`not json` + "\n" + // bad_json
		`[1, 2]` + "\n" + // bad_json
		`{"id": "a6", "question": "` + strings.Repeat("x", 5000) + `", "answer": 1}` + "\n" + // line_too_long
		"\n"
	c := cfg(write(t, "d.jsonl", rows))
	c.MaxLineBytes = 4096
	c.Level = "level"
	d, err := Load(c)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"missing_field": 1, "wrong_type": 1, "bad_answer": 1, "invalid_utf8": 1, "duplicate_id": 1,
		"bad_level": 1, "bad_json": 2, "line_too_long": 1}
	if fmt.Sprint(d.Skipped) != fmt.Sprint(want) || len(d.Tasks) != 40 {
		t.Fatalf("skipped %v (want %v), %d tasks", d.Skipped, want, len(d.Tasks))
	}
	if !strings.HasPrefix(d.Examples[0], "line 41: missing_field") {
		t.Fatalf("examples %q", d.Examples)
	}
	c.Strict = true
	_, err = Load(c)
	var re *RowError
	if !errors.As(err, &re) || re.Line != 41 || re.Reason != "missing_field" {
		t.Fatalf("strict: %v", err)
	}
}

func TestSplitAndBounds(t *testing.T) {
	c := cfg(write(t, "d.jsonl", jsonlOf(3)))
	c.Split.HeldOut = 0.001
	if _, err := Load(c); err == nil || !strings.Contains(err.Error(), "held-out rows") {
		t.Fatalf("an empty held-out split: %v", err)
	}
	var b strings.Builder
	for i := range 10 {
		fmt.Fprintf(&b, `{"q": "x%d", "a": "y", "s": %q}`+"\n", i, []string{"train", "test", "other"}[i%3])
	}
	c = Config{Path: write(t, "s.jsonl", b.String()), Prompt: "q", Answer: "a", Split: Split{HeldOut: "s"}, Verifier: "exact"}
	d, err := Load(c)
	if err != nil {
		t.Fatal(err)
	}
	if d.Train != 4 || len(d.Tasks) != 7 || d.Skipped["unknown_split"] != 3 {
		t.Fatalf("split by field: %d train of %d, skipped %v", d.Train, len(d.Tasks), d.Skipped)
	}
	c.MaxRows = 5
	if _, err := Load(c); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("over max_rows: %v", err)
	}
	c.MaxRows, c.MaxBytes = 0, 100
	if _, err := Load(c); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("over max_bytes: %v", err)
	}
	if _, err := Load(Config{Path: write(t, "e.jsonl", "\n\n"), Prompt: "q", Answer: "a", Split: Split{HeldOut: 0.5}, Verifier: "exact"}); err == nil || !strings.Contains(err.Error(), "no task") {
		t.Fatalf("an empty file: %v", err)
	}
}

// zeros is an endless line of '0's.
type zeros struct{ left int64 }

func (z *zeros) Read(p []byte) (int, error) {
	if z.left <= 0 {
		return 0, io.EOF
	}
	n := min(int64(len(p)), z.left)
	for i := range p[:n] {
		p[i] = '0'
	}
	z.left -= n
	return int(n), nil
}

// A huge line is skipped without being held in memory; the rest of the file is read.
func TestHugeLine(t *testing.T) {
	size := int64(64 << 20)
	if !testing.Short() {
		size = 2 << 30
	}
	r := io.MultiReader(strings.NewReader(jsonlOf(8)), &zeros{left: size}, strings.NewReader("\n"+jsonlOf(16)[len(jsonlOf(8)):]))
	c := cfg("d.jsonl")
	c.MaxBytes = 4 << 30
	d, err := Read(r, c)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Tasks) != 16 || d.Skipped["line_too_long"] != 1 {
		t.Fatalf("%d tasks, skipped %v", len(d.Tasks), d.Skipped)
	}
}

func TestCSV(t *testing.T) {
	data := "\ufeffid,question,answer\n" +
		"1,\"What is 1, plus 1?\",2\n" +
		"2,What is 2+2?,4\n" +
		"3,too,many,fields\n" +
		"4,\"bad \"quote\",4\n" +
		"5,What is 3+3?,6\n6,What is 4+4?,8\n7,What is 5+5?,10\n8,x,\xff\n"
	c := Config{Path: write(t, "d.csv", data), Prompt: "question", Answer: "answer", ID: "id", Split: Split{HeldOut: 0.3}, Verifier: "rational"}
	d, err := Load(c)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Tasks) != 5 || d.Skipped["bad_csv"] != 2 || d.Skipped["invalid_utf8"] != 1 {
		t.Fatalf("%d tasks, skipped %v %q", len(d.Tasks), d.Skipped, d.Examples)
	}
	found := false
	for _, tk := range d.Tasks {
		found = found || tk.Prompt == "What is 1, plus 1?"
	}
	if !found {
		t.Fatalf("the quoted prompt is lost: %+v", d.Tasks)
	}
	c.Path = write(t, "long.csv", "id,question,answer\n1,"+strings.Repeat("x", 5000)+",1\n")
	c.MaxLineBytes = 1000
	if _, err := Load(c); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("a CSV line over the bound: %v", err)
	}
}

type pqRow struct {
	ID       string  `parquet:"id"`
	Question string  `parquet:"question"`
	Answer   float64 `parquet:"answer"`
	Level    int64   `parquet:"level"`
}

func TestParquet(t *testing.T) {
	var buf bytes.Buffer
	w := parquet.NewGenericWriter[pqRow](&buf)
	var rows []pqRow
	for i := range 50 {
		rows = append(rows, pqRow{ID: fmt.Sprintf("p%d", i), Question: fmt.Sprintf("What is %d / 2?", i), Answer: float64(i) / 2, Level: int64(1 + i%2)})
	}
	rows = append(rows, pqRow{ID: "p3", Question: "dup", Answer: 1, Level: 1})
	if _, err := w.Write(rows); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	c := cfg(write(t, "d.parquet", buf.String()))
	c.Level = "level"
	d, err := Load(c)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Tasks) != 50 || d.Skipped["duplicate_id"] != 1 || fmt.Sprint(d.Levels()) != "[1 2]" {
		t.Fatalf("%d tasks, skipped %v, levels %v", len(d.Tasks), d.Skipped, d.Levels())
	}
	spec := d.Spec("pq")
	at2 := spec.AtLevel(2)
	e, _ := at2.New()
	for seed := range int64(len(d.Tasks)) {
		if _, err := e.Reset(context.Background(), seed); err != nil {
			t.Fatal(err)
		}
		tr, err := e.Step(context.Background(), "no idea")
		if err != nil || tr.Info[env.InfoLevel] != "2" {
			t.Fatalf("seed %d at level 2: %+v, %v", seed, tr, err)
		}
	}
	c.Path = write(t, "bad.parquet", "PAR1 this is not parquet PAR1")
	if _, err := Load(c); err == nil {
		t.Fatal("a corrupt parquet file loads")
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{
		{}, {Path: "x.txt", Prompt: "q", Answer: "a", Split: Split{HeldOut: 0.1}, Verifier: "exact"},
		{Path: "x.jsonl", Prompt: "{q", Answer: "a", Split: Split{HeldOut: 0.1}, Verifier: "exact"},
		{Path: "x.jsonl", Prompt: "q}", Answer: "a", Split: Split{HeldOut: 0.1}, Verifier: "exact"},
		{Path: "x.jsonl", Prompt: "q", Answer: "a", Split: Split{HeldOut: 1.5}, Verifier: "exact"},
		{Path: "x.jsonl", Prompt: "q", Answer: "a", Split: Split{}, Verifier: "exact"},
		{Path: "x.jsonl", Prompt: "q", Answer: "a", Split: Split{HeldOut: 0.1}, Verifier: "judge"},
		{Path: "x.jsonl", Prompt: "q", Answer: "a", Split: Split{HeldOut: 0.1}, Verifier: "exact", Tolerance: 0.1},
		{Path: "x.jsonl", Prompt: "q", Answer: "", Split: Split{HeldOut: 0.1}, Verifier: "exact"},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v validates", c)
		}
	}
}

// With tools, an episode is multi-turn: a turn calling the calculator is answered by it, and the
// first turn without a call is graded; the suite holds for the wrapped environment.
func TestTools(t *testing.T) {
	c := cfg(write(t, "d.jsonl", jsonlOf(200)))
	c.Tools, c.MaxTurns = []string{"calculator"}, 3
	d, err := Load(c)
	if err != nil {
		t.Fatal(err)
	}
	spec := d.Spec("withtools")
	envtest.Run(t, spec)
	e, _ := spec.New()
	ctx := context.Background()
	obs, err := e.Reset(ctx, 0)
	if err != nil || !strings.Contains(obs.System, "calculator") {
		t.Fatalf("system prompt %q, %v", obs.System, err)
	}
	tr, err := e.Step(ctx, `<tool_call>{"name": "calculator", "arguments": {"expression": "`+d.Tasks[0].Answer+` + 0"}}</tool_call>`)
	if err != nil || tr.Done || !strings.Contains(tr.Observation, d.Tasks[0].Answer) || len(tr.ToolCalls) != 1 {
		t.Fatalf("a calculator call: %+v, %v", tr, err)
	}
	if tr, err = e.Step(ctx, d.Tasks[0].Answer); err != nil || !tr.Done || tr.Reward != 1 {
		t.Fatalf("the answer after the call: %+v, %v", tr, err)
	}
	// A demo field: the expert calls the calculator first, then answers.
	var rows strings.Builder
	for i := range 40 {
		fmt.Fprintf(&rows, `{"q": "What is %d + 1?", "a": %d, "call": "<tool_call>{\"name\": \"calculator\", \"arguments\": {\"expression\": \"%d + 1\"}}</tool_call>"}`+"\n", i, i+1, i)
	}
	dc := Config{Path: write(t, "demo.jsonl", rows.String()), Prompt: "q", Answer: "a", Demo: "call", Tools: []string{"calculator"},
		Split: Split{HeldOut: 0.25}, Verifier: "rational"}
	dd, err := Load(dc)
	if err != nil {
		t.Fatal(err)
	}
	ds := dd.Spec("demo")
	de, _ := ds.New()
	ep, err := env.Play(ctx, de, ds.Expert(3, 0, nil), 3, 4)
	if err != nil || !ep.Success || len(ep.Steps) != 2 || len(ep.Steps[0].Transition.ToolCalls) != 1 {
		t.Fatalf("the expert with a demo: %+v, %v", ep, err)
	}
	bad := cfg("x.jsonl")
	bad.Demo = "call"
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "demo") {
		t.Fatalf("a demo without tools: %v", err)
	}
	bad.Demo = ""
	bad.Tools = []string{"python"}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "available: calculator") {
		t.Fatalf("an unknown tool: %v", err)
	}
	bad.Tools, bad.MaxTurns = nil, 3
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "max_turns") {
		t.Fatalf("max_turns without tools: %v", err)
	}
}
