//go:build unix

package config

import (
	"errors"
	"io"
	"os"
	"syscall"
	"time"
)

// openConfigFile opens a configuration file. A named pipe is opened without waiting for a writer
// (open(2) would block, beyond the reach of signals): the reader waits for a writer's data up to
// configPipeWait, checking every few milliseconds, and reads under that deadline.
func openConfigFile(path string) (io.ReadCloser, bool, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, false, err
	}
	if st.Mode()&os.ModeNamedPipe == 0 {
		f, err := os.Open(path)
		return f, false, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, true, err
	}
	deadline := time.Now().Add(configPipeWait)
	_ = f.SetReadDeadline(deadline)
	return &pipeReader{f: f, deadline: deadline}, true, nil
}

// pipeReader reads a named pipe: end of file before any data means no writer has come yet, and
// it waits for one until the deadline.
type pipeReader struct {
	f        *os.File
	deadline time.Time
	got      bool
}

func (p *pipeReader) Read(b []byte) (int, error) {
	for {
		n, err := p.f.Read(b)
		if n > 0 {
			p.got = true
			return n, err
		}
		if errors.Is(err, io.EOF) && !p.got && time.Now().Before(p.deadline) {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		return n, err
	}
}

func (p *pipeReader) Close() error { return p.f.Close() }
