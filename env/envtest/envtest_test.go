package envtest

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestToyEnvPasses(t *testing.T) { Run(t, toySpec("")) }

// TestSuiteCatchesFlaws runs the suite against deliberately broken environments in a child
// process (a failing suite must fail the test that runs it, which cannot be observed in-process)
// and checks that each flaw is caught with a message naming it.
func TestSuiteCatchesFlaws(t *testing.T) {
	for _, tc := range []struct{ flaw, want string }{
		{"panic", "panic: toy: NUL byte"},
		{"error-on-garbage", "want an observation"},
		{"nondeterministic", "differs"},
		{"nan", "is not finite"},
		{"bad-role", "observations are spoken by tool or env"},
		{"no-turn-limit", "never ended its episode"},
		{"noise-ignored", "noise does not make it err"},
		{"leak", "goroutines left after every instance was closed"},
	} {
		t.Run(tc.flaw, func(t *testing.T) {
			args := []string{"-test.run=^TestFlawHelper$", "-test.v"}
			if testing.Short() {
				args = append(args, "-test.short")
			}
			cmd := exec.Command(os.Args[0], args...)
			cmd.Env = append(os.Environ(), "ENVTEST_FLAW="+tc.flaw)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("suite passed an env with flaw %q:\n%s", tc.flaw, tail(out))
			}
			if !strings.Contains(string(out), tc.want) {
				t.Errorf("flaw %q: output lacks %q:\n%s", tc.flaw, tc.want, tail(out))
			}
		})
	}
}

// TestFlawHelper is the child side of TestSuiteCatchesFlaws.
func TestFlawHelper(t *testing.T) {
	flaw := os.Getenv("ENVTEST_FLAW")
	if flaw == "" {
		t.Skip("run by TestSuiteCatchesFlaws")
	}
	Run(t, toySpec(flaw))
}

func tail(b []byte) string {
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}
