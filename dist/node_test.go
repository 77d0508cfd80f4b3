package dist

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestNodeClientReadsTrajectory proves the wire protocol with another language: the official
// NATS client for Node reads a trajectory message that Go stored, and a JavaScript decoder of
// the traj binary codec reads its first fields. Skipped when node or the npm package is absent
// (scripts/setup installs it).
func TestNodeClientReadsTrajectory(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not installed")
	}
	mod, err := filepath.Abs("../scripts/peers/node_modules/nats")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(mod, "package.json")); err != nil {
		t.Skip("npm package nats not installed (scripts/setup)")
	}
	ctx := ctxFor(t, 60*time.Second)
	s := startServer(t)
	l := connect(t, s.URL(), s.LearnerToken())
	const run = "node"
	if err := l.SetupRun(ctx, RunConfig{Run: run}); err != nil {
		t.Fatal(err)
	}
	task := testTask(run, 1<<40+3, 2)
	task.Seed = -12345
	tr := synthTraj(task, 300, 7)
	tr.ID = "node-τ-1"
	w := connect(t, s.URL(), s.WorkerToken())
	ack, err := w.PublishTrajectory(ctx, task, 1, "w-node", tr)
	if err != nil {
		t.Fatal(err)
	}
	want, err := tr.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	// The reader uses the worker's credentials: reading the stream needs no learner rights.
	cmd := exec.CommandContext(ctx, node, "testdata/readtraj.js", s.URL(), s.WorkerToken(), TrajStream(run), strconv.FormatUint(ack.Sequence, 10))
	cmd.Env = append(os.Environ(), "NATS_MODULE="+mod)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, stderr.String())
	}
	var got struct {
		Subject string            `json:"subject"`
		Seq     uint64            `json:"seq"`
		Headers map[string]string `json:"headers"`
		Payload string            `json:"payload"`
		Decoded struct {
			Magic       string  `json:"magic"`
			Version     int     `json:"version"`
			ID          string  `json:"id"`
			Env         string  `json:"env"`
			TaskSeed    string  `json:"task_seed"`
			GroupID     string  `json:"group_id"`
			Tokens      int     `json:"tokens"`
			FirstTokens []int32 `json:"first_tokens"`
		} `json:"decoded"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	payload, err := base64.StdEncoding.DecodeString(got.Payload)
	if err != nil || !bytes.Equal(payload, want) {
		t.Fatalf("payload read by node differs from what Go wrote (%d vs %d bytes)", len(payload), len(want))
	}
	wantH := map[string]string{
		HeaderCodec: Codec, HeaderRun: run, HeaderTask: task.TaskID,
		HeaderGroup: strconv.FormatUint(task.GroupID, 10), HeaderSample: "2", HeaderAttempt: "1",
		HeaderStatus: "ok", HeaderMinVersion: "7", HeaderMaxVersion: "7", HeaderWorker: "w-node", HeaderAdmit: "0", HeaderEpoch: "0",
	}
	if id := got.Headers[HeaderMsgID]; !strings.HasPrefix(id, task.MsgID(1)+".") {
		t.Errorf("header %s: node read %q, want %s.<nonce>", HeaderMsgID, id, task.MsgID(1))
	}
	for k, v := range wantH {
		if got.Headers[k] != v {
			t.Errorf("header %s: node read %q, want %q", k, got.Headers[k], v)
		}
	}
	d := got.Decoded
	if got.Subject != TrajSubject(run, task.GroupID) || d.Magic != "ATRJ" || d.Version != 1 || d.ID != tr.ID || d.Env != tr.Env ||
		d.TaskSeed != "-12345" || d.GroupID != strconv.FormatUint(task.GroupID, 10) || d.Tokens != len(tr.Tokens) {
		t.Fatalf("node decoded %+v from %s", d, got.Subject)
	}
	for i, tok := range d.FirstTokens {
		if tok != tr.Tokens[i] {
			t.Fatalf("token %d: node read %d, want %d", i, tok, tr.Tokens[i])
		}
	}
}
