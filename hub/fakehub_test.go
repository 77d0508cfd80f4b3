package hub

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// fakeHub speaks the Hub's file API the way huggingface.co does: revision info, resolve with a
// redirect for LFS files to a CDN on another host, Range requests, ETags, 401/403 for a gated
// repository and 404s with X-Error-Code.
type fakeHub struct {
	repo    string
	commit  string
	refs    map[string]string // branch or tag -> commit
	files   map[string][]byte
	lfs     map[string]bool
	gated   bool
	token   string // the token that may read a gated repo
	corrupt map[string]bool
	cut     map[string]int // the next GET of a file stops after this many bytes (once)

	api, cdn *httptest.Server

	mu        sync.Mutex
	gets      map[string]int // full or partial GETs of each file's content
	ranges    []string       // Range headers seen
	apiAuth   []string       // Authorization headers at the endpoint
	cdnAuth   []string       // Authorization headers at the CDN
	apiCalls  int
	cdnPrefix string
}

func gitBlobSHA1(b []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(b))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func (h *fakeHub) etag(name string) string {
	if h.lfs[name] {
		return sha256Hex(h.files[name])
	}
	return gitBlobSHA1(h.files[name])
}

func newFakeHub(t *testing.T, repo string, files map[string][]byte, lfs ...string) *fakeHub {
	t.Helper()
	h := &fakeHub{
		repo: repo, commit: strings.Repeat("ab", 20), refs: map[string]string{},
		files: files, lfs: map[string]bool{}, corrupt: map[string]bool{}, cut: map[string]int{}, gets: map[string]int{},
	}
	h.refs["main"] = h.commit
	for _, n := range lfs {
		h.lfs[n] = true
	}
	h.cdn = httptest.NewServer(http.HandlerFunc(h.serveCDN))
	h.api = httptest.NewServer(http.HandlerFunc(h.serveAPI))
	// The CDN is named "localhost", the endpoint 127.0.0.1: another host, not only another port.
	u, _ := url.Parse(h.cdn.URL)
	h.cdnPrefix = "http://localhost:" + u.Port()
	t.Cleanup(h.api.Close)
	t.Cleanup(h.cdn.Close)
	return h
}

func (h *fakeHub) authorized(w http.ResponseWriter, r *http.Request) bool {
	if !h.gated {
		return true
	}
	auth := r.Header.Get("Authorization")
	switch {
	case auth == "":
		w.Header().Set("X-Error-Code", "GatedRepo")
		http.Error(w, "Access to model "+h.repo+" is restricted. You must have access to it and be authenticated to access it.", http.StatusUnauthorized)
		return false
	case auth != "Bearer "+h.token:
		w.Header().Set("X-Error-Code", "GatedRepo")
		http.Error(w, "Access to model "+h.repo+" is restricted and you are not in the authorized list.", http.StatusForbidden)
		return false
	}
	return true
}

func (h *fakeHub) serveAPI(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.apiAuth = append(h.apiAuth, r.Header.Get("Authorization"))
	h.mu.Unlock()
	if rest, ok := strings.CutPrefix(r.URL.EscapedPath(), "/api/models/"); ok {
		h.mu.Lock()
		h.apiCalls++
		h.mu.Unlock()
		repo, rev, ok := strings.Cut(rest, "/revision/")
		if !ok || repo != h.repo {
			w.Header().Set("X-Error-Code", "RepoNotFound")
			http.Error(w, "Repository not found", http.StatusNotFound)
			return
		}
		if !h.authorized(w, r) {
			return
		}
		rev, _ = url.PathUnescape(rev)
		commit, ok := h.refs[rev]
		if !ok && rev != h.commit {
			w.Header().Set("X-Error-Code", "RevisionNotFound")
			http.Error(w, "Invalid rev id: "+rev, http.StatusNotFound)
			return
		}
		if !ok {
			commit = rev
		}
		type lfsJSON struct {
			SHA256      string `json:"sha256"`
			Size        int    `json:"size"`
			PointerSize int    `json:"pointerSize"`
		}
		type sib struct {
			RFilename string   `json:"rfilename"`
			Size      int      `json:"size"`
			BlobID    string   `json:"blobId"`
			LFS       *lfsJSON `json:"lfs,omitempty"`
		}
		var sibs []sib
		for n, b := range h.files {
			s := sib{RFilename: n, Size: len(b), BlobID: gitBlobSHA1(b)}
			if h.lfs[n] {
				s.BlobID = gitBlobSHA1([]byte("version https://git-lfs.github.com/spec/v1\noid sha256:" + sha256Hex(b)))
				s.LFS = &lfsJSON{SHA256: sha256Hex(b), Size: len(b), PointerSize: 134}
			}
			sibs = append(sibs, s)
		}
		json.NewEncoder(w).Encode(map[string]any{"_id": "x", "id": h.repo, "modelId": h.repo, "sha": commit, "private": false,
			"gated": h.gated, "siblings": sibs, "tags": []string{"safetensors"}})
		return
	}
	prefix := "/" + h.repo + "/resolve/"
	rest, ok := strings.CutPrefix(r.URL.Path, prefix)
	if !ok {
		w.Header().Set("X-Error-Code", "RepoNotFound")
		http.Error(w, "Repository not found", http.StatusNotFound)
		return
	}
	if !h.authorized(w, r) {
		return
	}
	commit, name, _ := strings.Cut(rest, "/")
	if commit != h.commit {
		w.Header().Set("X-Error-Code", "RevisionNotFound")
		http.Error(w, "Invalid rev id", http.StatusNotFound)
		return
	}
	body, ok := h.files[name]
	if !ok {
		w.Header().Set("X-Error-Code", "EntryNotFound")
		http.Error(w, "Entry not found", http.StatusNotFound)
		return
	}
	w.Header().Set("X-Repo-Commit", h.commit)
	if h.lfs[name] {
		w.Header().Set("X-Linked-Etag", `"`+h.etag(name)+`"`)
		w.Header().Set("X-Linked-Size", strconv.Itoa(len(body)))
		w.Header().Set("ETag", `"`+gitBlobSHA1([]byte("pointer"))+`"`)
		http.Redirect(w, r, h.cdnPrefix+"/repos/"+h.etag(name)+"?name="+url.QueryEscape(name), http.StatusFound)
		return
	}
	w.Header().Set("ETag", `"`+h.etag(name)+`"`)
	h.serveBytes(w, r, name)
}

func (h *fakeHub) serveCDN(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.cdnAuth = append(h.cdnAuth, r.Header.Get("Authorization"))
	h.mu.Unlock()
	h.serveBytes(w, r, r.URL.Query().Get("name"))
}

// serveBytes answers a GET or HEAD of a file's content, honouring "Range: bytes=N-".
func (h *fakeHub) serveBytes(w http.ResponseWriter, r *http.Request, name string) {
	body := h.files[name]
	if h.corrupt[name] {
		body = append([]byte(nil), body...)
		body[len(body)/2] ^= 1
	}
	start := 0
	status := http.StatusOK
	if rg := r.Header.Get("Range"); rg != "" {
		n, err := fmt.Sscanf(rg, "bytes=%d-", &start)
		if n != 1 || err != nil || start >= len(body) {
			w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", len(body)))
			w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
			return
		}
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, len(body)-1, len(body)))
		status = http.StatusPartialContent
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)-start))
	if r.Method == http.MethodHead {
		w.WriteHeader(status)
		return
	}
	h.mu.Lock()
	h.gets[name]++
	h.ranges = append(h.ranges, r.Header.Get("Range"))
	cut, cutting := h.cut[name]
	delete(h.cut, name)
	h.mu.Unlock()
	w.WriteHeader(status)
	if cutting {
		w.Write(body[start : start+cut])
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the connection drops mid-transfer
	}
	w.Write(body[start:])
}

func (h *fakeHub) getCount(name string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.gets[name]
}
