package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Values of sft.bad_rows and sft.overlong.
const (
	BadRowsRefuse    = "refuse"
	BadRowsDrop      = "drop"
	OverlongRefuse   = "refuse"
	OverlongTruncate = "truncate"
)

// validateData checks an sft block that trains on a file of demonstrations.
func (s *SFTConfig) validateData(c *Config, p *Phase) error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if s.Demos != 0 || s.Noise != 0 || s.Keep != "" {
		bad("sft.demos, sft.noise and sft.keep say how the experts' demonstrations are synthesized and do nothing with sft.data: leave them out")
	}
	if st, err := os.Stat(s.Data); err != nil {
		bad("sft.data: %v", err)
	} else if st.IsDir() {
		bad("sft.data %s is a folder: name a .jsonl file of conversations", s.Data)
	}
	if ext := strings.ToLower(filepath.Ext(s.Data)); ext != ".jsonl" && ext != ".ndjson" {
		bad("sft.data %s: a .jsonl (or .ndjson) file, one conversation a line", s.Data)
	}
	if s.BatchSize < 1 {
		bad("sft.batch_size must be positive, got %d", s.BatchSize)
	} else if err := c.checkBatch("sft.batch_size", s.BatchSize); err != nil {
		errs = append(errs, err)
	}
	switch s.BadRows {
	case "", BadRowsRefuse, BadRowsDrop:
	default:
		bad("sft.bad_rows %q: refuse (the default) or drop", s.BadRows)
	}
	switch s.Overlong {
	case "", OverlongRefuse, OverlongTruncate:
	default:
		bad("sft.overlong %q: refuse (the default) or truncate", s.Overlong)
	}
	if s.Curriculum < 0 || s.Curriculum > p.Steps {
		bad("sft.curriculum must be in [0, steps = %d], got %d", p.Steps, s.Curriculum)
	}
	return errors.Join(errs...)
}

// resolvePaths makes the data files the configuration names (sft.data, an environment's
// tasks.path) absolute: a relative one is taken from base, the folder of the configuration
// file that named it (or the working folder, for --set). A run keeps them absolute in the
// configuration it saves, so it resumes and replays from any folder.
func (c *Config) resolvePaths(base string) error {
	abs, err := filepath.Abs(base)
	if err != nil {
		return fmt.Errorf("pipeline: the configuration's folder: %w", err)
	}
	fix := func(p *string) {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(abs, *p)
		}
	}
	for i := range c.Phases {
		p := &c.Phases[i]
		if p.SFT != nil {
			fix(&p.SFT.Data)
		}
		for j := range p.Envs {
			if t := p.Envs[j].Tasks; t != nil {
				fix(&t.Path)
			}
		}
	}
	return nil
}
