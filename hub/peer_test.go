package hub

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/agentrl/agentrl/hub/hubtest"
)

// scanned is what scripts/peers/hub_scan.mjs prints.
type scanned struct {
	Warnings []string
	Repos    []struct {
		ID         string
		Type       string
		FilesCount int
		Size       int64
		Revisions  []struct {
			Commit string
			Refs   []string
			Files  []struct {
				Path string
				Blob string
				Size int64
			}
		}
	}
}

// scanWithHuggingFaceHubJS reads a cache with @huggingface/hub's scanCacheDir, skipping the
// test when node or the package is absent.
func scanWithHuggingFaceHubJS(t *testing.T, cache string) scanned {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not installed: the cache is not read by @huggingface/hub")
	}
	if _, err := os.Stat("../scripts/peers/node_modules/@huggingface/hub/package.json"); err != nil {
		t.Skip("npm package @huggingface/hub not installed (scripts/setup): the cache is not read by it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "../scripts/peers/hub_scan.mjs", cache)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node hub_scan.mjs: %v\n%s", err, stderr.String())
	}
	var s scanned
	if err := json.Unmarshal(out, &s); err != nil {
		t.Fatalf("hub_scan.mjs output: %v\n%s", err, out)
	}
	return s
}

// The cache this package writes is read by an independent implementation of huggingface_hub's
// cache scan as the repository, revision, refs and files downloaded, with no warning; after an
// interrupted download too.
func TestCacheReadByHuggingFaceHubJS(t *testing.T) {
	h := hubtest.New(t, testRepo, modelFiles(), lfsFiles...)
	h.Refs["v1.0"] = h.Commit
	cache := t.TempDir()
	const shard = "model-00002-of-00002.safetensors"
	h.Cut[shard] = 5000
	c := testClient(t, h, cache)
	c.Attempts = 1
	if _, err := c.Download(context.Background(), mustRef(t, "hf:"+testRepo), Checkpoint); err == nil {
		t.Fatal("the cut transfer succeeded")
	}
	s := scanWithHuggingFaceHubJS(t, cache)
	if len(s.Warnings) != 0 || len(s.Repos) != 1 || len(s.Repos[0].Revisions) != 1 || len(s.Repos[0].Revisions[0].Refs) != 0 {
		t.Fatalf("after an interrupted download: %+v", s)
	}
	for _, f := range s.Repos[0].Revisions[0].Files {
		if f.Path == shard {
			t.Fatalf("the partial %s is in the snapshot", shard)
		}
	}

	for _, rev := range []string{"main", "v1.0"} {
		if _, err := c.Download(context.Background(), mustRef(t, "hf:"+testRepo+"@"+rev), Checkpoint); err != nil {
			t.Fatal(err)
		}
	}
	s = scanWithHuggingFaceHubJS(t, cache)
	if len(s.Warnings) != 0 || len(s.Repos) != 1 {
		t.Fatalf("%+v", s)
	}
	r := s.Repos[0]
	if r.ID != testRepo || r.Type != "model" || len(r.Revisions) != 1 {
		t.Fatalf("repository %+v", r)
	}
	v := r.Revisions[0]
	if v.Commit != h.Commit || !reflect.DeepEqual(v.Refs, []string{"main", "v1.0"}) {
		t.Fatalf("revision %s refs %v", v.Commit, v.Refs)
	}
	names := []string{"chat_template.jinja", "config.json", "generation_config.json", "model-00001-of-00002.safetensors",
		shard, "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json"}
	if len(v.Files) != len(names) {
		t.Fatalf("files %+v", v.Files)
	}
	var size int64
	for i, f := range v.Files {
		want := names[i]
		if f.Path != want || f.Blob != filepath.Join("blobs", h.ETag(want)) || f.Size != int64(len(h.Files[want])) {
			t.Errorf("file %+v, want %s -> blobs/%s (%d bytes)", f, want, h.ETag(want), len(h.Files[want]))
		}
		size += f.Size
	}
	if r.FilesCount != len(names) || r.Size != size {
		t.Errorf("%d blobs of %d bytes, want %d of %d", r.FilesCount, r.Size, len(names), size)
	}
}
