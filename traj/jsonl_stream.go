package traj

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// Plain JSONL files (one JSON trajectory per line, no framing) are for export and for other
// tools; run directories use the framed stream (NewWriter), which detects damage.

// WriteJSONL writes each trajectory as one line of JSON.
func WriteJSONL(w io.Writer, ts ...*Trajectory) error {
	var buf []byte
	for i, t := range ts {
		var err error
		if buf, err = t.AppendJSON(buf[:0]); err != nil {
			return fmt.Errorf("traj: jsonl line %d: %w", i+1, err)
		}
		buf = append(buf, '\n')
		if _, err := w.Write(buf); err != nil {
			return fmt.Errorf("traj: write jsonl line %d: %w", i+1, err)
		}
	}
	return nil
}

// JSONLReader reads trajectories one per line. Blank lines are skipped. A final line with no
// newline that does not parse is reported as ErrTornTail (a writer killed mid-line).
type JSONLReader struct {
	sc   *bufio.Scanner
	line int
	err  error
}

// NewJSONLReader reads from r; lines longer than MaxRecordBytes are an error.
func NewJSONLReader(r io.Reader) *JSONLReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxRecordBytes)
	sc.Split(scanLinesKeepEnd)
	return &JSONLReader{sc: sc}
}

// Line is the number of the line last read (1-based).
func (r *JSONLReader) Line() int { return r.line }

// Read returns the next trajectory, or io.EOF at the end. Errors are sticky.
func (r *JSONLReader) Read() (*Trajectory, error) {
	if r.err != nil {
		return nil, r.err
	}
	for r.sc.Scan() {
		r.line++
		raw := r.sc.Bytes()
		complete := len(raw) > 0 && raw[len(raw)-1] == '\n'
		line := bytes.TrimSpace(raw)
		if len(line) == 0 {
			continue
		}
		t := new(Trajectory)
		if err := t.UnmarshalJSON(line); err != nil {
			if !complete {
				r.err = fmt.Errorf("%w: jsonl line %d has no newline and does not parse: %v", ErrTornTail, r.line, err)
			} else {
				r.err = fmt.Errorf("traj: jsonl line %d: %w", r.line, err)
			}
			return nil, r.err
		}
		return t, nil
	}
	if err := r.sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			err = fmt.Errorf("line longer than %d bytes: %w", MaxRecordBytes, err)
		}
		r.err = fmt.Errorf("traj: jsonl line %d: %w", r.line+1, err)
		return nil, r.err
	}
	r.err = io.EOF
	return nil, io.EOF
}

// scanLinesKeepEnd is bufio.ScanLines that keeps the '\n', so Read can tell a torn last line.
func scanLinesKeepEnd(data []byte, atEOF bool) (int, []byte, error) {
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		return i + 1, data[:i+1], nil
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}
