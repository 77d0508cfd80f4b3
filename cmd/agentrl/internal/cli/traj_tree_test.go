package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/rollout"
	"github.com/agentrl/agentrl/traj"
)

// traj show prints the tree of an episode's sub-episodes and names what each later sample is:
// a folded context, a sub-episode.
func TestTrajShowsSubEpisodeTreeAndFolds(t *testing.T) {
	tok, tr := showTestEpisode(t)
	push := func(role traj.Role, text string) (int, int) { return pushText(tr, tok, role, text, 0, traj.NoVersion) }
	push(traj.RoleUser, "task 12")
	s, e := push(traj.RoleAssistant, "call the tool")
	tr.Turns = append(tr.Turns, traj.Turn{Start: s, End: e, ObsEnd: e, ToolCalls: []traj.ToolCall{{Name: "fold", Arguments: `{"summary":"12"}`, Result: "folded 9 tokens into 7"}}})
	tr.Samples = []int{tr.Len()}
	push(traj.RoleUser, "task 12")
	s, e = push(traj.RoleAssistant, "answer 12")
	tr.Turns = append(tr.Turns, traj.Turn{Start: s, End: e, ObsEnd: e})
	sub := rollout.SubEpisode{ID: "e.1", Parent: "e", Depth: 1, Turn: 1, Start: tr.Len(), Status: traj.StatusOK, Samples: 1, Calls: 1, Critical: 1}
	tr.Samples = append(tr.Samples, tr.Len())
	push(traj.RoleUser, "task 12")
	s, e = push(traj.RoleAssistant, "answer 12")
	tr.Turns = append(tr.Turns, traj.Turn{Start: s, End: e, ObsEnd: e})
	sub.End = tr.Len()
	failed := rollout.SubEpisode{ID: "e.1.1", Parent: "e.1", Depth: 2, Start: sub.End, End: sub.End, Status: traj.StatusTimeout}
	tr.Meta = []traj.KV{{Key: rollout.MetaSubEpisode, Value: sub.String()}, {Key: rollout.MetaSubEpisode, Value: failed.String()},
		{Key: rollout.MetaModelCalls, Value: "4"}, {Key: rollout.MetaCriticalCalls, Value: "3"}}
	if err := tr.Validate(); err != nil {
		t.Fatal(err)
	}
	var show bytes.Buffer
	writeTrajectory(&show, entry{t: tr}, tok)
	for _, want := range []string{
		"sub-episodes 2  model calls 4  critical path 3",
		"  └ e.1  depth 1  from turn 2 of e  ok",
		"    └ e.1.1  depth 2  from turn 1 of e.1  timeout",
		"not trained",
		"=== sample 2 of 3", "folded to the policy's summary (folded 9 tokens into 7)",
		"=== sample 3 of 3", "sub-episode e.1 (depth 1, delegated by e at its turn 2)",
	} {
		if !strings.Contains(show.String(), want) {
			t.Fatalf("traj show lacks %q:\n%s", want, show.String())
		}
	}
}
