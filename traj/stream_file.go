package traj

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// Recovery reports what OpenFile found in an existing stream file.
type Recovery struct {
	Records   int   // intact records kept
	End       int64 // offset where appending resumes (end of the last intact record)
	Truncated int64 // bytes of a torn final record that were cut off (0 if none)
}

// OpenFile opens path for appending trajectories, creating it (with a header) if it is missing
// or empty. An existing file is scanned: its header must match opts, every record's checksums
// are verified, and a torn final record — left by a process killed mid-write — is truncated so
// appending resumes after the last intact record. Corruption before the end is an error and the
// file is left untouched. The returned Writer owns the file; Close syncs and closes it.
func OpenFile(path string, opts WriterOptions) (*Writer, Recovery, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, Recovery{}, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, Recovery{}, fmt.Errorf("traj: open stream: %w", err)
	}
	w, rec, err := openFile(f, path, opts)
	if err != nil {
		f.Close()
		return nil, rec, err
	}
	return w, rec, nil
}

func openFile(f *os.File, path string, opts WriterOptions) (*Writer, Recovery, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, Recovery{}, fmt.Errorf("traj: stat %s: %w", path, err)
	}
	size := st.Size()
	rec := Recovery{End: StreamHeaderLen}
	fresh := size == 0
	if !fresh {
		r, err := NewReader(f)
		if errors.Is(err, ErrTornTail) {
			// Killed while writing the header: nothing was ever recorded.
			fresh, rec.Truncated = true, size
		} else if err != nil {
			return nil, rec, fmt.Errorf("traj: %s: %w", path, err)
		} else {
			defer r.Close()
			if r.Format() != opts.Format || r.Compression() != opts.Compression {
				return nil, rec, fmt.Errorf("traj: %s holds %s/%s records; options ask for %s/%s",
					path, r.Format(), r.Compression(), opts.Format, opts.Compression)
			}
			r.skip = true
			for {
				_, err := r.Read()
				if err == io.EOF {
					break
				}
				if errors.Is(err, ErrTornTail) {
					rec.Truncated = size - r.Offset()
					break
				}
				if err != nil {
					return nil, rec, fmt.Errorf("traj: %s: %w", path, err)
				}
			}
			rec.Records, rec.End = r.Records(), r.Offset()
		}
	}
	if fresh {
		rec.End = 0
	}
	if rec.Truncated > 0 || fresh {
		if err := f.Truncate(rec.End); err != nil {
			return nil, rec, fmt.Errorf("traj: truncate torn record of %s: %w", path, err)
		}
	}
	if _, err := f.Seek(rec.End, io.SeekStart); err != nil {
		return nil, rec, fmt.Errorf("traj: seek %s: %w", path, err)
	}
	var w *Writer
	if fresh {
		w, err = NewWriter(f, opts)
		rec.End = StreamHeaderLen
	} else {
		w, err = newWriter(f, opts)
		if w != nil {
			w.offset, w.records = rec.End, rec.Records
		}
	}
	if err != nil {
		return nil, rec, err
	}
	if rec.Truncated > 0 {
		if err := f.Sync(); err != nil {
			w.comp.close()
			return nil, rec, fmt.Errorf("traj: sync %s: %w", path, err)
		}
	}
	w.file = f
	return w, rec, nil
}
