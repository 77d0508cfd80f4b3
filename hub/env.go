package hub

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// DefaultEndpoint is the Hub's address when HF_ENDPOINT is not set.
const DefaultEndpoint = "https://huggingface.co"

// Settings are what huggingface_hub reads from the environment, read the same way.
type Settings struct {
	// Endpoint is the Hub's base URL (HF_ENDPOINT; DefaultEndpoint).
	Endpoint string
	// Cache is the hub cache folder (HF_HUB_CACHE, else the older HUGGINGFACE_HUB_CACHE, else
	// $HF_HOME/hub; HF_HOME defaults to $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface).
	Cache string
	// Offline uses the cache only (HF_HUB_OFFLINE set to 1, ON, YES or TRUE).
	Offline bool
	// Token is sent as a bearer token to the endpoint's host only (HF_TOKEN, else the file
	// HF_TOKEN_PATH names, else $HF_HOME/token, which `hf auth login` writes). It is never
	// written anywhere or printed.
	Token string
}

// FromEnv reads Settings from the environment as huggingface_hub does.
func FromEnv() (Settings, error) {
	return settingsFrom(os.Getenv)
}

func settingsFrom(getenv func(string) string) (Settings, error) {
	var s Settings
	home := getenv("HF_HOME")
	if home == "" {
		cache := getenv("XDG_CACHE_HOME")
		if cache == "" {
			h, err := os.UserHomeDir()
			if err != nil {
				return s, fmt.Errorf("hub: no HF_HOME, XDG_CACHE_HOME or home folder to keep the cache in: %w", err)
			}
			cache = filepath.Join(h, ".cache")
		}
		home = filepath.Join(cache, "huggingface")
	}
	s.Cache = getenv("HF_HUB_CACHE")
	if s.Cache == "" {
		s.Cache = getenv("HUGGINGFACE_HUB_CACHE")
	}
	if s.Cache == "" {
		s.Cache = filepath.Join(home, "hub")
	}
	s.Endpoint = strings.TrimRight(getenv("HF_ENDPOINT"), "/")
	if s.Endpoint == "" {
		s.Endpoint = DefaultEndpoint
	}
	if u, err := url.Parse(s.Endpoint); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return s, fmt.Errorf("hub: HF_ENDPOINT %q is not an http(s) URL", s.Endpoint)
	}
	switch strings.ToUpper(getenv("HF_HUB_OFFLINE")) {
	case "1", "ON", "YES", "TRUE":
		s.Offline = true
	}
	s.Token = strings.TrimSpace(getenv("HF_TOKEN"))
	if s.Token == "" {
		path := getenv("HF_TOKEN_PATH")
		if path == "" {
			path = filepath.Join(home, "token")
		}
		tok, err := readToken(path)
		if err != nil {
			return s, err
		}
		s.Token = tok
	}
	return s, nil
}

// readToken reads a token file; a missing file is no token.
func readToken(path string) (string, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("hub: token file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return "", fmt.Errorf("hub: token file %s: %w", path, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// Timeouts bound every wait on the network and on other processes.
type Timeouts struct {
	Connect time.Duration // dialing and TLS (10s)
	Header  time.Duration // from a request sent to its response's headers (30s)
	Idle    time.Duration // a download receiving no byte (60s)
	Lock    time.Duration // waiting for another process's download of the same file (1h)
}

func (t Timeouts) withDefaults() Timeouts {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&t.Connect, 10*time.Second)
	def(&t.Header, 30*time.Second)
	def(&t.Idle, 60*time.Second)
	def(&t.Lock, time.Hour)
	return t
}
