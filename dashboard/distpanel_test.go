package dashboard

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// The workers' panel charts what a killed worker costs, by cause: a trajectory redelivered, a
// duplicate dropped, a task retried or swept (issue: a panel titled "redelivered" that did not
// chart the duplicates a kill -9 leaves).
func TestDistPanelByCause(t *testing.T) {
	src, err := os.ReadFile("assets/app.js")
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`\{ id: "dist",[^\n]*`).Find(src)
	if line == nil {
		t.Fatal(`app.js has no panel with id "dist"`)
	}
	for _, key := range []string{"dist/redelivered", "dist/dropped_duplicate", "dist/tasks_retried", "dist/tasks_swept",
		"dist/held", "dist/partial_groups", "dist/groups_timed_out"} {
		if !strings.Contains(string(line), `"`+key+`"`) {
			t.Errorf("the workers' panel does not chart %s: %s", key, line)
		}
	}
	if !strings.Contains(string(line), "duplicates") {
		t.Errorf("the workers' panel's title does not say it charts duplicates: %s", line)
	}
}
