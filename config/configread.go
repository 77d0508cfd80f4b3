package config

import (
	"errors"
	"fmt"
	"os"
	"time"
)

// configPipeWait bounds how long a configuration given as a named pipe may take to arrive.
var configPipeWait = 10 * time.Second

// pipeReadError says why reading a configuration failed, naming a pipe whose writer was too slow.
func pipeReadError(path string, pipe bool, read int, err error) error {
	if pipe && read == 0 && errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("%s is a named pipe with no writer within %v: write the configuration into it, or give a file", path, configPipeWait)
	}
	if pipe && errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("%s: the named pipe's writer did not finish the configuration within %v", path, configPipeWait)
	}
	return err
}
