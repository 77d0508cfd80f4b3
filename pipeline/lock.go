package pipeline

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// lockFile, in a run directory, is held (flock) by the process that writes the run: a training
// for the run's whole lifetime, or 'agentrl traj repair'. It holds the holder's pid. The kernel
// releases the lock when the holder exits however it exits (kill -9 included); a lock file left
// behind by a dead process is therefore free, whatever pid it names.
const lockFile = "lock"

// ErrLocked means another process holds the run directory's lock.
var ErrLocked = errors.New("run directory is in use")

// LockRun takes the lock of run directory dir without waiting. When another process holds it,
// the error wraps ErrLocked and names that process's pid. unlock releases it.
func LockRun(dir string) (unlock func(), err error) {
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("pipeline: lock %s: %w", dir, err)
	}
	held, err := tryLock(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("pipeline: lock %s: %w", path, err)
	}
	if held {
		data, _ := os.ReadFile(path)
		f.Close()
		holder := "another process"
		if pid, err := strconv.Atoi(string(bytes.TrimSpace(data))); err == nil {
			holder = fmt.Sprintf("process %d", pid)
		}
		return nil, fmt.Errorf("%w: %s holds %s (a training or a 'traj repair' still running on %s); wait for it to finish or stop it first", ErrLocked, holder, path, dir)
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return func() {
		// Closing the file releases the lock; the file stays (removing it would race with a
		// process that opened it and waits to lock it).
		f.Close()
	}, nil
}
