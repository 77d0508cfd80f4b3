package dataset

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
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

// testCases is a test-cases row's answer: standard input and the standard output expected of
// it, case by case (the stdin/stdout form of APPS, TACO and their successors).
type testCases struct {
	Inputs  []string `json:"inputs"`
	Outputs []string `json:"outputs"`
}

func parseTestCases(answer string) (*testCases, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(answer), &raw); err != nil {
		return nil, fmt.Errorf(`test cases: a JSON object {"inputs": [...], "outputs": [...]}: %v`, err)
	}
	for k := range raw {
		if k != "inputs" && k != "outputs" {
			return nil, fmt.Errorf("test cases: unknown key %q (stdin/stdout cases only: inputs and outputs)", k)
		}
	}
	var tc testCases
	if err := json.Unmarshal([]byte(answer), &tc); err != nil {
		return nil, fmt.Errorf("test cases: inputs and outputs are lists of text: %v", err)
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
	harness := fmt.Sprintf(`import io as _io, json as _json, os as _os, sys as _sys
def _emit(i, s):
    _os.write(1, ("%%s %%d %%s\n" %% (%q, i, s)).encode("utf-8", "replace"))
try:
    _code = compile(%s, "answer.py", "exec")
except BaseException as _e:
    _emit(-1, "!" + type(_e).__name__)
    _os._exit(0)
for _i, _inp in enumerate(_json.loads(%s)):
    _out = _io.StringIO()
    _sys.stdin, _sys.stdout, _sys.stderr = _io.StringIO(_inp), _out, _io.StringIO()
    _res = None
    try:
        exec(_code, {"__name__": "__main__"})
    except SystemExit:
        pass
    except BaseException as _e:
        _res = "!" + type(_e).__name__
    _sys.stdout, _sys.stderr = _sys.__stdout__, _sys.__stderr__
    if _res is None:
        _res = _json.dumps(_out.getvalue()[:%d])
    _emit(_i, _res)
_os._exit(0)
`, nonce, src, inLit, MaxCaseOutput+1)
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
		var got string
		if strings.HasPrefix(out, "!") || json.Unmarshal([]byte(out), &got) != nil {
			continue
		}
		if sameOutput(got, tc.Outputs[i]) {
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

// gradeCases is reward's grade of a test-cases run: every case passed.
func gradeCases(passed, total int) float64 { return reward.Cases{}.Grade(passed, total) }

// caseLimits are the limits the test-cases verifier's sandbox is made with (tests shorten them).
var caseLimits = TestCasesLimits
