package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Want says which files of a repository a caller needs; config.json and
// generation_config.json always come along.
type Want int

const (
	// Tokenizer is the tokenizer and chat template files.
	Tokenizer Want = 1 << iota
	// Weights is the safetensors weights (the shards an index names, else model.safetensors,
	// else every top-level .safetensors file) and a PEFT adapter's config.
	Weights
	// Checkpoint is everything a checkpoint folder holds.
	Checkpoint = Tokenizer | Weights
)

var (
	alwaysFiles    = []string{"config.json", "generation_config.json"}
	tokenizerFiles = []string{"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
		"vocab.json", "merges.txt", "tokenizer.model", "chat_template.jinja", "chat_template.json"}
)

const indexFile = "model.safetensors.index.json"

// Client downloads from one Hub endpoint into one cache.
type Client struct {
	Settings
	Timeouts Timeouts
	// Extra are path.Match patterns of further files to download (e.g. "*.gguf"): nothing
	// else beyond what Want names is fetched.
	Extra []string
	// Attempts is how many times one file's transfer is tried, each resuming where the last
	// stopped (3 when 0).
	Attempts int
	// Out receives a line per file downloaded, or a progress bar per file when it is a
	// terminal; nil prints nothing.
	Out io.Writer

	httpc    *http.Client // follows redirects; the token only to the endpoint's host
	noFollow *http.Client // the same transport, answering 3xx as they are
}

// NewClient makes a client for the settings.
func NewClient(s Settings) (*Client, error) {
	u, err := url.Parse(s.Endpoint)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("hub: endpoint %q is not an http(s) URL", s.Endpoint)
	}
	s.Endpoint = strings.TrimRight(s.Endpoint, "/")
	if s.Cache == "" {
		return nil, errors.New("hub: no cache folder")
	}
	return &Client{Settings: s}, nil
}

// Resolve returns s unchanged unless it is a Hub reference (hf:ORG/NAME[@REVISION]); then it
// downloads what want names, with settings from the environment (FromEnv), and returns the
// snapshot folder. out is as Client.Out.
func Resolve(ctx context.Context, s string, want Want, out io.Writer) (string, error) {
	if !IsRef(s) {
		return s, nil
	}
	ref, err := ParseRef(s)
	if err != nil {
		return "", err
	}
	set, err := FromEnv()
	if err != nil {
		return "", err
	}
	c, err := NewClient(set)
	if err != nil {
		return "", err
	}
	c.Out = out
	return c.Download(ctx, ref, want)
}

// authTransport adds the token to requests for the endpoint's own scheme and host, and to no
// other: a redirect to a CDN on another host gets no token.
type authTransport struct {
	base   http.RoundTripper
	scheme string
	host   string
	token  string
}

func (t *authTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req.Header.Del("Authorization")
	if t.token != "" && req.URL.Scheme == t.scheme && req.URL.Host == t.host {
		req = req.Clone(req.Context())
		req.Header.Set("Authorization", "Bearer "+t.token)
	}
	return t.base.RoundTrip(req)
}

func (c *Client) clients() {
	if c.httpc != nil {
		return
	}
	c.Timeouts = c.Timeouts.withDefaults()
	u, _ := url.Parse(c.Endpoint)
	dialer := &net.Dialer{Timeout: c.Timeouts.Connect}
	tr := &authTransport{
		base: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           dialer.DialContext,
			TLSHandshakeTimeout:   c.Timeouts.Connect,
			ResponseHeaderTimeout: c.Timeouts.Header,
			MaxIdleConnsPerHost:   4,
		},
		scheme: u.Scheme, host: u.Host, token: c.Token,
	}
	c.httpc = &http.Client{Transport: tr, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) >= 10 {
			return errors.New("more than 10 redirects")
		}
		return nil
	}}
	c.noFollow = &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
}

// repoDir is the repository's folder in the cache.
func (c *Client) repoDir(ref Ref) string { return filepath.Join(c.Cache, repoFolder(ref.Repo)) }

// Download fetches the files want names of ref into the cache and returns the snapshot folder
// (…/models--ORG--NAME/snapshots/<commit>). Offline, or when the Hub cannot be reached, it
// returns the cached snapshot if that holds every file needed, and otherwise says what is missing.
func (c *Client) Download(ctx context.Context, ref Ref, want Want) (string, error) {
	if err := ref.Validate(); err != nil {
		return "", err
	}
	for _, p := range c.Extra {
		if _, err := path.Match(p, ""); err != nil {
			return "", fmt.Errorf("hub: file pattern %q: %w", p, err)
		}
	}
	c.clients()
	if c.Offline {
		dir, err := c.cached(ref, want)
		if err != nil {
			return "", fmt.Errorf("%w: HF_HUB_OFFLINE is set: unset it to download, or copy %s from a machine that has it", err, c.repoDir(ref))
		}
		return dir, nil
	}
	info, err := c.revisionInfo(ctx, ref)
	if err != nil {
		var un errUnreachable
		if !errors.As(err, &un) || ctx.Err() != nil {
			return "", err
		}
		// The Hub cannot be reached: what the cache holds may do.
		dir, cerr := c.cached(ref, want)
		if cerr != nil {
			return "", fmt.Errorf("%w; %v: connect to the network (or set HF_ENDPOINT to a reachable mirror) and run again", err, cerr)
		}
		c.printf("hub: %v; using the cached snapshot %s\n", err, dir)
		return dir, nil
	}
	// refs/ exists from the first file on, as huggingface_hub leaves it (readers of the cache
	// such as @huggingface/hub's scanCacheDir require it); the ref itself is written last.
	if err := os.MkdirAll(filepath.Join(c.repoDir(ref), "refs"), 0o755); err != nil {
		return "", fmt.Errorf("hub: %w", err)
	}
	files, err := c.pick(ctx, ref, info, want)
	if err != nil {
		return "", err
	}
	for _, f := range files {
		if err := c.fetch(ctx, ref, info.Commit, f); err != nil {
			return "", err
		}
	}
	if ref.Revision != info.Commit {
		if err := writeAtomic(filepath.Join(c.repoDir(ref), "refs", filepath.FromSlash(ref.Revision)), []byte(info.Commit)); err != nil {
			return "", fmt.Errorf("hub: %s: %w", ref, err)
		}
	}
	dir := filepath.Join(c.repoDir(ref), "snapshots", info.Commit)
	c.printf("hub: %s is commit %s: %s\n", ref, info.Commit, dir)
	return dir, nil
}

func (c *Client) printf(format string, a ...any) {
	if c.Out != nil {
		fmt.Fprintf(c.Out, format, a...)
	}
}

// revisionInfo asks the Hub which commit a revision is and what files it holds.
func (c *Client) revisionInfo(ctx context.Context, ref Ref) (RevisionInfo, error) {
	u := c.Endpoint + "/api/models/" + ref.Repo + "/revision/" + url.PathEscape(ref.Revision) + "?blobs=true"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return RevisionInfo{}, fmt.Errorf("hub: %s: %w", ref, err)
	}
	resp, err := c.httpc.Do(req)
	if err != nil {
		return RevisionInfo{}, errUnreachable{fmt.Errorf("hub: cannot reach %s: %w", c.Endpoint, redact(err))}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return RevisionInfo{}, httpError(ref, "", resp, c.Token != "", c.Endpoint)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxInfoBytes+1))
	if err != nil {
		return RevisionInfo{}, fmt.Errorf("hub: %s: reading revision info: %w", ref, redact(err))
	}
	if len(b) > maxInfoBytes {
		return RevisionInfo{}, fmt.Errorf("hub: %s: revision info larger than %d bytes", ref, maxInfoBytes)
	}
	info, err := ParseRevisionInfo(b)
	if err != nil {
		return RevisionInfo{}, fmt.Errorf("hub: %s: %w", ref, err)
	}
	if commitRE.MatchString(ref.Revision) && info.Commit != ref.Revision {
		return RevisionInfo{}, fmt.Errorf("hub: %s: the Hub answered commit %s for commit %s", ref, info.Commit, ref.Revision)
	}
	return info, nil
}

// errUnreachable is a failure to get any answer from the Hub (no network, DNS, refused, timed
// out): what the cache holds may do instead.
type errUnreachable struct{ err error }

func (e errUnreachable) Error() string { return e.err.Error() }
func (e errUnreachable) Unwrap() error { return e.err }

// redact keeps a URL error's operation and cause (the URL has no secret, but its query might
// one day).
func redact(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// pick chooses the files to download: those want names that the revision holds, top-level
// only; the weight shards come from the index, which is downloaded first.
func (c *Client) pick(ctx context.Context, ref Ref, info RevisionInfo, want Want) ([]FileInfo, error) {
	byName := make(map[string]FileInfo, len(info.Files))
	for _, f := range info.Files {
		byName[f.Name] = f
	}
	var names []string
	add := func(n string) {
		if _, ok := byName[n]; ok && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	for _, n := range alwaysFiles {
		add(n)
	}
	if _, ok := byName["config.json"]; !ok {
		return nil, fmt.Errorf("hub: %s (commit %s) has no config.json: it is not a model checkpoint agentrl can load", ref, info.Commit)
	}
	if want&Tokenizer != 0 {
		for _, n := range tokenizerFiles {
			add(n)
		}
		if _, ok := byName["tokenizer.json"]; !ok {
			return nil, fmt.Errorf("hub: %s (commit %s) has no tokenizer.json (agentrl reads the fast tokenizer's file)", ref, info.Commit)
		}
	}
	if want&Weights != 0 {
		add("adapter_config.json")
		if idx, ok := byName[indexFile]; ok {
			if err := c.fetch(ctx, ref, info.Commit, idx); err != nil {
				return nil, err
			}
			shards, err := readIndex(filepath.Join(c.repoDir(ref), "snapshots", info.Commit, indexFile))
			if err != nil {
				return nil, fmt.Errorf("hub: %s: %w", ref, err)
			}
			add(indexFile)
			for _, s := range shards {
				if _, ok := byName[s]; !ok {
					return nil, fmt.Errorf("hub: %s: %s names shard %q, which commit %s does not hold", ref, indexFile, s, info.Commit)
				}
				add(s)
			}
		} else if _, ok := byName["model.safetensors"]; ok {
			add("model.safetensors")
		} else {
			for _, f := range info.Files {
				if !strings.Contains(f.Name, "/") && strings.HasSuffix(f.Name, ".safetensors") {
					add(f.Name)
				}
			}
		}
		if !slices.ContainsFunc(names, func(n string) bool { return strings.HasSuffix(n, ".safetensors") }) {
			return nil, fmt.Errorf("hub: %s (commit %s) has no safetensors weights at its top level; agentrl reads safetensors only (a .bin, .pth or .gguf file is downloaded only when named in Extra)", ref, info.Commit)
		}
	}
	for _, f := range info.Files {
		for _, p := range c.Extra {
			if ok, _ := path.Match(p, f.Name); ok {
				add(f.Name)
			}
		}
	}
	out := make([]FileInfo, len(names))
	for i, n := range names {
		out[i] = byName[n]
	}
	return out, nil
}

// readIndex returns the shard files a safetensors index names, each once, in order.
func readIndex(p string) ([]string, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, fmt.Errorf("%s: %w", indexFile, err)
	}
	var shards []string
	for _, s := range idx.WeightMap {
		if !validFilename(s) || strings.Contains(s, "/") {
			return nil, fmt.Errorf("%s: shard name %q is not a file of the folder", indexFile, s)
		}
		if !slices.Contains(shards, s) {
			shards = append(shards, s)
		}
	}
	if len(shards) == 0 {
		return nil, fmt.Errorf("%s: empty weight_map", indexFile)
	}
	slices.Sort(shards)
	return shards, nil
}

// cached finds the snapshot a reference names in the cache without the network and checks that
// it holds every file want needs; the error lists what is missing.
func (c *Client) cached(ref Ref, want Want) (string, error) {
	commit := ref.Revision
	if !commitRE.MatchString(commit) {
		b, err := os.ReadFile(filepath.Join(c.repoDir(ref), "refs", filepath.FromSlash(ref.Revision)))
		if err != nil {
			return "", fmt.Errorf("hub: the cache %s has no %s (no refs/%s)", c.Cache, ref, ref.Revision)
		}
		commit = strings.TrimSpace(string(b))
		if !commitRE.MatchString(commit) {
			return "", fmt.Errorf("hub: the cache's refs/%s of %s does not hold a commit", ref.Revision, ref.Repo)
		}
	}
	dir := filepath.Join(c.repoDir(ref), "snapshots", commit)
	if _, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("hub: the cache %s has no snapshot %s of %s", c.Cache, commit, ref)
	}
	missing := missingFiles(dir, want)
	if len(missing) > 0 {
		return "", fmt.Errorf("hub: the cached snapshot %s of %s lacks %s", dir, ref, strings.Join(missing, ", "))
	}
	return dir, nil
}

// missingFiles lists what a checkpoint folder needs for want and lacks.
func missingFiles(dir string, want Want) []string {
	has := func(n string) bool {
		st, err := os.Stat(filepath.Join(dir, n))
		return err == nil && st.Mode().IsRegular()
	}
	var missing []string
	need := func(n string) {
		if !has(n) {
			missing = append(missing, n)
		}
	}
	need("config.json")
	if want&Tokenizer != 0 {
		need("tokenizer.json")
	}
	if want&Weights != 0 {
		if has(indexFile) {
			shards, err := readIndex(filepath.Join(dir, indexFile))
			if err != nil {
				missing = append(missing, indexFile+" ("+err.Error()+")")
			}
			for _, s := range shards {
				need(s)
			}
		} else if m, _ := filepath.Glob(filepath.Join(dir, "*.safetensors")); len(m) == 0 {
			missing = append(missing, "model.safetensors")
		}
	}
	return missing
}

// writeAtomic replaces a file's content in one step.
func writeAtomic(p string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), ".tmp-"+filepath.Base(p)+"-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return nil
}

func formatSize(n int64) string {
	switch {
	case n >= 1<<30:
		return strconv.FormatFloat(float64(n)/(1<<30), 'f', 2, 64) + " GiB"
	case n >= 1<<20:
		return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB"
	case n >= 1<<10:
		return strconv.FormatFloat(float64(n)/(1<<10), 'f', 1, 64) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " B"
}
