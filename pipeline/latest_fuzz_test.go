package pipeline

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzLatest: whatever checkpoints/LATEST holds, parseLatest never panics, and a name it accepts
// is one folder directly inside checkpoints/, a step checkpoint's name that reads back the same;
// a name that would leave checkpoints/ is refused as such, never merely as damage.
func FuzzLatest(f *testing.F) {
	for _, s := range []string{"rl-p1.s000004\n", "sft-p0.s000000", "", "\n", "rl-p1.s0", "../../outside\n", "/etc",
		"..", ".", ".sft-p0.s000002.tmp-1", "a/b-p0.s000001", `a\b-p0.s000001`, "rl-p1.s000004\x00", "best", "ref-rl",
		"rl-p-1.s000002", "rl-p1.s-00002", "x-p1.s0000001", "x-p01.s000001", "é-p0.s000001", "\xff-p0.s000001"} {
		f.Add([]byte(s))
	}
	root := filepath.Join("run", checkpointsDir)
	f.Fuzz(func(t *testing.T, data []byte) {
		name, err := parseLatest(data)
		s := strings.TrimSpace(string(data))
		if errors.Is(err, errLatestOutside) {
			if !strings.ContainsAny(s, `/\`) && s != "." && s != ".." {
				t.Fatalf("%q refused as leaving checkpoints/", data)
			}
			return
		}
		if strings.ContainsAny(s, `/\`) || s == ".." {
			t.Fatalf("%q not refused as leaving checkpoints/ (err %v)", data, err)
		}
		if err != nil {
			return
		}
		if filepath.Dir(filepath.Join(root, name)) != root || filepath.Base(name) != name || strings.HasPrefix(name, ".") {
			t.Fatalf("accepted %q, which is not a folder directly in checkpoints/", name)
		}
		p, st, ok := parseStepName(name)
		if !ok || p < 0 || st < 0 {
			t.Fatalf("accepted %q, not a step checkpoint's name", name)
		}
		if again, err := parseLatest([]byte(name + "\n")); err != nil || again != name {
			t.Fatalf("%q does not read back: %q, %v", name, again, err)
		}
	})
}
