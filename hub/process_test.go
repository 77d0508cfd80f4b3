package hub

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/agentrl/agentrl/hub/hubtest"
)

// TestMain lets the test binary act as a separate downloading process (see
// TestConcurrentProcessesFetchEachFileOnce).
func TestMain(m *testing.M) {
	if ep := os.Getenv("HUB_TEST_CHILD_ENDPOINT"); ep != "" {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, err := NewClient(Settings{Endpoint: ep, Cache: os.Getenv("HUB_TEST_CHILD_CACHE")})
		if err == nil {
			var dir string
			dir, err = c.Download(ctx, Ref{Repo: testRepo, Revision: "main"}, Checkpoint)
			fmt.Print(dir)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Processes downloading the same repository into one cache at once fetch each file once: the
// others wait on the file lock and then find the blob.
func TestConcurrentProcessesFetchEachFileOnce(t *testing.T) {
	h := hubtest.New(t, testRepo, modelFiles(), lfsFiles...)
	h.SetSlow(100 * time.Millisecond)
	cache := t.TempDir()
	const n = 4
	cmds := make([]*exec.Cmd, n)
	outs := make([]strings.Builder, n)
	errs := make([]strings.Builder, n)
	for i := range cmds {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "HUB_TEST_CHILD_ENDPOINT="+h.API.URL, "HUB_TEST_CHILD_CACHE="+cache)
		cmd.Stdout, cmd.Stderr = &outs[i], &errs[i]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[i] = cmd
	}
	for i, cmd := range cmds {
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("process %d: %v\n%s", i, err, errs[i].String())
			}
		case <-time.After(2 * time.Minute):
			cmd.Process.Kill()
			t.Fatalf("process %d did not finish", i)
		}
		if outs[i].String() != outs[0].String() || outs[i].Len() == 0 {
			t.Fatalf("process %d: snapshot %q, process 0: %q", i, outs[i].String(), outs[0].String())
		}
	}
	for n := range modelFiles() {
		want := 0
		if _, err := os.Lstat(outs[0].String() + "/" + n); err == nil {
			want = 1
		}
		if got := h.Gets(n); got != want {
			t.Errorf("%s fetched %d times, want %d", n, got, want)
		}
	}
}
