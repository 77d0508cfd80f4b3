//go:build unix

package config

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentrl/agentrl/env/all"
)

// Item 26 of issue 29: --config on a named pipe with no writer is an error at once, not a read
// that blocks beyond the reach of signals; one with a writer is read.
func TestConfigOnANamedPipe(t *testing.T) {
	p := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	defer func(w time.Duration) { configPipeWait = w }(configPipeWait)
	configPipeWait = 500 * time.Millisecond
	done := make(chan error, 1)
	go func() {
		_, err := Load(all.Builtins(), "", p, nil)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "named pipe with no writer") {
			t.Fatalf("a pipe with no writer: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("reading a configuration from a named pipe with no writer blocks")
	}

	good, err := Preset("calc")
	if err != nil {
		t.Fatal(err)
	}
	data, err := Encode(good)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() { // a writer that tries again when the reader looked before it wrote
		for {
			select {
			case <-stop:
				return
			default:
			}
			f, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0)
			if err != nil { // no reader yet
				time.Sleep(5 * time.Millisecond)
				continue
			}
			_, err = f.Write(data)
			f.Close()
			if err == nil {
				return
			}
		}
	}()
	// The writer comes after the reader opened the pipe: the reader waits for it.
	configPipeWait = 10 * time.Second
	c, err := Load(all.Builtins(), "", p, nil)
	if err != nil || c.Seed != good.Seed {
		t.Fatalf("a configuration written into the pipe: %v (seed %d, want %d)", err, c.Seed, good.Seed)
	}
}

// Item 26 of issue 29: an integer setting whose literal does not fit its type is an error, not
// another number (seed: 2^64 became 2^63).
func TestIntegerOutOfRange(t *testing.T) {
	good, err := Preset("calc")
	if err != nil {
		t.Fatal(err)
	}
	data, err := Encode(good)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ old, new, want string }{
		{"seed: " + strconv.FormatUint(good.Seed, 10), "seed: 18446744073709551616", "seed: 18446744073709551616 is out of range"},
		{"seed: " + strconv.FormatUint(good.Seed, 10), "seed: -1", "seed: -1 is out of range"},
		{"vocab_size: 512", "vocab_size: 9223372036854775808", "tokenizer.vocab_size: 9223372036854775808 is out of range"},
	} {
		bad := strings.Replace(string(data), c.old, c.new, 1)
		if bad == string(data) {
			t.Fatalf("config has no %q", c.old)
		}
		if _, err := Decode([]byte(bad)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.new, err, c.want)
		}
	}
	if c, err := Decode([]byte(strings.Replace(string(data), "seed: "+strconv.FormatUint(good.Seed, 10), "seed: 18446744073709551615", 1))); err != nil || c.Seed != 1<<64-1 {
		t.Errorf("seed 2^64-1: %v, %d", err, c.Seed)
	}
	if _, err := Load(all.Builtins(), "calc", "", []string{"seed=18446744073709551616"}); err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Errorf("--set seed=2^64: %v", err)
	}
}
