//go:build !unix

package config

import (
	"io"
	"os"
)

// openConfigFile opens a configuration file.
func openConfigFile(path string) (io.ReadCloser, bool, error) {
	f, err := os.Open(path)
	return f, false, err
}
