package dataset

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"regexp"
	"strconv"
	"strings"

	"github.com/agentrl/agentrl/reward"
	"github.com/agentrl/agentrl/tool"
)

// Bounds of a test-cases answer.
const (
	MaxCases      = 64      // cases of one row
	MaxCaseOutput = 8 << 10 // one case's expected (and kept) output
)

// testCases is a test-cases row's answer, case by case (the two forms of APPS, TACO and their
// successors): standard input and the standard output expected of it, or, with FnName, the
// arguments of a call (a JSON array) and the value it must return (JSON), both kept as JSON text.
type testCases struct {
	Inputs  []string
	Outputs []string
	FnName  string
}

var fnNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

func parseTestCases(answer string) (*testCases, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(answer), &raw); err != nil {
		return nil, fmt.Errorf(`test cases: a JSON object {"inputs": [...], "outputs": [...]}: %v`, err)
	}
	for k := range raw {
		if k != "inputs" && k != "outputs" && k != "fn_name" {
			return nil, fmt.Errorf("test cases: unknown key %q (inputs, outputs and fn_name)", k)
		}
	}
	var tc testCases
	if fn, ok := raw["fn_name"]; ok {
		if err := json.Unmarshal(fn, &tc.FnName); err != nil || !fnNameRE.MatchString(tc.FnName) {
			return nil, fmt.Errorf("test cases: fn_name %s is not a Python function name", capText(string(fn), 80))
		}
		var in, out []json.RawMessage
		if err := json.Unmarshal(raw["inputs"], &in); err != nil {
			return nil, fmt.Errorf("test cases: inputs is a list of argument lists: %v", err)
		}
		if err := json.Unmarshal(raw["outputs"], &out); err != nil {
			return nil, fmt.Errorf("test cases: outputs is a list of return values: %v", err)
		}
		for i, a := range in {
			var args []json.RawMessage
			if err := json.Unmarshal(a, &args); err != nil {
				return nil, fmt.Errorf("test cases: input %d is not a list of arguments", i)
			}
			tc.Inputs = append(tc.Inputs, string(a))
		}
		for _, o := range out {
			tc.Outputs = append(tc.Outputs, string(o))
		}
	} else {
		if err := json.Unmarshal(raw["inputs"], &tc.Inputs); err != nil {
			return nil, fmt.Errorf("test cases: inputs is a list of text (or give fn_name for calls): %v", err)
		}
		if err := json.Unmarshal(raw["outputs"], &tc.Outputs); err != nil {
			return nil, fmt.Errorf("test cases: outputs is a list of text: %v", err)
		}
	}
	switch {
	case len(tc.Inputs) == 0 || len(tc.Inputs) != len(tc.Outputs):
		return nil, fmt.Errorf("test cases: %d inputs and %d outputs: as many of each, at least one", len(tc.Inputs), len(tc.Outputs))
	case len(tc.Inputs) > MaxCases:
		return nil, fmt.Errorf("test cases: %d cases, over %d", len(tc.Inputs), MaxCases)
	}
	for i, o := range tc.Outputs {
		if len(o) > MaxCaseOutput {
			return nil, fmt.Errorf("test cases: output %d is %d bytes, over %d", i, len(o), MaxCaseOutput)
		}
	}
	return &tc, nil
}

// TestCasesLimits are the sandbox's limits for one answer's run of all its cases: the
// defaults' time and CPU, 256 MiB of memory, room for every case's output.
func TestCasesLimits() tool.SandboxLimits {
	l := tool.DefaultSandboxLimits()
	l.OutputBytes = MaxCases * (MaxCaseOutput + 64)
	return l
}

// codeFenceRE is the answer's program: its last ```python (or bare ```) block.
var codeFenceRE = regexp.MustCompile("(?s)```(?:python3?|py)?[ \t]*\r?\n(.*?)```")

// runCases runs the response's program on each case in one sandboxed run and counts the cases
// whose output matches (each line's trailing spaces and the trailing blank lines aside). A
// response without a program, or one that does not compile, passes none; err is an
// infrastructure failure (no sandbox, ctx ended).
func runCases(ctx context.Context, sb *tool.Sandbox, tc *testCases, response string) (passed int, why string, err error) {
	m := codeFenceRE.FindAllStringSubmatch(response, -1)
	if len(m) == 0 {
		return 0, "no ```python block", nil
	}
	code := m[len(m)-1][1]
	if strings.TrimSpace(code) == "" || strings.IndexByte(code, 0) >= 0 {
		return 0, "an empty program", nil
	}
	var nb [12]byte
	if _, err := rand.Read(nb[:]); err != nil {
		return 0, "", err
	}
	nonce := hex.EncodeToString(nb[:])
	src, _ := json.Marshal(code)
	in, _ := json.Marshal(tc.Inputs)
	inLit, _ := json.Marshal(string(in))
	fnLit, _ := json.Marshal(tc.FnName)
	harness := fmt.Sprintf(`import io as _io, json as _json, os as _os, sys as _sys
def _emit(i, s):
    _os.write(1, ("%%s %%d %%s\n" %% (%q, i, s)).encode("utf-8", "replace"))
try:
    _code = compile(%s, "answer.py", "exec")
except BaseException as _e:
    _emit(-1, "!" + type(_e).__name__)
    _os._exit(0)
_fn, _cap = %s, %d
_ns = None
if _fn:
    _sys.stdout = _sys.stderr = _io.StringIO()
    _ns = {"__name__": "answer"}
    try:
        exec(_code, _ns)
        _f = _ns[_fn] if _fn in _ns else getattr(_ns["Solution"](), _fn)
    except BaseException as _e:
        _sys.stdout, _sys.stderr = _sys.__stdout__, _sys.__stderr__
        _emit(-1, "!" + type(_e).__name__)
        _os._exit(0)
for _i, _inp in enumerate(_json.loads(%s)):
    _out = _io.StringIO()
    _sys.stdout, _sys.stderr = _out, _io.StringIO()
    _res = None
    try:
        if _fn:
            _res = _json.dumps(_f(*_json.loads(_inp)))
            if len(_res) > _cap:
                _res = "!TooLong"
        else:
            _sys.stdin = _io.StringIO(_inp)
            exec(_code, {"__name__": "__main__"})
    except SystemExit:
        pass
    except BaseException as _e:
        _res = "!" + type(_e).__name__
    _sys.stdout, _sys.stderr = _sys.__stdout__, _sys.__stderr__
    if _res is None:
        _res = _json.dumps(_out.getvalue()[:_cap])
    _emit(_i, _res)
_os._exit(0)
`, nonce, src, fnLit, MaxCaseOutput+1, inLit)
	res, err := sb.Run(ctx, harness)
	if err != nil {
		var se *tool.SandboxError
		if errors.As(err, &se) || ctx.Err() != nil {
			return 0, "", err
		}
		return 0, err.Error(), nil // the program is too large or not text: the answer's doing
	}
	seen := make([]bool, len(tc.Inputs))
	ran := false
	for line := range strings.SplitSeq(res.Stdout, "\n") {
		rest, ok := strings.CutPrefix(line, nonce+" ")
		if !ok {
			continue
		}
		idx, out, ok := strings.Cut(rest, " ")
		i, err := strconv.Atoi(idx)
		if !ok || err != nil {
			continue
		}
		ran = true
		if i == -1 {
			return 0, "the program does not compile: " + strings.TrimPrefix(out, "!"), nil
		}
		if i < 0 || i >= len(seen) || seen[i] {
			continue
		}
		seen[i] = true
		if strings.HasPrefix(out, "!") {
			continue
		}
		if tc.FnName != "" {
			if sameReturn(out, tc.Outputs[i]) {
				passed++
			}
			continue
		}
		var got string
		if json.Unmarshal([]byte(out), &got) == nil && sameOutput(got, tc.Outputs[i]) {
			passed++
		}
	}
	switch {
	case !ran && res.Limit != tool.LimitNone:
		return 0, "stopped by the " + string(res.Limit) + " limit", nil
	case !ran:
		return 0, "the tests produced no result: " + res.Summary(), nil
	}
	return passed, "", nil
}

// sameOutput compares program output with the expected, each line's trailing whitespace and
// the trailing blank lines aside.
func sameOutput(got, want string) bool {
	norm := func(s string) string {
		lines := strings.Split(strings.ReplaceAll(s, "\r\n", "\n"), "\n")
		for i, l := range lines {
			lines[i] = strings.TrimRight(l, " \t")
		}
		for len(lines) > 0 && lines[len(lines)-1] == "" {
			lines = lines[:len(lines)-1]
		}
		return strings.Join(lines, "\n")
	}
	return norm(got) == norm(want)
}

// sameReturn compares a returned value (Python's json.dumps) with the expected one: numbers by
// value (6.0 equals 6; true is not 1), strings, lists and objects exactly. An expected list of one
// element also matches that element returned (APPS and TACO wrap call-based outputs so).
func sameReturn(got, want string) bool {
	g, err1 := decodeNumbers(got)
	w, err2 := decodeNumbers(want)
	if err1 != nil || err2 != nil {
		return false
	}
	if jsonEqual(g, w) {
		return true
	}
	l, ok := w.([]any)
	return ok && len(l) == 1 && jsonEqual(g, l[0])
}

func decodeNumbers(s string) (any, error) {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}

func jsonEqual(a, b any) bool {
	switch x := a.(type) {
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		if hugeExponent(string(x)) || hugeExponent(string(y)) {
			return x == y // 1e999999999 would take big.Rat forever to expand
		}
		rx, ok1 := new(big.Rat).SetString(string(x))
		ry, ok2 := new(big.Rat).SetString(string(y))
		return ok1 && ok2 && rx.Cmp(ry) == 0
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !jsonEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			if w, ok := y[k]; !ok || !jsonEqual(v, w) {
				return false
			}
		}
		return true
	}
	return a == b // strings, booleans, nil
}

// hugeExponent reports a number written with an exponent over 1000 in size.
func hugeExponent(n string) bool {
	i := strings.IndexAny(n, "eE")
	if i < 0 {
		return false
	}
	e, err := strconv.Atoi(strings.TrimPrefix(n[i+1:], "+"))
	return err != nil || e > 1000 || e < -1000
}

// gradeCases is reward's grade of a test-cases run: every case passed.
func gradeCases(passed, total int) float64 { return reward.Cases{}.Grade(passed, total) }

// caseLimits are the limits the test-cases verifier's sandbox is made with (tests shorten them).
var caseLimits = TestCasesLimits
