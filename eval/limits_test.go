package eval

import (
	"context"
	"runtime"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/rollout"
)

// Evaluation sizes are bounded before anything is allocated (issue 13, item 8): `eval --k
// 99999999999` and its like are one error naming the limit.
func TestCheckSizes(t *testing.T) {
	ok := Options{Tasks: MaxTasks, K: 0, Slots: 4096, Rollout: rollout.Config{MaxContext: 512}}
	if err := ok.CheckSizes(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Tasks: 200, K: 99999999999, Slots: 64}, "eval.MaxK"},
		{Options{Tasks: 99999999999, K: 8, Slots: 64}, "eval.MaxTasks"},
		{Options{Tasks: 0, K: 8, Slots: 64}, "tasks 0"},
		{Options{Tasks: 200, K: -1, Slots: 64}, "k -1"},
		{Options{Tasks: 200, K: 8, Slots: 100_000_000}, "local.MaxSlots"},
		{Options{Tasks: MaxTasks, K: MaxK, Slots: 64, Rollout: rollout.Config{MaxContext: 512}}, "eval.MaxEpisodeTokens"},
		// Folds' samples count: MaxTasks episodes of one 512-token sample fit, of up to 8 do not.
		{Options{Tasks: MaxTasks, K: 0, Slots: 64, Rollout: rollout.Config{MaxContext: 512, MaxTurns: 8, Context: &rollout.ContextConfig{KeepTurns: 1}}}, "eval.MaxEpisodeTokens"},
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := Run(context.Background(), nil, nil, 0, c.o)
		runtime.ReadMemStats(&after)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want %q", c.o, err, c.want)
		}
		if d := after.TotalAlloc - before.TotalAlloc; d > 1<<20 {
			t.Errorf("%+v: refusing allocated %d bytes", c.o, d)
		}
	}
}
