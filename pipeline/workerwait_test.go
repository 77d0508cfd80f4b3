package pipeline

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/dist"
	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/env/all"
)

// Items 3 and 24 of issue 29: a worker whose run is not on the server (a mistyped --run, or a
// learner not started yet) says that it waits, with its backoff, and gives up after its wait; a
// worker whose learner has finished says so and stops.
func TestWorkerWaitsForItsRun(t *testing.T) {
	srv, err := dist.StartServer(dist.ServerConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	conn, err := dist.Connect(srv.URL(), srv.WorkerToken(), "w")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var log bytes.Buffer
	start := time.Now()
	_, err = RunWorker(context.Background(), WorkerOptions{Conn: conn, Run: "mistyped", Envs: all.Builtins(), Concurrency: 1, Slots: 1, Log: &log, Wait: 3500 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), `run "mistyped" is not set up on this server`) || time.Since(start) > 20*time.Second {
		t.Fatalf("a run that never appears: %v after %v\n%s", err, time.Since(start), log.String())
	}
	if !strings.Contains(log.String(), "waiting for its learner, next check in 1s") || !strings.Contains(log.String(), "next check in 2s") {
		t.Errorf("the worker did not report its waits:\n%s", log.String())
	}

	learner, err := dist.Connect(srv.URL(), srv.LearnerToken(), "l")
	if err != nil {
		t.Fatal(err)
	}
	defer learner.Close()
	ctx := context.Background()
	if err := learner.SetupRun(ctx, dist.RunConfig{Run: "done"}); err != nil {
		t.Fatal(err)
	}
	if err := learner.PutRolloutSettings(ctx, "done", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := learner.MarkFinished(ctx, "done"); err != nil {
		t.Fatal(err)
	}
	log.Reset()
	if _, err := RunWorker(ctx, WorkerOptions{Conn: conn, Run: "done", Envs: all.Builtins(), Concurrency: 1, Slots: 1, Log: &log}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "learner has finished it") {
		t.Errorf("a worker of a finished run did not say so:\n%s", log.String())
	}
}

// A task's env_config makes the worker's environment at the task's difficulty; an env_config it
// does not understand is an error, not an environment at another difficulty.
func TestWorkerEnvConfig(t *testing.T) {
	envs := all.Builtins()
	p := config.Phase{Envs: []config.EnvWeight{{Name: "calc", Difficulty: &env.Difficulty{Levels: []int{4}}}, {Name: "maze"}}}
	cfgs, err := distEnvConfigs(p)
	if err != nil {
		t.Fatal(err)
	}
	if cfgs["maze"] != nil || cfgs["calc"] == nil {
		t.Fatalf("env configs %v", cfgs)
	}
	if _, err := workerEnv(envs, dist.Task{TaskID: "a", Env: "calc", EnvConfig: cfgs["calc"]}); err != nil {
		t.Fatal(err)
	}
	if _, err := workerEnv(envs, dist.Task{TaskID: "b", Env: "calc", EnvConfig: []byte(`{"difficulty": {"levels": [1]}, "extra": 1}`)}); err == nil || !strings.Contains(err.Error(), "extra") {
		t.Fatalf("an unknown env_config key: %v", err)
	}
	if _, err := workerEnv(envs, dist.Task{TaskID: "c", Env: "calc", EnvConfig: []byte(`{"difficulty": {"levels": [99]}}`)}); err == nil {
		t.Fatal("a level calc lacks was accepted")
	}
}
