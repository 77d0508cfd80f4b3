package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/env/all"
)

// distill-stages shrunk to seconds: both arms at one seed, three phases each, from real runs; the
// cross-stage arm's search stage distils from rl-calc (its metrics say so), the plain one's does
// not, and the report has a row per arm and the paired differences.
func TestPaperStagesSmoke(t *testing.T) {
	o := tinyPaper(t, stagesName)
	o.Seeds, o.Tasks, o.Samples = "1", 4, 1
	var out bytes.Buffer
	if err := Paper(context.Background(), &out, o); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, arm := range stagesArms {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(arm) + `\s+1\s+\d+\.\d%\s+\d+\.\d%\s+\d+\.\d%`).MatchString(text) {
			t.Errorf("no row for %s:\n%s", arm, text)
		}
	}
	if !strings.Contains(text, "paired by seed, cross-stage − plain") {
		t.Errorf("no paired differences:\n%s", text)
	}
	for arm, want := range map[string]bool{"plain": false, "cross-stage": true} {
		dir := filepath.Join(o.RunsDir, "bench-paper-"+stagesName+"-"+arm+"-seed1")
		data, err := os.ReadFile(filepath.Join(dir, "metrics.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
			var m map[string]any
			if err := json.Unmarshal(line, &m); err != nil {
				t.Fatal(err)
			}
			if _, ok := m["distill/kl_mean"]; ok {
				if m["phase"] != "rl-search" {
					t.Errorf("%s: distillation in phase %v", arm, m["phase"])
				}
				n++
			}
		}
		if (n > 0) != want {
			t.Errorf("%s: %d steps distilled", arm, n)
		}
	}
	if err := Paper(context.Background(), &out, PaperOptions{Envs: all.Builtins(), Name: stagesName, Seeds: "1", Arms: "plain"}); err == nil {
		t.Fatal("--arms accepted")
	}
}
