package dataset

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/big"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/reward"
	"github.com/agentrl/agentrl/tool"
)

// Task is one row kept.
type Task struct {
	ID, Prompt, Answer string
	Demo               string // the expert's first turn, when the dataset has a demo field
	Level              int    // 0 without a level field
	HeldOut            bool
	Line               int // the row's line (JSONL, CSV) or row number (Parquet), from 1

	pattern *regexp.Regexp     // the regex verifier's compiled answer
	schema  *reward.JSONSchema // the json-schema verifier's
	cases   *testCases         // the test-cases verifier's
}

// Data is a dataset read: its tasks, train rows first, and what was skipped.
type Data struct {
	Config Config
	Tasks  []Task
	Train  int // Tasks[:Train] are train rows, the rest held out
	// Skipped counts the malformed rows by reason (missing_field, wrong_type, invalid_utf8,
	// bad_json, duplicate_id, line_too_long, bad_level, unknown_split, bad_answer, …).
	Skipped map[string]int
	// Examples holds the first few skipped rows, "line N: reason: detail".
	Examples []string

	grade    graders
	verdicts [3]atomic.Int64 // the judge's verdicts, by reward.Verdict
	provider *provider       // the remote environment answering tool calls (UseTools)
}

// graders are what the test-cases and judge verifiers need, made at the first use (Load makes
// them at once, so that a missing sandbox or key stops the run at its start).
type graders struct {
	once  sync.Once
	sb    *tool.Sandbox
	judge *reward.Judge
	err   error
}

func (d *Data) prepare() error {
	d.grade.once.Do(func() {
		switch d.Config.Verifier {
		case "test-cases":
			if d.grade.sb, d.grade.err = tool.NewSandbox(caseLimits()); d.grade.err != nil {
				d.grade.err = fmt.Errorf("dataset: the test-cases verifier runs programs in the bubblewrap sandbox: %w", d.grade.err)
			}
		case "judge":
			d.grade.judge, d.grade.err = newChatJudge(*d.Config.Judge)
		}
	})
	return d.grade.err
}

func (d *Data) sandbox() (*tool.Sandbox, error) { return d.grade.sb, d.prepare() }

func (d *Data) judge() (*reward.Judge, error) {
	err := d.prepare()
	return d.grade.judge, err
}

// JudgeVerdicts counts the judge's judgements so far: scored, unparseable (fallback) and timed
// out (fallback).
func (d *Data) JudgeVerdicts() (judged, unparseable, timedOut int64) {
	return d.verdicts[reward.Judged].Load(), d.verdicts[reward.Unparseable].Load(), d.verdicts[reward.TimedOut].Load()
}

// RowError is a malformed row, as Strict reports it.
type RowError struct {
	Line   int
	Reason string
	Detail string
}

func (e *RowError) Error() string { return fmt.Sprintf("line %d: %s: %s", e.Line, e.Reason, e.Detail) }

// ErrTooLarge: the file is over max_bytes, or has more rows than max_rows.
var ErrTooLarge = errors.New("dataset: over its bounds")

// Load reads the file of c.
func Load(c Config) (*Data, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	f, err := os.Open(c.Path)
	if err != nil {
		return nil, fmt.Errorf("tasks.path: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("tasks.path: %w", err)
	}
	c = c.withDefaults()
	if st.Mode().IsRegular() && st.Size() > c.MaxBytes {
		return nil, fmt.Errorf("%s: %w: %d bytes, over max_bytes %d", c.Path, ErrTooLarge, st.Size(), c.MaxBytes)
	}
	var d *Data
	if c.Format() == "parquet" {
		if !st.Mode().IsRegular() {
			return nil, fmt.Errorf("%s: a parquet file must be a regular file", c.Path)
		}
		d, err = readParquet(f, st.Size(), c)
	} else {
		d, err = Read(f, c)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.Path, err)
	}
	if err := d.prepare(); err != nil {
		return nil, err
	}
	return d, nil
}

// Read reads a JSONL or CSV dataset (c.Format) from r.
func Read(r io.Reader, c Config) (*Data, error) {
	c = c.withDefaults()
	b := newBuilder(c)
	lr := &limitReader{r: r, left: c.MaxBytes}
	var err error
	switch c.Format() {
	case "jsonl":
		err = readJSONL(lr, b)
	case "csv":
		err = readCSV(lr, b)
	default:
		return nil, fmt.Errorf("dataset: format of %q: want .jsonl or .csv here", c.Path)
	}
	if err != nil {
		return nil, err
	}
	return b.finish()
}

// limitReader fails, rather than ends, past its bound.
type limitReader struct {
	r    io.Reader
	left int64
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.left <= 0 {
		var one [1]byte
		if n, _ := l.r.Read(one[:]); n > 0 {
			return 0, fmt.Errorf("%w: more than max_bytes", ErrTooLarge)
		}
		return 0, io.EOF
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}

// value is a field of a row as text.
type row func(field string) (string, error)

type fieldError struct{ reason, detail string }

func (e *fieldError) Error() string { return e.reason + ": " + e.detail }

func missing(f string) error { return &fieldError{"missing_field", fmt.Sprintf("no field %q", f)} }

// jsonValue turns a decoded JSON value into text: strings as they are, numbers as written,
// booleans; an array of scalars joins with ", " (the set verifier's items); objects, nested
// arrays and null are not text.
func jsonValue(field string, v any) (string, error) {
	switch x := v.(type) {
	case nil:
		return "", missing(field)
	case string:
		return x, nil
	case json.Number:
		return string(x), nil
	case bool:
		return strconv.FormatBool(x), nil
	case []any:
		parts := make([]string, 0, len(x))
		for _, it := range x {
			switch y := it.(type) {
			case string:
				parts = append(parts, y)
			case json.Number:
				parts = append(parts, string(y))
			case bool:
				parts = append(parts, strconv.FormatBool(y))
			default:
				return "", &fieldError{"wrong_type", fmt.Sprintf("field %q: a list of text or numbers, not %T inside", field, it)}
			}
		}
		return strings.Join(parts, ", "), nil
	}
	return "", &fieldError{"wrong_type", fmt.Sprintf("field %q is %T, not text or a number", field, v)}
}

func readJSONL(r io.Reader, b *builder) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for line := 1; ; line++ {
		text, tooLong, err := readLine(br, b.c.MaxLineBytes)
		if err != nil && err != io.EOF {
			return fmt.Errorf("line %d: %w", line, err)
		}
		if tooLong {
			if e := b.skip(line, "line_too_long", fmt.Sprintf("over max_line_bytes %d", b.c.MaxLineBytes)); e != nil {
				return e
			}
		} else if len(bytes.TrimSpace(text)) > 0 {
			if e := b.addJSON(line, text); e != nil {
				return e
			}
		}
		if err == io.EOF {
			return nil
		}
	}
}

// readLine reads one line without its newline; past max bytes it discards the rest of the line
// and reports tooLong, so a huge line costs no memory.
func readLine(br *bufio.Reader, max int) (line []byte, tooLong bool, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(chunk) > max+1 { // +1: the newline
				tooLong, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		switch err {
		case bufio.ErrBufferFull:
			continue
		case nil:
			return bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r")), tooLong, nil
		default:
			return line, tooLong, err
		}
	}
}

func (b *builder) addJSON(line int, text []byte) error {
	if !utf8.Valid(text) {
		return b.skip(line, "invalid_utf8", "the line is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return b.skip(line, "bad_json", err.Error())
	}
	if _, err := dec.Token(); err != io.EOF {
		return b.skip(line, "bad_json", "data after the object")
	}
	if m == nil {
		return b.skip(line, "bad_json", "null, not an object")
	}
	return b.add(line, func(f string) (string, error) {
		v, ok := m[f]
		if !ok {
			return "", missing(f)
		}
		if f == b.c.Answer && (b.c.Verifier == "json-schema" || b.c.Verifier == "test-cases") {
			switch v.(type) {
			case map[string]any, []any, bool: // a schema or test cases written as JSON
				out, err := json.Marshal(v)
				return string(out), err
			}
		}
		return jsonValue(f, v)
	})
}

// lineGuard fails a CSV stream whose physical line grows past max bytes.
type lineGuard struct {
	r    io.Reader
	max  int
	cur  int
	line int
}

var errLineTooLong = errors.New("a line over max_line_bytes")

func (g *lineGuard) Read(p []byte) (int, error) {
	n, err := g.r.Read(p)
	for _, c := range p[:n] {
		if c == '\n' {
			g.cur = 0
			g.line++
			continue
		}
		if g.cur++; g.cur > g.max {
			return 0, fmt.Errorf("line %d: %w (%d)", g.line+1, errLineTooLong, g.max)
		}
	}
	return n, err
}

func readCSV(r io.Reader, b *builder) error {
	cr := csv.NewReader(&lineGuard{r: r, max: b.c.MaxLineBytes})
	cr.ReuseRecord = false
	header, err := cr.Read()
	if err != nil {
		if err == io.EOF {
			return errors.New("the CSV file is empty: no header")
		}
		return fmt.Errorf("CSV header: %w", err)
	}
	cols := map[string]int{}
	for i, h := range header {
		h = strings.TrimPrefix(h, "\ufeff")
		if _, dup := cols[h]; dup {
			return fmt.Errorf("CSV header: column %q twice", h)
		}
		cols[h] = i
	}
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			return nil
		}
		var pe *csv.ParseError
		if errors.As(err, &pe) && !errors.Is(err, errLineTooLong) {
			if e := b.skip(pe.Line, "bad_csv", pe.Err.Error()); e != nil {
				return e
			}
			continue
		}
		if err != nil {
			return err
		}
		line := 0
		if len(rec) > 0 {
			line, _ = cr.FieldPos(0)
		}
		bad := false
		for _, f := range rec {
			bad = bad || !utf8.ValidString(f)
		}
		if bad {
			if e := b.skip(line, "invalid_utf8", "a field is not valid UTF-8"); e != nil {
				return e
			}
			continue
		}
		if e := b.add(line, func(f string) (string, error) {
			i, ok := cols[f]
			if !ok || i >= len(rec) {
				return "", missing(f)
			}
			return rec[i], nil
		}); e != nil {
			return e
		}
	}
}

// builder turns rows into tasks.
type builder struct {
	c        Config
	prompt   template
	fraction float64
	splitBy  string
	d        *Data
	ids      map[string]bool
}

func newBuilder(c Config) *builder {
	t, _ := parseTemplate(c.Prompt) // validated
	b := &builder{c: c, prompt: t, ids: map[string]bool{}, d: &Data{Config: c, Skipped: map[string]int{}}}
	b.fraction, _ = c.Split.fraction()
	b.splitBy, _ = c.Split.field()
	return b
}

func (b *builder) skip(line int, reason, detail string) error {
	if b.c.Strict {
		return &RowError{Line: line, Reason: reason, Detail: detail}
	}
	b.d.Skipped[reason]++
	if len(b.d.Examples) < 5 {
		if len(detail) > 200 {
			detail = detail[:200] + "…"
		}
		b.d.Examples = append(b.d.Examples, fmt.Sprintf("line %d: %s: %s", line, reason, strings.ToValidUTF8(detail, "?")))
	}
	return nil
}

var heldOutValues = map[string]bool{"test": true, "heldout": true, "held_out": true, "held-out": true, "validation": true, "valid": true, "eval": true}

func (b *builder) add(line int, get row) error {
	t, reason, err := b.task(line, get)
	if err != nil {
		return b.skip(line, reason, err.Error())
	}
	if len(b.d.Tasks) >= b.c.MaxRows {
		return fmt.Errorf("%w: more than max_rows %d rows", ErrTooLarge, b.c.MaxRows)
	}
	b.d.Tasks = append(b.d.Tasks, t)
	return nil
}

func (b *builder) task(line int, get row) (Task, string, error) {
	reasonOf := func(err error) string {
		var fe *fieldError
		if errors.As(err, &fe) {
			return fe.reason
		}
		return "bad_row"
	}
	t := Task{Line: line}
	var err error
	if t.Prompt, err = b.prompt.render(get); err != nil {
		return t, reasonOf(err), err
	}
	if strings.TrimSpace(t.Prompt) == "" {
		return t, "missing_field", errors.New("the prompt is empty")
	}
	if t.Answer, err = get(b.c.Answer); err != nil {
		return t, reasonOf(err), err
	}
	if err := b.checkAnswer(&t); err != nil {
		return t, "bad_answer", err
	}
	if b.c.Demo != "" {
		if t.Demo, err = get(b.c.Demo); err != nil {
			return t, reasonOf(err), err
		}
	}
	t.ID = fmt.Sprintf("line-%d", line)
	if b.c.ID != "" {
		if t.ID, err = get(b.c.ID); err != nil {
			return t, reasonOf(err), err
		}
	}
	if b.ids[t.ID] {
		return t, "duplicate_id", fmt.Errorf("id %q was given by an earlier row", t.ID)
	}
	if b.c.Level != "" {
		v, err := get(b.c.Level)
		if err != nil {
			return t, reasonOf(err), err
		}
		if t.Level, err = strconv.Atoi(strings.TrimSpace(v)); err != nil || t.Level < 1 || t.Level > env.MaxLevel {
			return t, "bad_level", fmt.Errorf("level %q: an integer in [1, %d]", v, env.MaxLevel)
		}
	}
	if b.splitBy != "" {
		v, err := get(b.splitBy)
		if err != nil {
			return t, reasonOf(err), err
		}
		switch v = strings.ToLower(strings.TrimSpace(v)); {
		case v == "train":
		case heldOutValues[v]:
			t.HeldOut = true
		default:
			return t, "unknown_split", fmt.Errorf("split %q: train, or test / heldout / validation / eval", v)
		}
	} else {
		h := fnv.New64a()
		h.Write([]byte(t.ID))
		t.HeldOut = float64(mix(h.Sum64())>>11)/(1<<53) < b.fraction
	}
	b.ids[t.ID] = true
	return t, "", nil
}

// checkAnswer refuses a reference answer the verifier cannot grade against.
func (b *builder) checkAnswer(t *Task) error {
	switch b.c.Verifier {
	case "numeric":
		if _, err := reward.ParseNumber(t.Answer); err != nil {
			return fmt.Errorf("answer %q is not a number", t.Answer)
		}
	case "rational":
		if _, ok := new(big.Rat).SetString(strings.TrimSpace(t.Answer)); !ok {
			return fmt.Errorf("answer %q is not an exact number", t.Answer)
		}
	case "regex":
		re, err := regexp.Compile(`^(?:` + t.Answer + `)$`)
		if err != nil {
			return fmt.Errorf("answer is not a regular expression: %v", err)
		}
		t.pattern = re
	case "json-schema":
		s, err := reward.CompileJSONSchema(t.Answer)
		if err != nil {
			return fmt.Errorf("answer is not a JSON Schema: %v", err)
		}
		t.schema = s
	case "test-cases":
		tc, err := parseTestCases(t.Answer)
		if err != nil {
			return err
		}
		t.cases = tc
	}
	if t.Answer == "" && b.c.Verifier != "regex" {
		return errors.New("the answer is empty")
	}
	return nil
}

// finish orders train rows first and checks the split.
func (b *builder) finish() (*Data, error) {
	d := b.d
	if len(d.Tasks) == 0 {
		return nil, fmt.Errorf("no task: every row was skipped (%s)", describeSkips(d))
	}
	sort.SliceStable(d.Tasks, func(i, j int) bool { return !d.Tasks[i].HeldOut && d.Tasks[j].HeldOut })
	for d.Train < len(d.Tasks) && !d.Tasks[d.Train].HeldOut {
		d.Train++
	}
	if d.Train == 0 || d.Train == len(d.Tasks) {
		return nil, fmt.Errorf("the split leaves %d train and %d held-out rows: both must be non-empty", d.Train, len(d.Tasks)-d.Train)
	}
	if b.c.Level != "" {
		for _, l := range d.Levels() {
			tr, ho := 0, 0
			for _, t := range d.Tasks {
				if t.Level == l {
					if t.HeldOut {
						ho++
					} else {
						tr++
					}
				}
			}
			if tr == 0 || ho == 0 {
				return nil, fmt.Errorf("level %d has %d train and %d held-out rows: each level needs both", l, tr, ho)
			}
		}
	}
	return d, nil
}

func describeSkips(d *Data) string {
	if len(d.Skipped) == 0 {
		return "the file has no rows"
	}
	keys := make([]string, 0, len(d.Skipped))
	for k := range d.Skipped {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, d.Skipped[k]))
	}
	s := strings.Join(parts, ", ")
	if len(d.Examples) > 0 {
		s += "; first: " + d.Examples[0]
	}
	return s
}

// DescribeSkips is the skipped rows in one line ("" when none).
func (d *Data) DescribeSkips() string {
	if len(d.Skipped) == 0 {
		return ""
	}
	return describeSkips(d)
}

// Levels lists the difficulty levels the rows have, ascending (nil without a level field).
func (d *Data) Levels() []int {
	set := map[int]bool{}
	for _, t := range d.Tasks {
		if t.Level > 0 {
			set[t.Level] = true
		}
	}
	out := make([]int, 0, len(set))
	for l := range set {
		out = append(out, l)
	}
	sort.Ints(out)
	if len(out) == 0 {
		return nil
	}
	return out
}

func trimSpace(s string) string { return strings.TrimSpace(s) }

// mix is splitmix64's finalizer: FNV's high bits barely move between short ids.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}
