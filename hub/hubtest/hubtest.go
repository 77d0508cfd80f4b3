// Package hubtest is a local server that speaks the Hugging Face Hub's file API, for tests:
// revision info, resolve with a redirect of LFS files to a CDN on another host, Range
// requests, ETags, 401/403 for a gated repository and 404s with X-Error-Code. Nothing leaves
// the machine.
package hubtest

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
	"time"
)

// Hub speaks the Hugging Face Hub's file API the way huggingface.co does: revision info, resolve with a
// redirect for LFS files to a CDN on another host, Range requests, ETags, 401/403 for a gated
// repository and 404s with X-Error-Code.
type Hub struct {
	Repo    string
	Commit  string
	Refs    map[string]string // branch or tag -> commit
	Files   map[string][]byte
	LFS     map[string]bool // files stored in LFS (served through the CDN, checksummed by sha256)
	Gated   bool
	Token   string // the token that may read a gated repository
	Corrupt map[string]bool
	Cut     map[string]int // the next GET of a file stops after this many bytes (once)
	// Opaque makes the Hub a mirror that lists no checksums and answers ETags that are not
	// sha1 or sha256 ("opaque-" and 16 hex digits).
	Opaque bool

	API, CDN *httptest.Server

	mu        sync.Mutex
	slow      time.Duration  // SetSlow
	gets      map[string]int // full or partial GETs of each file's content
	ranges    []string       // Range headers seen
	apiAuth   []string       // Authorization headers at the endpoint
	cdnAuth   []string       // Authorization headers at the CDN
	apiCalls  int
	cdnPrefix string
}

// GitBlobSHA1 is git's name of a file's content: the sha1 of "blob <size>\0" and the content.
func GitBlobSHA1(b []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(b))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

// SHA256Hex is the hex sha256 of b.
func SHA256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// ETag is the Hub's ETag of a file: its LFS sha256, else its git blob sha1.
func (h *Hub) ETag(name string) string {
	if h.Opaque {
		return "opaque-" + SHA256Hex(h.Files[name])[:16]
	}
	if h.LFS[name] {
		return SHA256Hex(h.Files[name])
	}
	return GitBlobSHA1(h.Files[name])
}

// New starts a Hub serving files of repo at one commit ("main" names it); the files listed
// in lfs are LFS files. The servers close when the test ends.
func New(t testing.TB, repo string, files map[string][]byte, lfs ...string) *Hub {
	t.Helper()
	h := &Hub{
		Repo: repo, Commit: strings.Repeat("ab", 20), Refs: map[string]string{},
		Files: files, LFS: map[string]bool{}, Corrupt: map[string]bool{}, Cut: map[string]int{}, gets: map[string]int{},
	}
	h.Refs["main"] = h.Commit
	for _, n := range lfs {
		h.LFS[n] = true
	}
	h.CDN = httptest.NewServer(http.HandlerFunc(h.serveCDN))
	h.API = httptest.NewServer(http.HandlerFunc(h.serveAPI))
	// The CDN is named "localhost", the endpoint 127.0.0.1: another host, not only another port.
	u, _ := url.Parse(h.CDN.URL)
	h.cdnPrefix = "http://localhost:" + u.Port()
	t.Cleanup(h.API.Close)
	t.Cleanup(h.CDN.Close)
	return h
}

func (h *Hub) authorized(w http.ResponseWriter, r *http.Request) bool {
	if !h.Gated {
		return true
	}
	auth := r.Header.Get("Authorization")
	switch {
	case auth == "":
		w.Header().Set("X-Error-Code", "GatedRepo")
		http.Error(w, "Access to model "+h.Repo+" is restricted. You must have access to it and be authenticated to access it.", http.StatusUnauthorized)
		return false
	case auth != "Bearer "+h.Token:
		w.Header().Set("X-Error-Code", "GatedRepo")
		http.Error(w, "Access to model "+h.Repo+" is restricted and you are not in the authorized list.", http.StatusForbidden)
		return false
	}
	return true
}

func (h *Hub) serveAPI(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.apiAuth = append(h.apiAuth, r.Header.Get("Authorization"))
	h.mu.Unlock()
	if rest, ok := strings.CutPrefix(r.URL.EscapedPath(), "/api/models/"); ok {
		h.mu.Lock()
		h.apiCalls++
		h.mu.Unlock()
		repo, rev, ok := strings.Cut(rest, "/revision/")
		if !ok || repo != h.Repo {
			w.Header().Set("X-Error-Code", "RepoNotFound")
			http.Error(w, "Repository not found", http.StatusNotFound)
			return
		}
		if !h.authorized(w, r) {
			return
		}
		rev, _ = url.PathUnescape(rev)
		commit, ok := h.Refs[rev]
		if !ok && rev != h.Commit {
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
			BlobID    string   `json:"blobId,omitempty"`
			LFS       *lfsJSON `json:"lfs,omitempty"`
		}
		var sibs []sib
		for n, b := range h.Files {
			s := sib{RFilename: n, Size: len(b), BlobID: GitBlobSHA1(b)}
			if h.LFS[n] {
				s.BlobID = GitBlobSHA1([]byte("version https://git-lfs.github.com/spec/v1\noid sha256:" + SHA256Hex(b)))
				s.LFS = &lfsJSON{SHA256: SHA256Hex(b), Size: len(b), PointerSize: 134}
			}
			if h.Opaque {
				s = sib{RFilename: n, Size: len(b)}
			}
			sibs = append(sibs, s)
		}
		json.NewEncoder(w).Encode(map[string]any{"_id": "x", "id": h.Repo, "modelId": h.Repo, "sha": commit, "private": false,
			"gated": h.Gated, "siblings": sibs, "tags": []string{"safetensors"}})
		return
	}
	prefix := "/" + h.Repo + "/resolve/"
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
	if commit != h.Commit {
		w.Header().Set("X-Error-Code", "RevisionNotFound")
		http.Error(w, "Invalid rev id", http.StatusNotFound)
		return
	}
	body, ok := h.Files[name]
	if !ok {
		w.Header().Set("X-Error-Code", "EntryNotFound")
		http.Error(w, "Entry not found", http.StatusNotFound)
		return
	}
	w.Header().Set("X-Repo-Commit", h.Commit)
	if h.LFS[name] {
		w.Header().Set("X-Linked-Etag", `"`+h.ETag(name)+`"`)
		w.Header().Set("X-Linked-Size", strconv.Itoa(len(body)))
		w.Header().Set("ETag", `"`+GitBlobSHA1([]byte("pointer"))+`"`)
		http.Redirect(w, r, h.cdnPrefix+"/repos/"+h.ETag(name)+"?name="+url.QueryEscape(name), http.StatusFound)
		return
	}
	w.Header().Set("ETag", `"`+h.ETag(name)+`"`)
	h.serveBytes(w, r, name)
}

func (h *Hub) serveCDN(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.cdnAuth = append(h.cdnAuth, r.Header.Get("Authorization"))
	h.mu.Unlock()
	h.serveBytes(w, r, r.URL.Query().Get("name"))
}

// serveBytes answers a GET or HEAD of a file's content, honouring "Range: bytes=N-".
func (h *Hub) serveBytes(w http.ResponseWriter, r *http.Request, name string) {
	body := h.Files[name]
	if h.Corrupt[name] {
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
	cut, cutting := h.Cut[name]
	delete(h.Cut, name)
	slow := h.slow
	h.mu.Unlock()
	time.Sleep(slow)
	w.WriteHeader(status)
	if cutting {
		w.Write(body[start : start+cut])
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the connection drops mid-transfer
	}
	w.Write(body[start:])
}

// Gets is how many GETs of a file's content the Hub served.
func (h *Hub) Gets(name string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.gets[name]
}

// Ranges are the Range headers of the GETs served, in order.
func (h *Hub) Ranges() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.ranges...)
}

// Auth are the Authorization headers the endpoint and the CDN received.
func (h *Hub) Auth() (endpoint, cdn []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.apiAuth...), append([]string(nil), h.cdnAuth...)
}

// APICalls is how many revision-info requests the Hub answered.
func (h *Hub) APICalls() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.apiCalls
}

// SetSlow delays each later GET of a file's content by d, so that concurrent downloads overlap.
// It is safe to call while clients (in this process or others) are downloading.
func (h *Hub) SetSlow(d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.slow = d
}
