package hub

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agentrl/agentrl/hub/hubtest"
)

const testRepo = "org/tiny-model"

// modelFiles is a published model as the Hub holds it: what agentrl needs and what it must
// leave alone (pickles, GGUF, ONNX, a consolidated copy the index does not name, a README).
func modelFiles() map[string][]byte {
	big := func(n int, seed byte) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i*7) ^ seed
		}
		return b
	}
	return map[string][]byte{
		"config.json":                      []byte(`{"architectures":["LlamaForCausalLM"]}`),
		"generation_config.json":           []byte(`{"eos_token_id":2}`),
		"tokenizer.json":                   []byte(`{"model":{"type":"BPE"}}`),
		"tokenizer_config.json":            []byte(`{"chat_template":"{{ x }}"}`),
		"chat_template.jinja":              []byte(`{{ messages }}`),
		"model.safetensors.index.json":     []byte(`{"metadata":{},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors","c":"model-00001-of-00002.safetensors"}}`),
		"model-00001-of-00002.safetensors": big(300000, 1),
		"model-00002-of-00002.safetensors": big(200001, 2),
		"consolidated.safetensors":         big(1000, 3),
		"pytorch_model.bin":                big(1000, 4),
		"model.gguf":                       big(1000, 5),
		"onnx/model.onnx":                  big(1000, 6),
		"README.md":                        []byte("# tiny"),
		"original/params.json":             []byte(`{}`),
	}
}

var lfsFiles = []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "consolidated.safetensors", "pytorch_model.bin", "model.gguf", "onnx/model.onnx"}

func testClient(t *testing.T, h *hubtest.Hub, cache string) *Client {
	t.Helper()
	c, err := NewClient(Settings{Endpoint: h.API.URL, Cache: cache, Token: h.Token})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mustRef(t *testing.T, s string) Ref {
	t.Helper()
	r, err := ParseRef(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestDownloadLaysOutTheCacheAsHuggingFaceHub(t *testing.T) {
	h := hubtest.New(t, testRepo, modelFiles(), lfsFiles...)
	h.Token = "hf_testtoken"
	cache := t.TempDir()
	c := testClient(t, h, cache)
	var out bytes.Buffer
	c.Out = &out
	dir, err := c.Download(context.Background(), mustRef(t, "hf:"+testRepo), Checkpoint)
	if err != nil {
		t.Fatal(err)
	}
	repoDir := filepath.Join(cache, "models--org--tiny-model")
	if want := filepath.Join(repoDir, "snapshots", h.Commit); dir != want {
		t.Fatalf("snapshot %s, want %s", dir, want)
	}
	if b, err := os.ReadFile(filepath.Join(repoDir, "refs", "main")); err != nil || string(b) != h.Commit {
		t.Fatalf("refs/main = %q, %v; want %s", b, err, h.Commit)
	}
	want := []string{"chat_template.jinja", "config.json", "generation_config.json", "model-00001-of-00002.safetensors",
		"model-00002-of-00002.safetensors", "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json"}
	var got []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		got = append(got, rel)
		return nil
	})
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("snapshot holds %v, want %v", got, want)
	}
	for _, n := range want {
		link := filepath.Join(dir, n)
		target, err := os.Readlink(link)
		if err != nil {
			t.Fatalf("%s is not a symlink: %v", n, err)
		}
		if wantT := filepath.Join("..", "..", "blobs", h.ETag(n)); target != wantT {
			t.Errorf("%s -> %s, want %s", n, target, wantT)
		}
		b, err := os.ReadFile(link)
		if err != nil || !bytes.Equal(b, h.Files[n]) {
			t.Errorf("%s content differs (%v)", n, err)
		}
	}
	blobs, _ := os.ReadDir(filepath.Join(repoDir, "blobs"))
	if len(blobs) != len(want) {
		t.Errorf("%d blobs, want %d (no .incomplete left)", len(blobs), len(want))
	}
	// The token went to the endpoint, never to the CDN on another host.
	apiAuth, cdnAuth := h.Auth()
	for _, a := range apiAuth {
		if a != "Bearer hf_testtoken" {
			t.Errorf("endpoint saw Authorization %q", a)
		}
	}
	if len(cdnAuth) == 0 {
		t.Fatal("no LFS file came through the CDN")
	}
	for _, a := range cdnAuth {
		if a != "" {
			t.Errorf("CDN saw Authorization %q", a)
		}
	}
	if strings.Contains(out.String(), "\r") || !strings.Contains(out.String(), "hub: downloading model-00001-of-00002.safetensors (293.0 KiB)") {
		t.Errorf("progress off a terminal should be one line per file:\n%s", out.String())
	}
	// Nothing in the cache holds the token.
	filepath.WalkDir(cache, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(h.Token)) {
				t.Errorf("%s holds the token", p)
			}
		}
		return nil
	})

	// Again: the cache answers, only the revision is asked.
	before := len(h.Ranges())
	dir2, err := c.Download(context.Background(), mustRef(t, "hf:"+testRepo+"@"+h.Commit), Checkpoint)
	if err != nil || dir2 != dir {
		t.Fatalf("second download: %s, %v", dir2, err)
	}
	if len(h.Ranges()) != before {
		t.Errorf("second download fetched %d files again", len(h.Ranges())-before)
	}
}

// The checksums are git's: a small file's blob is named by `git hash-object`.
func TestSmallFileChecksumIsGitBlobSHA1(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git is not installed: the git blob sha1 is not compared with git's")
	}
	content := modelFiles()["config.json"]
	cmd := exec.Command(git, "hash-object", "--stdin")
	cmd.Stdin = bytes.NewReader(content)
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	h := newHash(hubtest.GitBlobSHA1(content), int64(len(content)))
	h.Write(content)
	if got := fmt.Sprintf("%x", h.Sum(nil)); got != strings.TrimSpace(string(out)) {
		t.Fatalf("blob sha1 %s, git says %s", got, out)
	}
}

func TestTokenizerOnlyDownloadsNoWeights(t *testing.T) {
	h := hubtest.New(t, testRepo, modelFiles(), lfsFiles...)
	dir, err := testClient(t, h, t.TempDir()).Download(context.Background(), mustRef(t, "hf:"+testRepo), Tokenizer)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		t.Fatal(err)
	}
	if _, cdnAuth := h.Auth(); len(cdnAuth) != 0 {
		t.Errorf("a tokenizer download fetched %d LFS files", len(cdnAuth))
	}
}

func TestExtraPatternsFetchWhatIsAskedFor(t *testing.T) {
	h := hubtest.New(t, testRepo, modelFiles(), lfsFiles...)
	c := testClient(t, h, t.TempDir())
	c.Extra = []string{"*.gguf"}
	dir, err := c.Download(context.Background(), mustRef(t, "hf:"+testRepo), Checkpoint)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "model.gguf")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "pytorch_model.bin")); err == nil {
		t.Fatal("pytorch_model.bin was not asked for")
	}
	c.Extra = []string{"[bad"}
	if _, err := c.Download(context.Background(), mustRef(t, "hf:"+testRepo), Checkpoint); err == nil {
		t.Fatal("a malformed pattern was accepted")
	}
}

func TestGatedModelSaysWhatToDo(t *testing.T) {
	h := hubtest.New(t, testRepo, modelFiles(), lfsFiles...)
	h.Gated, h.Token = true, "hf_granted"
	ref := mustRef(t, "hf:"+testRepo)
	for _, tc := range []struct {
		token  string
		status int
	}{{"", 401}, {"hf_secret_wrong", 403}} {
		c, _ := NewClient(Settings{Endpoint: h.API.URL, Cache: t.TempDir(), Token: tc.token})
		_, err := c.Download(context.Background(), ref, Checkpoint)
		var he *Error
		if !errors.As(err, &he) || he.Status != tc.status {
			t.Fatalf("token %q: %v, want a %d", tc.token, err, tc.status)
		}
		if want := "accept the licence at " + h.API.URL + "/" + testRepo; !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "HF_TOKEN") {
			t.Errorf("error %q does not say %q and HF_TOKEN", err, want)
		}
		if tc.token != "" && strings.Contains(err.Error(), tc.token) {
			t.Errorf("error shows the token: %v", err)
		}
	}
	c, _ := NewClient(Settings{Endpoint: h.API.URL, Cache: t.TempDir(), Token: "hf_granted"})
	if _, err := c.Download(context.Background(), ref, Checkpoint); err != nil {
		t.Fatalf("with access: %v", err)
	}
}

func TestMissingRepoAndRevision(t *testing.T) {
	h := hubtest.New(t, testRepo, modelFiles(), lfsFiles...)
	c := testClient(t, h, t.TempDir())
	_, err := c.Download(context.Background(), mustRef(t, "hf:org/other"), Checkpoint)
	if err == nil || !strings.Contains(err.Error(), "not found (404)") {
		t.Fatalf("missing repo: %v", err)
	}
	_, err = c.Download(context.Background(), mustRef(t, "hf:"+testRepo+"@v9"), Checkpoint)
	if err == nil || !strings.Contains(err.Error(), `revision "v9" not found`) {
		t.Fatalf("missing revision: %v", err)
	}
	// A branch with '/' is asked for escaped, and its ref is kept under refs/ as huggingface_hub does.
	h.Refs["refs/pr/1"] = h.Commit
	cache := t.TempDir()
	if _, err := testClient(t, h, cache).Download(context.Background(), mustRef(t, "hf:"+testRepo+"@refs/pr/1"), Checkpoint); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(cache, "models--org--tiny-model", "refs", "refs", "pr", "1")); err != nil || string(b) != h.Commit {
		t.Fatalf("refs/refs/pr/1: %q %v", b, err)
	}
}

func TestInterruptedDownloadResumes(t *testing.T) {
	h := hubtest.New(t, testRepo, modelFiles(), lfsFiles...)
	const shard = "model-00001-of-00002.safetensors"
	h.Cut[shard] = 123456
	cache := t.TempDir()
	c := testClient(t, h, cache)
	c.Attempts = 1
	ref := mustRef(t, "hf:"+testRepo)
	_, err := c.Download(context.Background(), ref, Checkpoint)
	if err == nil || !strings.Contains(err.Error(), "broke off") {
		t.Fatalf("cut transfer: %v", err)
	}
	repoDir := filepath.Join(cache, "models--org--tiny-model")
	part := filepath.Join(repoDir, "blobs", h.ETag(shard)+".incomplete")
	if st, err := os.Stat(part); err != nil || st.Size() != 123456 {
		t.Fatalf("partial file: %v %v", st, err)
	}
	// The cache stays consistent: no link to a partial blob, no ref to an incomplete snapshot.
	if _, err := os.Lstat(filepath.Join(repoDir, "snapshots", h.Commit, shard)); err == nil {
		t.Fatal("a link points at an unfinished blob")
	}
	if _, err := os.Stat(filepath.Join(repoDir, "refs", "main")); err == nil {
		t.Fatal("refs/main written before the snapshot was complete")
	}
	off := c.Settings
	off.Offline = true
	oc, _ := NewClient(off)
	if _, err := oc.Download(context.Background(), ref, Checkpoint); err == nil {
		t.Fatal("offline, an incomplete snapshot was accepted")
	}
	if _, err := c.Download(context.Background(), ref, Checkpoint); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if !contains(h.Ranges(), "bytes=123456-") {
		t.Errorf("no Range request resumed the transfer: %q", h.Ranges())
	}
	if _, err := os.Stat(part); err == nil {
		t.Error(".incomplete left behind")
	}

	// Within one call, a broken transfer is retried from where it stopped.
	h2 := hubtest.New(t, testRepo, modelFiles(), lfsFiles...)
	h2.Cut[shard] = 1000
	if _, err := testClient(t, h2, t.TempDir()).Download(context.Background(), ref, Checkpoint); err != nil {
		t.Fatal(err)
	}
	if !contains(h2.Ranges(), "bytes=1000-") {
		t.Errorf("no Range retry: %q", h2.Ranges())
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func TestChecksumMismatchIsRefused(t *testing.T) {
	for _, name := range []string{"model-00002-of-00002.safetensors", "tokenizer.json"} { // sha256 and git sha1
		h := hubtest.New(t, testRepo, modelFiles(), lfsFiles...)
		h.Corrupt[name] = true
		cache := t.TempDir()
		_, err := testClient(t, h, cache).Download(context.Background(), mustRef(t, "hf:"+testRepo), Checkpoint)
		if err == nil || !strings.Contains(err.Error(), "checksum mismatch") {
			t.Fatalf("%s: %v", name, err)
		}
		blobs := filepath.Join(cache, "models--org--tiny-model", "blobs")
		for _, p := range []string{h.ETag(name), h.ETag(name) + ".incomplete"} {
			if _, err := os.Stat(filepath.Join(blobs, p)); err == nil {
				t.Errorf("%s: %s kept", name, p)
			}
		}
		if _, err := os.Lstat(filepath.Join(cache, "models--org--tiny-model", "snapshots", h.Commit, name)); err == nil {
			t.Errorf("%s: linked", name)
		}
	}
}

func TestConcurrentDownloadsFetchEachFileOnce(t *testing.T) {
	h := hubtest.New(t, testRepo, modelFiles(), lfsFiles...)
	cache := t.TempDir()
	var wg sync.WaitGroup
	dirs := make([]string, 6)
	errs := make([]error, 6)
	for i := range dirs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Separate clients, as separate processes would be; flock serializes them alike.
			dirs[i], errs[i] = testClient(t, h, cache).Download(context.Background(), mustRef(t, "hf:"+testRepo), Checkpoint)
		}()
	}
	wg.Wait()
	for i := range dirs {
		if errs[i] != nil || dirs[i] != dirs[0] {
			t.Fatalf("download %d: %s, %v", i, dirs[i], errs[i])
		}
	}
	for _, n := range []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "config.json"} {
		if got := h.Gets(n); got != 1 {
			t.Errorf("%s fetched %d times", n, got)
		}
		b, err := os.ReadFile(filepath.Join(dirs[0], n))
		if err != nil || !bytes.Equal(b, h.Files[n]) {
			t.Errorf("%s: %v", n, err)
		}
	}
}

func TestOfflineUsesTheCacheAndSaysWhatIsMissing(t *testing.T) {
	h := hubtest.New(t, testRepo, modelFiles(), lfsFiles...)
	cache := t.TempDir()
	ref := mustRef(t, "hf:"+testRepo)
	dir, err := testClient(t, h, cache).Download(context.Background(), ref, Checkpoint)
	if err != nil {
		t.Fatal(err)
	}
	calls := h.APICalls()
	t.Setenv("HF_HUB_OFFLINE", "1")
	t.Setenv("HF_HUB_CACHE", cache)
	t.Setenv("HF_ENDPOINT", h.API.URL)
	t.Setenv("HF_TOKEN", "")
	got, err := Resolve(context.Background(), "hf:"+testRepo, Checkpoint, nil)
	if err != nil || got != dir {
		t.Fatalf("offline: %s, %v", got, err)
	}
	if got, err := Resolve(context.Background(), "hf:"+testRepo+"@"+h.Commit, Checkpoint, nil); err != nil || got != dir {
		t.Fatalf("offline by commit: %s, %v", got, err)
	}
	if h.APICalls() != calls {
		t.Error("offline mode asked the Hub")
	}
	_, err = Resolve(context.Background(), "hf:org/absent", Checkpoint, nil)
	if err == nil || !strings.Contains(err.Error(), "HF_HUB_OFFLINE") || !strings.Contains(err.Error(), "no hf:org/absent@main") {
		t.Fatalf("offline, not cached: %v", err)
	}
	os.Remove(filepath.Join(dir, "model-00002-of-00002.safetensors"))
	_, err = Resolve(context.Background(), "hf:"+testRepo, Checkpoint, nil)
	if err == nil || !strings.Contains(err.Error(), "lacks model-00002-of-00002.safetensors") {
		t.Fatalf("offline, a shard missing: %v", err)
	}
	// The tokenizer alone is still there.
	if _, err := Resolve(context.Background(), "hf:"+testRepo, Tokenizer, nil); err != nil {
		t.Fatal(err)
	}
}

func TestUnreachableHubFallsBackToTheCache(t *testing.T) {
	h := hubtest.New(t, testRepo, modelFiles(), lfsFiles...)
	cache := t.TempDir()
	ref := mustRef(t, "hf:"+testRepo)
	dir, err := testClient(t, h, cache).Download(context.Background(), ref, Checkpoint)
	if err != nil {
		t.Fatal(err)
	}
	c := testClient(t, h, cache)
	h.API.Close()
	var out bytes.Buffer
	c.Out = &out
	if got, err := c.Download(context.Background(), ref, Checkpoint); err != nil || got != dir {
		t.Fatalf("unreachable, cached: %s, %v", got, err)
	}
	if !strings.Contains(out.String(), "using the cached snapshot") {
		t.Errorf("no word of the fallback: %q", out.String())
	}
	_, err = testClient(t, h, t.TempDir()).Download(context.Background(), ref, Checkpoint)
	if err == nil || !strings.Contains(err.Error(), "cannot reach") || !strings.Contains(err.Error(), "connect to the network") {
		t.Fatalf("unreachable, not cached: %v", err)
	}
}

func TestResolvePassesFoldersThrough(t *testing.T) {
	if got, err := Resolve(context.Background(), "/some/dir", Checkpoint, nil); err != nil || got != "/some/dir" {
		t.Fatalf("%s %v", got, err)
	}
}

func TestParseRef(t *testing.T) {
	for in, want := range map[string]Ref{
		"hf:Qwen/Qwen3-0.6B":                      {"Qwen/Qwen3-0.6B", "main"},
		"hf:HuggingFaceTB/SmolLM2-135M@v1.0":      {"HuggingFaceTB/SmolLM2-135M", "v1.0"},
		"hf:org/name@refs/pr/1":                   {"org/name", "refs/pr/1"},
		"hf:org/m_x.y@" + strings.Repeat("0", 40): {"org/m_x.y", strings.Repeat("0", 40)},
	} {
		got, err := ParseRef(in)
		if err != nil || got != want {
			t.Errorf("%s: %+v %v, want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"org/name", "hf:", "hf:name", "hf:/name", "hf:org/", "hf:../x", "hf:org/..", "hf:org/../x",
		"hf:org/name/x", "hf:a--b/c", "hf:org/.hidden", "hf:org/name-", "hf:org/name@", "hf:org/name@../../etc",
		"hf:org/name@a/../b", "hf:org/name@a\\b", "hf:org/name@a b", "hf:org/na%2fme", "hf:org/name@x?y"} {
		if r, err := ParseRef(bad); err == nil {
			t.Errorf("%q accepted as %+v", bad, r)
		}
	}
}

func TestHostileNamesAreRefused(t *testing.T) {
	for _, c := range []struct{ what, file, content, want string }{
		{"hostile sibling", "../../../escape", "x", "would leave the snapshot folder"},
		{"hostile shard", "model.safetensors.index.json", `{"weight_map":{"a":"../../blobs/x.safetensors"}}`, "is not a file of the folder"},
		{"index naming a missing shard", "model.safetensors.index.json", `{"weight_map":{"a":"model-00003-of-00003.safetensors"}}`, "does not hold"},
	} {
		files := modelFiles()
		files[c.file] = []byte(c.content)
		h := hubtest.New(t, testRepo, files, lfsFiles...)
		_, err := testClient(t, h, t.TempDir()).Download(context.Background(), mustRef(t, "hf:"+testRepo), Checkpoint)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%s: %v", c.what, err)
		}
	}
}

func TestNoSafetensorsSaysSo(t *testing.T) {
	files := modelFiles()
	for n := range files {
		if strings.HasSuffix(n, ".safetensors") || strings.HasSuffix(n, ".index.json") {
			delete(files, n)
		}
	}
	h := hubtest.New(t, testRepo, files, lfsFiles...)
	_, err := testClient(t, h, t.TempDir()).Download(context.Background(), mustRef(t, "hf:"+testRepo), Checkpoint)
	if err == nil || !strings.Contains(err.Error(), "no safetensors weights") {
		t.Fatal(err)
	}
}

func TestSettingsFromEnvironment(t *testing.T) {
	home := t.TempDir()
	os.WriteFile(filepath.Join(home, "token"), []byte("hf_fromfile\n"), 0o600)
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	s, err := settingsFrom(env(map[string]string{"HF_HOME": home, "HF_ENDPOINT": "http://mirror.local/", "HF_HUB_OFFLINE": "yes"}))
	if err != nil {
		t.Fatal(err)
	}
	if s.Cache != filepath.Join(home, "hub") || s.Endpoint != "http://mirror.local" || !s.Offline || s.Token != "hf_fromfile" {
		t.Fatalf("%+v", s)
	}
	s, _ = settingsFrom(env(map[string]string{"HF_HOME": home, "HF_HUB_CACHE": "/c", "HF_TOKEN": "hf_env", "HF_HUB_OFFLINE": "0"}))
	if s.Cache != "/c" || s.Endpoint != DefaultEndpoint || s.Offline || s.Token != "hf_env" {
		t.Fatalf("%+v", s)
	}
	s, _ = settingsFrom(env(map[string]string{"XDG_CACHE_HOME": "/x", "HF_TOKEN_PATH": filepath.Join(home, "none")}))
	if s.Cache != filepath.Join("/x", "huggingface", "hub") || s.Token != "" {
		t.Fatalf("%+v", s)
	}
	if _, err := settingsFrom(env(map[string]string{"HF_HOME": home, "HF_ENDPOINT": "ftp://x"})); err == nil {
		t.Fatal("an ftp endpoint was accepted")
	}
}

func TestProgressBarOnATerminal(t *testing.T) {
	var b bytes.Buffer
	p := &progress{w: &b, name: "model.safetensors", size: 1 << 20}
	p.draw(1 << 19)
	p.done()
	if s := b.String(); !strings.HasPrefix(s, "\rmodel.safetensors") || !strings.Contains(s, " 50.0% 512.0 KiB/1.0 MiB") || !strings.HasSuffix(s, "\n") {
		t.Fatalf("bar %q", s)
	}
	// Off a terminal (a buffer, a file), one line and no bar.
	b.Reset()
	q := newProgress(&b, "x", 10, 20)
	q.set(20)
	q.done()
	if b.String() != "hub: resuming at 10 B x (20 B)\n" {
		t.Fatalf("%q", b.String())
	}
}

// A malformed answer from a reachable Hub is an error, not a reason to use the cache.
func TestMalformedRevisionInfoIsNotUnreachable(t *testing.T) {
	h := hubtest.New(t, testRepo, modelFiles(), lfsFiles...)
	cache := t.TempDir()
	if _, err := testClient(t, h, cache).Download(context.Background(), mustRef(t, "hf:"+testRepo), Checkpoint); err != nil {
		t.Fatal(err)
	}
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{"sha":"nope"}`)) }))
	defer bad.Close()
	c, _ := NewClient(Settings{Endpoint: bad.URL, Cache: cache})
	if _, err := c.Download(context.Background(), mustRef(t, "hf:"+testRepo), Checkpoint); err == nil || !strings.Contains(err.Error(), "no commit") {
		t.Fatalf("%v", err)
	}
}

// A mirror without checksums: the files are named by its ETags and checked by size only, and
// the output says so.
func TestUnverifiableETagsAreCheckedBySize(t *testing.T) {
	h := hubtest.New(t, testRepo, modelFiles(), lfsFiles...)
	h.Opaque = true
	c := testClient(t, h, t.TempDir())
	var out bytes.Buffer
	c.Out = &out
	dir, err := c.Download(context.Background(), mustRef(t, "hf:"+testRepo), Checkpoint)
	if err != nil {
		t.Fatal(err)
	}
	target, _ := os.Readlink(filepath.Join(dir, "config.json"))
	if want := filepath.Join("..", "..", "blobs", h.ETag("config.json")); target != want {
		t.Fatalf("config.json -> %s, want %s", target, want)
	}
	if !strings.Contains(out.String(), "is not a checksum; only the size") {
		t.Fatalf("no word that nothing was verified:\n%s", out.String())
	}
}
