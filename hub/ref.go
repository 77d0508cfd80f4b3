// Package hub downloads the files a run needs from the Hugging Face Hub into the cache that
// huggingface_hub keeps, laid out exactly as it lays it out, so that either tool reuses what the
// other fetched.
//
// A reference is hf:ORG/NAME[@REVISION]. Resolve turns one into a snapshot folder of the cache
// (and returns any other string unchanged, as a local folder); Client.Download does the work:
// it resolves the revision to a commit through the Hub's API, picks the files a checkpoint needs
// (config, tokenizer, chat template, generation config, safetensors and their index; never
// pickles, GGUF or ONNX unless asked), and downloads each into blobs/ under a file lock, resuming
// an interrupted transfer with a Range request and verifying the Hub's checksum (the LFS sha256,
// or the git blob sha1 of a small file) before the blob appears. docs/hub.md says what it
// implements of the Hub's API and the cache.
//
// The package imports nothing of the project.
package hub

import (
	"fmt"
	"regexp"
	"strings"
)

// Prefix marks a Hub reference where a checkpoint folder is expected.
const Prefix = "hf:"

// DefaultRevision is the revision of a reference that names none.
const DefaultRevision = "main"

// Ref names a model repository on the Hub and a revision of it (a branch, a tag or a commit).
type Ref struct {
	Repo     string // ORG/NAME
	Revision string // "main" when the reference named none
}

// String is the reference as ParseRef reads it.
func (r Ref) String() string { return Prefix + r.Repo + "@" + r.Revision }

// IsRef says whether s is meant as a Hub reference (it starts with "hf:").
func IsRef(s string) bool { return strings.HasPrefix(s, Prefix) }

// repoPart is one of ORG and NAME as the Hub allows them: letters, digits, '-', '_', '.', not
// starting or ending with '-' or '.', and never "--" or ".." (which would break the cache's
// models--ORG--NAME folder names or escape a folder).
var repoPart = regexp.MustCompile(`^[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?$`)

// revisionRE is a revision: a branch, tag or commit, possibly with '/' ("refs/pr/1").
var revisionRE = regexp.MustCompile(`^[A-Za-z0-9_.+-]+(?:/[A-Za-z0-9_.+-]+)*$`)

// commitRE is a full commit hash.
var commitRE = regexp.MustCompile(`^[0-9a-f]{40}$`)

// ParseRef reads hf:ORG/NAME[@REVISION].
func ParseRef(s string) (Ref, error) {
	if !IsRef(s) {
		return Ref{}, fmt.Errorf("hub: %q is not a Hub reference (hf:ORG/NAME[@REVISION])", s)
	}
	rest := strings.TrimPrefix(s, Prefix)
	repo, rev, hasRev := strings.Cut(rest, "@")
	if !hasRev {
		rev = DefaultRevision
	}
	r := Ref{Repo: repo, Revision: rev}
	if err := r.Validate(); err != nil {
		return Ref{}, err
	}
	return r, nil
}

// Validate checks the repository name and the revision: nothing in them may escape the cache
// folder or change what a URL names.
func (r Ref) Validate() error {
	org, name, ok := strings.Cut(r.Repo, "/")
	if !ok || !validPart(org) || !validPart(name) {
		return fmt.Errorf("hub: repository %q must be ORG/NAME, each of letters, digits, '-', '_' and '.' (not starting or ending with '-' or '.', no \"--\" or \"..\")", r.Repo)
	}
	if !validRevision(r.Revision) {
		return fmt.Errorf("hub: revision %q of %s must be a branch, tag or commit of letters, digits, '-', '_', '.', '+' and '/' (no \".\" or \"..\" parts)", r.Revision, r.Repo)
	}
	return nil
}

func validPart(s string) bool {
	return repoPart.MatchString(s) && !strings.Contains(s, "--") && !strings.Contains(s, "..")
}

func validRevision(s string) bool {
	if len(s) > 255 || !revisionRE.MatchString(s) {
		return false
	}
	for _, p := range strings.Split(s, "/") {
		if p == "." || p == ".." {
			return false
		}
	}
	return true
}

// validFilename says whether a file name the Hub lists may become a path under a snapshot: a
// relative, clean, slash-separated path with no "." or ".." part, no backslash and no control
// characters.
func validFilename(s string) bool {
	if s == "" || len(s) > 1024 || strings.HasPrefix(s, "/") || strings.ContainsAny(s, "\\:") {
		return false
	}
	for _, c := range s {
		if c < 0x20 || c == 0x7f {
			return false
		}
	}
	for _, p := range strings.Split(s, "/") {
		if p == "" || p == "." || p == ".." {
			return false
		}
	}
	return true
}

// repoFolder is the cache folder of a model repository: models--ORG--NAME.
func repoFolder(repo string) string {
	return "models--" + strings.ReplaceAll(repo, "/", "--")
}
