package dist

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agentrl/agentrl/traj"
)

// synthTraj is a valid trajectory of n tokens for task, its policy tokens at version v.
func synthTraj(task Task, n int, v int32) *traj.Trajectory {
	t := &traj.Trajectory{Env: task.Env, TaskSeed: task.Seed, GroupID: task.GroupID, Reward: float64(task.Sample)}
	for i := range n {
		t.Tokens = append(t.Tokens, int32((i*7919+int(task.Seed))%50000))
		asst := i >= n/4
		role := traj.RoleUser
		lp, ver := float32(0), traj.NoVersion
		if asst {
			role, lp, ver = traj.RoleAssistant, -float32(i%13)/7, v
		}
		t.Roles = append(t.Roles, role)
		t.LossMask = append(t.LossMask, asst)
		t.Logprobs = append(t.Logprobs, lp)
		t.Versions = append(t.Versions, ver)
	}
	t.Turns = []traj.Turn{{Start: n / 4, End: n, ObsEnd: n, Reward: 1}}
	t.Meta = []traj.KV{{Key: "synthetic", Value: "true"}}
	return t
}

func testTask(run string, g uint64, s int) Task {
	return Task{Run: run, TaskID: fmt.Sprintf("g%d-s%d", g, s), Env: "calc", Seed: int64(1000 + g), GroupID: g, Sample: s}
}

// startServer starts an embedded server in a temporary store.
func startServer(t testing.TB) *Server {
	t.Helper()
	s, err := StartServer(ServerConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

// smallPayloadRun starts an embedded server whose messages hold at most 64 KiB (a larger
// trajectory goes by reference, through the blobs store), sets up run on it and returns a
// learner's and a worker's connection.
func smallPayloadRun(t testing.TB, ctx context.Context, run string) (l, w *Conn) {
	t.Helper()
	s, err := StartServer(ServerConfig{StoreDir: t.TempDir(), MaxPayload: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	l = connect(t, s.URL(), s.LearnerToken())
	if err := l.SetupRun(ctx, RunConfig{Run: run}); err != nil {
		t.Fatal(err)
	}
	return l, connect(t, s.URL(), s.WorkerToken())
}

func connect(t testing.TB, url, token string) *Conn {
	t.Helper()
	c, err := Connect(url, token, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
