package hub

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// meta is what a HEAD of a file's resolve URL says, as huggingface_hub reads it.
type meta struct {
	commit string // X-Repo-Commit
	etag   string // X-Linked-Etag (an LFS file's sha256), else ETag (the git blob sha1)
	size   int64  // X-Linked-Size, else Content-Length; -1 when neither
}

// resolveURL is where a file of a commit is downloaded from.
func (c *Client) resolveURL(ref Ref, commit, name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return c.Endpoint + "/" + ref.Repo + "/resolve/" + commit + "/" + strings.Join(parts, "/")
}

// head asks for a file's metadata without following a redirect to another host (an LFS file's
// answer is a redirect to the CDN, carrying X-Linked-Etag and X-Linked-Size); a relative
// redirect (a renamed repository) is followed.
func (c *Client) head(ctx context.Context, ref Ref, commit, name string) (meta, error) {
	u := c.resolveURL(ref, commit, name)
	for range 5 {
		req, err := http.NewRequestWithContext(ctx, http.MethodHead, u, nil)
		if err != nil {
			return meta{}, err
		}
		req.Header.Set("Accept-Encoding", "identity")
		resp, err := c.noFollow.Do(req)
		if err != nil {
			return meta{}, fmt.Errorf("hub: %s: %s: %w", ref, name, redact(err))
		}
		resp.Body.Close()
		if resp.StatusCode >= 300 && resp.StatusCode < 400 {
			loc, err := url.Parse(resp.Header.Get("Location"))
			if err == nil && loc.Host == "" && resp.Header.Get("X-Linked-Etag") == "" {
				u = req.URL.ResolveReference(loc).String()
				continue
			}
		} else if resp.StatusCode != http.StatusOK {
			return meta{}, httpError(ref, name, resp, c.Token != "", c.Endpoint)
		}
		m := meta{commit: resp.Header.Get("X-Repo-Commit"), etag: resp.Header.Get("X-Linked-Etag"), size: -1}
		if m.etag == "" {
			m.etag = resp.Header.Get("ETag")
		}
		m.etag = strings.Trim(strings.TrimPrefix(m.etag, "W/"), `"`)
		s := resp.Header.Get("X-Linked-Size")
		if s == "" && resp.StatusCode == http.StatusOK {
			s = resp.Header.Get("Content-Length")
		}
		if s != "" {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil || n < 0 {
				return meta{}, fmt.Errorf("hub: %s: %s: size header %q", ref, name, s)
			}
			m.size = n
		}
		return m, nil
	}
	return meta{}, fmt.Errorf("hub: %s: %s: too many redirects", ref, name)
}

// fetch makes snapshots/<commit>/<name> a link to the file's blob, downloading the blob unless
// the cache has it.
func (c *Client) fetch(ctx context.Context, ref Ref, commit string, f FileInfo) error {
	repo := c.repoDir(ref)
	link := filepath.Join(repo, "snapshots", commit, filepath.FromSlash(f.Name))
	if st, err := os.Stat(link); err == nil && st.Mode().IsRegular() && (f.Size < 0 || st.Size() == f.Size) {
		return nil
	}
	m, err := c.head(ctx, ref, commit, f.Name)
	if err != nil {
		return err
	}
	if m.commit != "" && m.commit != commit {
		return fmt.Errorf("hub: %s: %s: the Hub served commit %s for commit %s", ref, f.Name, m.commit, commit)
	}
	etag := f.ETag()
	switch {
	case etag == "":
		etag = m.etag
	case m.etag != "" && m.etag != etag:
		return fmt.Errorf("hub: %s: %s: the file's ETag %s disagrees with the revision's listing %s", ref, f.Name, m.etag, etag)
	}
	if !opaqueRE.MatchString(etag) {
		return fmt.Errorf("hub: %s: %s: the Hub gave no usable ETag (%q) to name the file in the cache", ref, f.Name, etag)
	}
	size := f.Size
	switch {
	case size < 0:
		size = m.size
	case m.size >= 0 && m.size != size:
		return fmt.Errorf("hub: %s: %s: size %d disagrees with the revision's listing %d", ref, f.Name, m.size, size)
	}
	if size < 0 {
		return fmt.Errorf("hub: %s: %s: the Hub gave no size", ref, f.Name)
	}
	blob := filepath.Join(repo, "blobs", etag)
	if !isFile(blob, size) {
		if err := os.MkdirAll(filepath.Dir(blob), 0o755); err != nil {
			return fmt.Errorf("hub: %w", err)
		}
		unlock, err := lockFile(ctx, filepath.Join(c.Cache, ".locks", repoFolder(ref.Repo), etag+".lock"), c.Timeouts.Lock)
		if err != nil {
			return fmt.Errorf("hub: %s: %s: %w", ref, f.Name, err)
		}
		err = c.downloadBlob(ctx, ref, commit, f.Name, blob, etag, size)
		unlock()
		if err != nil {
			return err
		}
	}
	return relink(link, blob)
}

func isFile(p string, size int64) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Size() == size
}

// relink points link at blob with a relative symlink, replacing whatever was there in one step.
func relink(link, blob string) error {
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	target, err := filepath.Rel(filepath.Dir(link), blob)
	if err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	tmp := fmt.Sprintf("%s.tmp-%d-%d", link, os.Getpid(), time.Now().UnixNano())
	if err := os.Symlink(target, tmp); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	if err := os.Rename(tmp, link); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("hub: %w", err)
	}
	return nil
}

// opaqueRE is an ETag usable as a blob's file name; only a sha1 or sha256 one is a checksum
// (verifiable). A mirror may give another kind, and then only the size is checked.
var opaqueRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

func verifiable(etag string) bool { return sha1RE.MatchString(etag) || sha256RE.MatchString(etag) }

// newHash is the checksum an ETag is: sha256 of the content for an LFS file, else the git blob
// sha1 (of "blob <size>\0" and the content).
func newHash(etag string, size int64) hash.Hash {
	if len(etag) == 64 {
		return sha256.New()
	}
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", size)
	return h
}

// errTransfer marks a transfer that broke off and may be resumed.
type errTransfer struct{ err error }

func (e errTransfer) Error() string { return e.err.Error() }
func (e errTransfer) Unwrap() error { return e.err }

// downloadBlob fills blobs/<etag> under the lock: it appends to blobs/<etag>.incomplete from
// where an earlier transfer stopped (a Range request), checks the checksum and renames. A
// transfer that breaks off is tried again (Attempts); a checksum mismatch removes the partial
// file.
func (c *Client) downloadBlob(ctx context.Context, ref Ref, commit, name, blob, etag string, size int64) error {
	if isFile(blob, size) { // another process finished it while this one waited
		return nil
	}
	attempts := c.Attempts
	if attempts <= 0 {
		attempts = 3
	}
	var err error
	for range attempts {
		err = c.transfer(ctx, ref, commit, name, blob, etag, size)
		var te errTransfer
		if err == nil || !errors.As(err, &te) || ctx.Err() != nil {
			break
		}
	}
	return err
}

func (c *Client) transfer(ctx context.Context, ref Ref, commit, name, blob, etag string, size int64) error {
	part := blob + ".incomplete"
	fail := func(format string, a ...any) error {
		return fmt.Errorf("hub: %s: %s: "+format, append([]any{ref, name}, a...)...)
	}
	f, err := os.OpenFile(part, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fail("%w", err)
	}
	defer f.Close()
	h := newHash(etag, size)
	have, err := io.Copy(h, f) // what an earlier transfer left
	if err != nil {
		return fail("reading %s: %w", part, err)
	}
	if have > size {
		if err := restart(f, &h, etag, size); err != nil {
			return fail("%w", err)
		}
		have = 0
	}
	if have < size {
		if err := c.get(ctx, ref, commit, name, f, &h, have, size, etag); err != nil {
			return err
		}
	}
	if err := f.Sync(); err != nil {
		return fail("%w", err)
	}
	if !verifiable(etag) {
		c.printf("hub: %s: %s: the endpoint's ETag %q is not a checksum; only the size (%d bytes) was checked\n", ref, name, etag, size)
	} else if got := hex.EncodeToString(h.Sum(nil)); got != etag {
		f.Close()
		os.Remove(part)
		return fail("checksum mismatch: got %s, the Hub says %s; the download was removed: run again (if it recurs, the endpoint %s serves a corrupt file)", got, etag, c.Endpoint)
	}
	if err := f.Close(); err != nil {
		return fail("%w", err)
	}
	if err := os.Rename(part, blob); err != nil {
		return fail("%w", err)
	}
	return nil
}

// restart empties the partial file and the hash.
func restart(f *os.File, h *hash.Hash, etag string, size int64) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	*h = newHash(etag, size)
	return nil
}

// get downloads bytes [have, size) of a file and appends them to f.
func (c *Client) get(ctx context.Context, ref Ref, commit, name string, f *os.File, h *hash.Hash, have, size int64, etag string) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.resolveURL(ref, commit, name), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept-Encoding", "identity")
	if have > 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", have))
	}
	resp, err := c.httpc.Do(req)
	if err != nil {
		return errTransfer{fmt.Errorf("hub: %s: %s: %w", ref, name, redact(err))}
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusPartialContent:
		var start int64
		if _, err := fmt.Sscanf(resp.Header.Get("Content-Range"), "bytes %d-", &start); err != nil || start != have {
			return fmt.Errorf("hub: %s: %s: asked for bytes from %d, got Content-Range %q", ref, name, have, resp.Header.Get("Content-Range"))
		}
	case http.StatusOK: // the server ignored the Range: start again
		if err := restart(f, h, etag, size); err != nil {
			return err
		}
		have = 0
	case http.StatusRequestedRangeNotSatisfiable:
		if err := restart(f, h, etag, size); err != nil {
			return err
		}
		return errTransfer{fmt.Errorf("hub: %s: %s: the partial download did not fit the file; starting again", ref, name)}
	default:
		return httpError(ref, name, resp, c.Token != "", c.Endpoint)
	}
	if _, err := f.Seek(have, io.SeekStart); err != nil {
		return err
	}
	bar := newProgress(c.Out, name, have, size)
	defer bar.done()
	// A stalled transfer is cut after Timeouts.Idle without a byte.
	idle := time.AfterFunc(c.Timeouts.Idle, func() { cancel(fmt.Errorf("no data for %s", c.Timeouts.Idle)) })
	defer idle.Stop()
	w := io.MultiWriter(f, *h)
	buf := make([]byte, 256<<10)
	body := io.LimitReader(resp.Body, size-have+1)
	for {
		n, rerr := body.Read(buf)
		if n > 0 {
			idle.Reset(c.Timeouts.Idle)
			if have+int64(n) > size {
				restart(f, h, etag, size)
				return fmt.Errorf("hub: %s: %s: the server sent more than the %d bytes the Hub lists; the download was discarded", ref, name, size)
			}
			if _, err := w.Write(buf[:n]); err != nil {
				return fmt.Errorf("hub: %s: %s: %w", ref, name, err)
			}
			have += int64(n)
			bar.set(have)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
				rerr = cause
			}
			return errTransfer{fmt.Errorf("hub: %s: %s: transfer broke off at %d of %d bytes (kept; it resumes): %w", ref, name, have, size, redact(rerr))}
		}
	}
	if have < size {
		return errTransfer{fmt.Errorf("hub: %s: %s: transfer ended at %d of %d bytes (kept; it resumes)", ref, name, have, size)}
	}
	return nil
}
