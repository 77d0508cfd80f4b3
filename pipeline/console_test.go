package pipeline

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// Item 6 of issue 29: after --resume the ETA is the rate of the steps this segment trained, not
// of the phase's steps since step 0.
func TestProgressETAAfterResume(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var out bytes.Buffer
	r := &Run{opts: Options{Out: &out, Now: func() time.Time { return now }}}
	p := r.newProgressFrom("rl", 100, 50)
	now = now.Add(2 * time.Second)
	p.update(51, "")
	if want := "rl step 51/100  (2s, eta 1m38s)"; !strings.Contains(out.String(), want) {
		t.Fatalf("progress after resuming at step 50 printed %q, want %q", out.String(), want)
	}
	out.Reset()
	fresh := r.newProgress("sft", 10)
	now = now.Add(3 * time.Second)
	fresh.update(1, "")
	if want := "sft step 1/10  (3s, eta 27s)"; !strings.Contains(out.String(), want) {
		t.Fatalf("progress of a fresh phase printed %q, want %q", out.String(), want)
	}
}
