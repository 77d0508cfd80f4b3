package serve

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentrl/agentrl/checkpoint"
	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/infer/local"
)

// otherWeights saves the checkpoint dir's policy with every weight moved, as another folder.
func otherWeights(t *testing.T, dir string) string {
	t.Helper()
	ck, err := checkpoint.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := range ck.Model.Params.Data {
		ck.Model.Params.Data[i] *= 1.5
	}
	out := filepath.Join(t.TempDir(), "other")
	if err := checkpoint.Save(out, ck.Model, ck.Tokenizer, nil); err != nil {
		t.Fatal(err)
	}
	return out
}

// Versions go up within an epoch; an older epoch is refused; a newer epoch sets any version, and
// a version not above the last one (a resumed trainer's rewind) runs on a fresh engine, so that
// nothing cached under the same version number with other weights is reused, while a generation
// in flight finishes on the engine it started on.
func TestWeightEpochs(t *testing.T) {
	dir := slowCheckpoint(t)
	other := otherWeights(t, dir)
	srv, err := Open(dir, Options{Slots: 2, APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	hs := newHTTPTest(t, srv)
	update := func(path string, version int32, epoch int64) (int, errorBody) {
		t.Helper()
		code, body := post(t, hs.URL+"/agentrl/v1/weights", "k", map[string]any{"path": path, "version": version, "epoch": epoch})
		var e errorBody
		if code != 200 {
			e = mustDecode[errorBody](t, body)
		}
		return code, e
	}
	generate := func(req infer.Request) infer.Completion {
		t.Helper()
		code, body := post(t, hs.URL+"/agentrl/v1/generate", "k", req)
		if code != 200 {
			t.Fatalf("generate: %d %s", code, body)
		}
		return mustDecode[infer.Completion](t, body)
	}
	version := func() (int32, int64) {
		t.Helper()
		code, body := getBody(t, hs.URL+"/agentrl/v1/version", "k")
		v := mustDecode[struct {
			Version int32
			Epoch   int64
		}](t, body)
		if code != 200 {
			t.Fatalf("version: %d %s", code, body)
		}
		return v.Version, v.Epoch
	}

	// A first turn under the starting weights (version 0, epoch 0) leaves its tokens' keys and
	// values cached in a slot, for a next turn that extends it.
	turn1 := infer.Request{Prompt: []int32{10, 11, 12, 13}, MaxTokens: 8, Sampling: infer.Sampling{Temperature: 1}, Seed: 1}
	c1 := generate(turn1)
	turn2 := turn1
	turn2.Prompt = append(append(append([]int32{}, turn1.Prompt...), c1.Tokens...), 20, 21)
	turn2.Seed = 2

	if code, _ := update(other, 3, 5); code != 200 {
		t.Fatalf("update to epoch 5: %d", code)
	}
	for _, c := range []struct {
		version int32
		epoch   int64
		code    string
	}{{3, 5, "stale_version"}, {2, 5, "stale_version"}, {9, 4, "stale_epoch"}} {
		if code, e := update(other, c.version, c.epoch); code != 409 || *e.Error.Code != c.code {
			t.Fatalf("version %d of epoch %d: %d %+v, want 409 %s", c.version, c.epoch, code, e, c.code)
		}
	}
	if v, e := version(); v != 3 || e != 5 {
		t.Fatalf("serving version %d of epoch %d, want 3 of 5", v, e)
	}

	// A long generation in flight on epoch 5's engine when a newer epoch rewinds to version 0
	// with other weights (those of the start, here).
	long := make(chan infer.Completion, 1)
	go func() {
		long <- generate(infer.Request{Prompt: []int32{1, 2}, MaxTokens: slowMaxSeq - 10, Sampling: infer.Sampling{Temperature: 1}, Seed: 3})
	}()
	for srv.met.running.Load() == 0 {
		time.Sleep(100 * time.Microsecond)
	}
	old := srv.eng.Load()
	if code, e := update(other, 0, 6); code != 200 {
		t.Fatalf("rewind to version 0 of epoch 6: %d %+v", code, e)
	}
	if v, e := version(); v != 0 || e != 6 {
		t.Fatalf("serving version %d of epoch %d, want 0 of 6", v, e)
	}
	if srv.eng.Load() == old {
		t.Fatal("the rewind loaded into the engine that holds version 0's cache of other weights")
	}
	// The next turn is exactly what a fresh engine over the new weights gives: no key or value
	// cached under version 0 of the starting weights was reused.
	ck, err := checkpoint.Load(other)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := local.NewEngine(ck.Model, 0, local.EngineConfig{Slots: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	want, err := ref.Generate(context.Background(), turn2)
	if err != nil {
		t.Fatal(err)
	}
	if got := generate(turn2); !reflect.DeepEqual(got, want) {
		t.Fatalf("after the rewind:\ngot  %+v\nwant %+v", got, want)
	}
	// The generation in flight finished on its engine, every token at version 3; that engine
	// is closed after it.
	c := <-long
	for i, v := range c.Versions {
		if v != 3 {
			t.Fatalf("token %d of the generation in flight has version %d, want 3", i, v)
		}
	}
	for !old.done() {
		time.Sleep(time.Millisecond)
	}
	if _, err := old.Generate(context.Background(), turn1); err != local.ErrClosed {
		t.Fatalf("the replaced engine: %v, want it closed", err)
	}
	// Versions go up from the rewind; the epoch, the version and the rewind are in /metrics.
	if code, e := update(dir, 0, 6); code != 409 || *e.Error.Code != "stale_version" {
		t.Fatalf("version 0 of epoch 6 again: %d %+v", code, e)
	}
	if code, _ := update(dir, 1, 6); code != 200 {
		t.Fatalf("version 1 of epoch 6: %d", code)
	}
	_, body := getBody(t, hs.URL+"/metrics", "")
	for _, line := range []string{"agentrl_serve_weights_epoch 6", "agentrl_serve_model_version 1",
		`agentrl_serve_weight_updates_total{result="rewind"} 1`, `agentrl_serve_weight_updates_total{result="ok"} 2`,
		`agentrl_serve_weight_updates_total{result="stale"} 4`} {
		if !strings.Contains(string(body), line+"\n") {
			t.Errorf("/metrics lacks %q", line)
		}
	}
	// The query form of a pushed file takes the epoch too.
	if code, body := pushWeights(t, hs.URL, "k", dir, "version=0&epoch=6"); code != 409 {
		t.Fatalf("stale push with an epoch: %d %s", code, body)
	}
	if code, body := pushWeights(t, hs.URL, "k", dir, "version=0&epoch=x"); code != 400 {
		t.Fatalf("push with a bad epoch: %d %s", code, body)
	}
	if code, body := pushWeights(t, hs.URL, "k", dir, fmt.Sprintf("version=0&epoch=%d", 7)); code != 200 || srv.Epoch() != 7 || srv.Version() != 0 {
		t.Fatalf("push with a newer epoch: %d %s", code, body)
	}
}
