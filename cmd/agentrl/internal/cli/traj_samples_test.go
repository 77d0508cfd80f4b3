package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/tokenizer"
	"github.com/agentrl/agentrl/traj"
)

// An episode of several samples: list says how many, show marks where each later sample begins
// and keeps each sample's roles apart.
func TestTrajShowsSamples(t *testing.T) {
	tok, tr := showTestEpisode(t)
	push := func(role traj.Role, text string) (int, int) { return pushText(tr, tok, role, text, -0.5, 1) }
	push(traj.RoleUser, "task 12")
	s, e := push(traj.RoleAssistant, "call the tool")
	tr.Turns = append(tr.Turns, traj.Turn{Start: s, End: e, ObsEnd: e})
	tr.Samples = []int{tr.Len()}
	push(traj.RoleUser, "task 12")
	s, e = push(traj.RoleAssistant, "answer 12")
	tr.Turns = append(tr.Turns, traj.Turn{Start: s, End: e, ObsEnd: e})
	if err := tr.Validate(); err != nil {
		t.Fatal(err)
	}

	var show bytes.Buffer
	writeTrajectory(&show, entry{t: tr}, tok)
	for _, want := range []string{"samples 2", "=== sample 2 of 2", "--- assistant, turn 2"} {
		if !strings.Contains(show.String(), want) {
			t.Fatalf("traj show lacks %q:\n%s", want, show.String())
		}
	}
	if strings.Count(show.String(), "--- user") != 2 {
		t.Fatalf("each sample's user tokens are shown apart:\n%s", show.String())
	}

	file := filepath.Join(t.TempDir(), "t.atrs")
	var buf bytes.Buffer
	w, err := traj.NewWriter(&buf, traj.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(tr); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err := runSplit("traj", "list", file)
	if err != nil || !strings.Contains(out, "in 2 samples") {
		t.Fatalf("traj list: %v\n%s", err, out)
	}
}

// showTestEpisode is a tokenizer for the words of traj show's tests and an empty successful calc
// episode "e" to fill with pushText.
func showTestEpisode(t *testing.T) (*tokenizer.Tokenizer, *traj.Trajectory) {
	t.Helper()
	tok, err := tokenizer.Train([]string{"task 12 answer 12", "call the tool"}, tokenizer.TrainOptions{VocabSize: 300})
	if err != nil {
		t.Fatal(err)
	}
	return tok, &traj.Trajectory{ID: "e", Env: "calc", Status: traj.StatusOK, Reward: 1}
}

// pushText appends the tokens of text under role to tr, assistant tokens in the loss mask with
// logprob lp under policy version v, others with logprob 0 and no version; it returns where they
// start and end.
func pushText(tr *traj.Trajectory, tok *tokenizer.Tokenizer, role traj.Role, text string, lp float32, v int32) (int, int) {
	start := tr.Len()
	for _, id := range tok.Encode(text) {
		asst := role == traj.RoleAssistant
		tr.Tokens, tr.Roles, tr.LossMask = append(tr.Tokens, id), append(tr.Roles, role), append(tr.LossMask, asst)
		l, ver := float32(0), traj.NoVersion
		if asst {
			l, ver = lp, v
		}
		tr.Logprobs, tr.Versions = append(tr.Logprobs, l), append(tr.Versions, ver)
	}
	return start, tr.Len()
}
