package code

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// fenceRE matches a fenced code block tagged python, py or nothing. The last block of the turn
// is the answer, so an agent may show drafts before it.
var fenceRE = regexp.MustCompile("(?s)```(?:python3?|py)?[ \t]*\r?\n(.*?)```")

// Reasons an answer earned nothing before any test ran; they go into Info["reason"].
var (
	errNoCode       = errors.New("no ```python code block in the answer")
	errAnswerSize   = errors.New("answer code too long")
	errAnswerBytes  = errors.New("answer code is not valid UTF-8 text")
	errAnswerBlank  = errors.New("answer code block is empty")
	errNoResultLine = errors.New("the tests produced no result")
)

// extractAnswer returns the code of the last fenced block of action.
func extractAnswer(action string, maxBytes int) (string, error) {
	m := fenceRE.FindAllStringSubmatch(action, -1)
	if len(m) == 0 {
		return "", errNoCode
	}
	code := m[len(m)-1][1]
	switch {
	case len(code) > maxBytes:
		return "", fmt.Errorf("%w: %d bytes, limit %d", errAnswerSize, len(code), maxBytes)
	case !utf8.ValidString(code) || strings.IndexByte(code, 0) >= 0:
		return "", errAnswerBytes
	case strings.TrimSpace(code) == "":
		return "", errAnswerBlank
	}
	return code, nil
}

// maxResultChars bounds one case's serialized result in the harness output: every expected
// value is far shorter, and the bound keeps all lines inside the sandbox's output cap.
const maxResultChars = 200

// harness is the program that grades an answer. It loads the answer as a module with its
// prints discarded, calls the function on each hidden input and writes one line per case,
// "<nonce> <index> <json result>" or "<nonce> <index> !<exception>", straight to fd 1.
//
// Only inputs go into the sandbox; the expected results stay in Go. Whatever the answer does
// to the interpreter (patching json, printing forged lines, exiting early) it cannot claim a
// case without producing that case's right result, which is solving the task.
func harness(p *problem, answer, nonce string) (string, error) {
	inputs := make([][]any, len(p.cases))
	for i, c := range p.cases {
		inputs[i] = c.args
	}
	in, err := json.Marshal(inputs)
	if err != nil {
		return "", fmt.Errorf("code: encode inputs: %w", err)
	}
	// A JSON string literal is also a valid Python string literal.
	src, err := json.Marshal(answer)
	if err != nil {
		return "", fmt.Errorf("code: encode answer: %w", err)
	}
	inLit, err := json.Marshal(string(in))
	if err != nil {
		return "", fmt.Errorf("code: encode inputs: %w", err)
	}
	return fmt.Sprintf(`import json as _json, os as _os, sys as _sys
_sys.stdout = _sys.stderr = open(_os.devnull, "w")
def _emit(i, s):
    _os.write(1, ("%%s %%d %%s\n" %% (%q, i, s)).encode("utf-8", "replace"))
_ns = {"__name__": "answer"}
try:
    exec(compile(%s, "answer.py", "exec"), _ns)
    _f = _ns[%q]
except BaseException as _e:
    _emit(-1, "!" + type(_e).__name__)
    _os._exit(0)
for _i, _args in enumerate(_json.loads(%s)):
    try:
        _out = _json.dumps(_f(*_args))
        if len(_out) > %d:
            _out = "!TooLong"
    except BaseException as _e:
        _out = "!" + type(_e).__name__
    _emit(_i, _out)
_os._exit(0)
`, nonce, src, p.fn, inLit, maxResultChars), nil
}

// verdict is the outcome of grading one answer.
type verdict struct {
	passed, total int
	// load is set when the answer did not load (syntax error, missing function): the
	// exception name.
	load string
}

// parseVerdict reads the harness output. The first line for each case counts; lines without
// the nonce (whatever else reached stdout) are ignored.
func parseVerdict(p *problem, stdout, nonce string) (verdict, error) {
	v := verdict{total: len(p.cases)}
	seen := make([]bool, len(p.cases))
	found := false
	for line := range strings.SplitSeq(stdout, "\n") {
		rest, ok := strings.CutPrefix(line, nonce+" ")
		if !ok {
			continue
		}
		idx, out, ok := strings.Cut(rest, " ")
		if !ok {
			continue
		}
		i, err := strconv.Atoi(idx)
		if err != nil {
			continue
		}
		found = true
		if i == -1 {
			v.load = strings.TrimPrefix(out, "!")
			break
		}
		if i < 0 || i >= len(p.cases) || seen[i] {
			continue
		}
		seen[i] = true
		if ok, err := sameJSON(out, p.cases[i].want); err == nil && ok {
			v.passed++
		}
	}
	if !found {
		return v, errNoResultLine
	}
	return v, nil
}

// sameJSON compares a result serialized by Python's json.dumps with an expected value the way
// Python's == would for these types, except that bool and int differ: numbers by value (so 6.0
// equals 6), strings, lists and booleans exactly.
func sameJSON(got string, want any) (bool, error) {
	dec := json.NewDecoder(strings.NewReader(got))
	dec.UseNumber()
	var g any
	if err := dec.Decode(&g); err != nil {
		return false, err
	}
	wb, err := json.Marshal(want)
	if err != nil {
		return false, err
	}
	dec = json.NewDecoder(bytes.NewReader(wb))
	dec.UseNumber()
	var w any
	if err := dec.Decode(&w); err != nil {
		return false, err
	}
	return equalJSON(g, w), nil
}

func equalJSON(a, b any) bool {
	switch x := a.(type) {
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		return equalNumber(x.String(), y.String())
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !equalJSON(x[i], y[i]) {
				return false
			}
		}
		return true
	case string, bool, nil:
		return a == b
	}
	return false
}

// equalNumber compares two JSON numbers by value. Expected values are integers; an integral
// float result (6.0) equals them. Parsing goes through ParseFloat rather than big.Rat because
// the text is the answer's to choose: "1e999999999" must cost nothing.
func equalNumber(got, want string) bool {
	gi, okG := new(big.Int).SetString(got, 10)
	wi, okW := new(big.Int).SetString(want, 10)
	switch {
	case okG && okW:
		return gi.Cmp(wi) == 0
	case okW:
		f, err := strconv.ParseFloat(got, 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return false
		}
		return new(big.Float).SetFloat64(f).Cmp(new(big.Float).SetInt(wi)) == 0
	}
	return got == want
}
