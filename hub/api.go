package hub

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
)

// maxInfoBytes bounds a revision-info answer (a repository of 10,000 files is about 2 MiB).
const maxInfoBytes = 16 << 20

// maxFiles bounds the siblings of one revision.
const maxFiles = 100000

// RevisionInfo is what GET /api/models/{repo}/revision/{revision}?blobs=true answers that a
// download needs: the commit and each file with its size and checksum.
type RevisionInfo struct {
	Commit string
	Files  []FileInfo
}

// FileInfo is one sibling of a revision.
type FileInfo struct {
	Name string // rfilename: the path in the repository
	Size int64  // bytes; -1 when the Hub did not say
	// BlobID is the git blob sha1 (40 hex digits) of the file as committed: for an LFS file,
	// that of its pointer. Empty when the Hub did not say.
	BlobID string
	// SHA256 is the LFS object's sha256 (64 hex digits); empty for a file not in LFS.
	SHA256 string
}

// ETag is the name the file's content has in blobs/: its LFS sha256, else its git blob sha1,
// as the Hub's ETag and X-Linked-Etag headers say.
func (f FileInfo) ETag() string {
	if f.SHA256 != "" {
		return f.SHA256
	}
	return f.BlobID
}

var (
	sha1RE   = regexp.MustCompile(`^[0-9a-f]{40}$`)
	sha256RE = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// revisionJSON is the wire form; fields the Hub adds and a download does not need are ignored.
type revisionJSON struct {
	SHA      *string `json:"sha"`
	Siblings []struct {
		RFilename *string `json:"rfilename"`
		Size      *int64  `json:"size"`
		BlobID    *string `json:"blobId"`
		LFS       *struct {
			SHA256 *string `json:"sha256"`
			Size   *int64  `json:"size"`
		} `json:"lfs"`
	} `json:"siblings"`
}

// ParseRevisionInfo decodes and checks a revision-info answer: a commit of 40 hex digits, file
// names that stay inside a folder, no name twice, checksums of the right form and sizes that
// agree.
func ParseRevisionInfo(b []byte) (RevisionInfo, error) {
	var w revisionJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return RevisionInfo{}, fmt.Errorf("revision info: %w", err)
	}
	if w.SHA == nil || !commitRE.MatchString(*w.SHA) {
		return RevisionInfo{}, errors.New("revision info: no commit (sha of 40 lowercase hex digits)")
	}
	if len(w.Siblings) > maxFiles {
		return RevisionInfo{}, fmt.Errorf("revision info: %d files, more than %d", len(w.Siblings), maxFiles)
	}
	info := RevisionInfo{Commit: *w.SHA, Files: make([]FileInfo, 0, len(w.Siblings))}
	seen := make(map[string]bool, len(w.Siblings))
	for i, s := range w.Siblings {
		if s.RFilename == nil {
			return RevisionInfo{}, fmt.Errorf("revision info: file %d has no rfilename", i)
		}
		f := FileInfo{Name: *s.RFilename, Size: -1}
		if !validFilename(f.Name) {
			return RevisionInfo{}, fmt.Errorf("revision info: file name %q would leave the snapshot folder", f.Name)
		}
		if seen[f.Name] {
			return RevisionInfo{}, fmt.Errorf("revision info: file %q listed twice", f.Name)
		}
		seen[f.Name] = true
		if s.BlobID != nil {
			if !sha1RE.MatchString(*s.BlobID) {
				return RevisionInfo{}, fmt.Errorf("revision info: %s: blobId %q is not a git sha1", f.Name, *s.BlobID)
			}
			f.BlobID = *s.BlobID
		}
		if s.Size != nil {
			if *s.Size < 0 {
				return RevisionInfo{}, fmt.Errorf("revision info: %s: size %d", f.Name, *s.Size)
			}
			f.Size = *s.Size
		}
		if s.LFS != nil {
			if s.LFS.SHA256 == nil || !sha256RE.MatchString(*s.LFS.SHA256) {
				return RevisionInfo{}, fmt.Errorf("revision info: %s: lfs.sha256 is not 64 lowercase hex digits", f.Name)
			}
			f.SHA256 = *s.LFS.SHA256
			if s.LFS.Size != nil {
				if *s.LFS.Size < 0 || (f.Size >= 0 && f.Size != *s.LFS.Size) {
					return RevisionInfo{}, fmt.Errorf("revision info: %s: lfs.size %d disagrees with size %d", f.Name, *s.LFS.Size, f.Size)
				}
				f.Size = *s.LFS.Size
			}
		}
		info.Files = append(info.Files, f)
	}
	return info, nil
}

// Error is a failed Hub request, with what to do about it.
type Error struct {
	Ref    Ref
	Status int    // HTTP status; 0 for a failure to reach the Hub
	Code   string // X-Error-Code (RepoNotFound, RevisionNotFound, EntryNotFound, GatedRepo) or ""
	File   string // the file, for a download
	Msg    string
}

func (e *Error) Error() string { return e.Msg }

// httpError turns an unsuccessful response into an Error that says what to do.
func httpError(ref Ref, file string, resp *http.Response, hasToken bool, endpoint string) *Error {
	code := resp.Header.Get("X-Error-Code")
	e := &Error{Ref: ref, Status: resp.StatusCode, Code: code, File: file}
	page := endpoint + "/" + ref.Repo
	what := Prefix + ref.Repo
	if file != "" {
		what += ": " + file
	}
	tokenHint := "set HF_TOKEN to a token of an account that may read it"
	if hasToken {
		tokenHint = "check that HF_TOKEN is a token of an account that has been granted access"
	}
	switch {
	case code == "GatedRepo" || (resp.StatusCode == http.StatusForbidden && code == ""):
		e.Msg = fmt.Sprintf("hub: %s: %d: the model is gated: accept the licence at %s and %s", what, resp.StatusCode, page, tokenHint)
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		// The Hub answers 401 for a repository it will not show: private, gated or absent.
		e.Msg = fmt.Sprintf("hub: %s: %d: the repository is gated or private, or does not exist: if it is gated, accept the licence at %s and %s; otherwise check the name", what, resp.StatusCode, page, tokenHint)
	case code == "RevisionNotFound":
		e.Msg = fmt.Sprintf("hub: %s: revision %q not found (404): name a branch, tag or commit that exists at %s", what, ref.Revision, page)
	case code == "EntryNotFound":
		e.Msg = fmt.Sprintf("hub: %s: file not found at revision %q (404)", what, ref.Revision)
	case resp.StatusCode == http.StatusNotFound:
		e.Msg = fmt.Sprintf("hub: %s: repository or revision %q not found (404): check the name at %s", what, ref.Revision, page)
	case resp.StatusCode == http.StatusTooManyRequests:
		e.Msg = fmt.Sprintf("hub: %s: rate limited (429): wait and run again, or set HF_TOKEN for a higher limit", what)
	default:
		e.Msg = fmt.Sprintf("hub: %s: %s", what, resp.Status)
	}
	if code != "" && !strings.Contains(e.Msg, code) {
		e.Msg += " [" + code + "]"
	}
	return e
}
