package cli

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/traj"
)

// runSplit runs the CLI with standard output and standard error kept apart.
func runSplit(args ...string) (stdout, stderr string, err error) {
	var out, errOut bytes.Buffer
	err = Main(context.Background(), args, &out, &errOut)
	return out.String(), errOut.String(), err
}

// readStream reads every trajectory of a stream file directly.
func readStream(t *testing.T, path string) []*traj.Trajectory {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := traj.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var ts []*traj.Trajectory
	for tr, err := range r.All() {
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, tr)
	}
	return ts
}

// tableRows is the number of lines after the header of a traj list.
func tableRows(out string) int {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	return len(lines) - 1
}

func TestTrajListShowExport(t *testing.T) {
	runs := t.TempDir()
	if out, err := runCLI(t, tinyTrain(runs)...); err != nil {
		t.Fatalf("train: %v\n%s", err, out)
	}
	dir := filepath.Join(runs, "cli")
	file := filepath.Join(dir, "trajectories.atrs")
	all := readStream(t, file)
	rl := 0
	for _, tr := range all {
		if meta(tr, "phase") == "rl" {
			rl++
		}
	}
	if len(all) == 0 || rl == 0 || rl == len(all) {
		t.Fatalf("the run recorded %d trajectories, %d of them RL: want both phases", len(all), rl)
	}

	// list: one row per trajectory, filters applied.
	for _, tc := range []struct {
		args []string
		want int
	}{
		{nil, len(all)},
		{[]string{"--phase", "rl"}, rl},
		{[]string{"--phase", "sft", "--last", "2"}, 2},
		{[]string{"--first", "3"}, 3},
		{[]string{"--env", "maze"}, 0},
	} {
		out, _, err := runSplit(append([]string{"traj", "list", dir}, tc.args...)...)
		if err != nil || !strings.HasPrefix(out, "index") || tableRows(out) != tc.want {
			t.Fatalf("traj list %v: %d rows (want %d), %v\n%s", tc.args, tableRows(out), tc.want, err, out)
		}
	}

	// A filter that matches nothing says what the file holds (item 26 of issue 29).
	if out, errOut, err := runSplit("traj", "list", dir, "--phase", "nope"); err != nil || tableRows(out) != 0 ||
		!strings.Contains(errOut, `no trajectory of the `+strconv.Itoa(len(all))+` read matches --phase "nope" (phases in the file: rl, sft)`) {
		t.Fatalf("traj list --phase nope: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}

	// show: the conversation decoded, turn by turn, for the trajectory asked for.
	last := len(all) - 1
	out, _, err := runSplit("traj", "show", dir, "--index", "0", "--index", strconv.Itoa(last))
	if err != nil {
		t.Fatalf("traj show: %v\n%s", err, out)
	}
	for _, want := range []string{"=== trajectory 0 ", "=== trajectory " + strconv.Itoa(last) + " ", "--- system", "--- user",
		"--- assistant, turn 1", "calculator", "=== end of trajectory " + strconv.Itoa(last)} {
		if !strings.Contains(out, want) {
			t.Fatalf("traj show lacks %q:\n%s", want, out)
		}
	}
	if _, _, err := runSplit("traj", "show", dir, "--index", strconv.Itoa(len(all))); err == nil || !strings.Contains(err.Error(), "no trajectory with index") {
		t.Fatalf("show of a missing index: %v", err)
	}

	// export: JSON lines that decode to exactly the recorded trajectories.
	out, _, err = runSplit("traj", "export", file)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 16<<20)
	n := 0
	for ; sc.Scan(); n++ {
		var got traj.Trajectory
		if err := got.UnmarshalJSON(sc.Bytes()); err != nil {
			t.Fatalf("export line %d: %v", n, err)
		}
		if n >= len(all) || !traj.Equal(&got, all[n]) {
			t.Fatalf("export line %d differs from the recorded trajectory", n)
		}
	}
	if n != len(all) {
		t.Fatalf("export wrote %d lines, want %d", n, len(all))
	}

	// A stream file elsewhere needs the tokenizer named.
	alone := filepath.Join(t.TempDir(), "t.atrs")
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(alone, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runSplit("traj", "show", alone, "--first", "1"); err == nil || !strings.Contains(err.Error(), "--tokenizer") {
		t.Fatalf("show without a tokenizer: %v", err)
	}
	if out, _, err := runSplit("traj", "show", alone, "--first", "1", "--tokenizer", filepath.Join(dir, "tokenizer")); err != nil || !strings.Contains(out, "=== trajectory 0 ") {
		t.Fatalf("show with --tokenizer: %v\n%s", err, out)
	}

	// A torn tail (a run still writing, or killed) lists every intact record and says so.
	torn := filepath.Join(t.TempDir(), "torn.atrs")
	if err := os.WriteFile(torn, b[:len(b)-5], 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := runSplit("traj", "list", torn)
	if err != nil || tableRows(out) != len(all)-1 || !strings.Contains(errOut, "torn record") {
		t.Fatalf("torn tail: %d rows, %v, stderr %q", tableRows(out), err, errOut)
	}
	// Damage before the end is skipped and reported: every intact record after it is read, and
	// the warning says how to repair the file.
	damaged := bytes.Clone(b)
	damaged[traj.StreamHeaderLen+20] ^= 0xff
	if err := os.WriteFile(torn, damaged, 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, err = runSplit("traj", "list", torn)
	if err != nil || tableRows(out) != len(all)-1 || !strings.Contains(errOut, "skipped") || !strings.Contains(errOut, "agentrl traj repair "+torn) {
		t.Fatalf("damaged stream: %d rows, %v, stderr %q", tableRows(out), err, errOut)
	}
	if out, _, err := runSplit("traj", "export", torn); err != nil || strings.Count(out, "\n") != len(all)-1 {
		t.Fatalf("export of a damaged stream: %v, %d lines", err, strings.Count(out, "\n"))
	}
	// traj repair keeps the intact records, says what it dropped and keeps the original.
	out, _, err = runSplit("traj", "repair", torn)
	if err != nil || !strings.Contains(out, fmt.Sprintf("kept %d intact records", len(all)-1)) || !strings.Contains(out, torn+".damaged") {
		t.Fatalf("repair: %v\n%s", err, out)
	}
	if orig, err := os.ReadFile(torn + ".damaged"); err != nil || !bytes.Equal(orig, damaged) {
		t.Fatalf("the original is not kept: %v", err)
	}
	out, errOut, err = runSplit("traj", "list", torn)
	if err != nil || tableRows(out) != len(all)-1 || errOut != "" {
		t.Fatalf("repaired stream: %d rows, %v, stderr %q", tableRows(out), err, errOut)
	}
	if out, _, err := runSplit("traj", "repair", dir); err != nil || !strings.Contains(out, "no damage") {
		t.Fatalf("repair of an intact run: %v\n%s", err, out)
	}
}

func TestTrajRejectsBadArguments(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"traj", "list", filepath.Join(dir, "missing")},
		{"traj", "list", dir}, // a directory without trajectories.atrs
		{"traj", "list", dir, "--first", "1", "--last", "1"},
		{"traj", "list", dir, "--first", "-1"},
		{"traj", "export", dir, "--status", "fine"},
		{"traj", "show", dir, "--index", "-1"},
	} {
		if _, _, err := runSplit(args...); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
	notStream := filepath.Join(dir, "x.atrs")
	os.WriteFile(notStream, []byte("hello, world"), 0o644)
	if _, _, err := runSplit("traj", "list", notStream); err == nil || !strings.Contains(err.Error(), "not a trajectory stream") {
		t.Errorf("a file that is not a stream: %v", err)
	}
}
