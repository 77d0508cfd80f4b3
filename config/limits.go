package config

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// LimitsConfig bounds what a run may take of the machine it runs on.
type LimitsConfig struct {
	// Memory is a ceiling on the run's memory estimate (model.EstimateMemory), checked at start
	// beside the machine's memory, before the model is allocated: "12GiB", "512MiB", "8GB" or a
	// number of bytes.
	Memory ByteSize `yaml:"memory"`
}

// validate refuses a limits block that bounds nothing.
func (l *LimitsConfig) validate() error {
	if l.Memory <= 0 {
		return errors.New("limits.memory must be set to a positive size (e.g. 12GiB); remove the limits block for none")
	}
	return nil
}

// ByteSize is a number of bytes, written with a binary (KiB, MiB, GiB, TiB) or decimal (KB, MB,
// GB, TB) unit or none.
type ByteSize int64

var byteUnits = []struct {
	name string
	mult float64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1},
}

// ParseByteSize reads "12GiB", "1.5 GB", "4096" (bytes).
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.TrimSpace(s)
	mult := 1.0
	for _, u := range byteUnits {
		if num, ok := strings.CutSuffix(t, u.name); ok {
			t, mult = strings.TrimSpace(num), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(v) || v < 0 {
		return 0, fmt.Errorf("%q is not a size (e.g. 12GiB, 512MiB, 8GB or bytes)", s)
	}
	b := v * mult
	if b >= math.MaxInt64 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	if b != math.Trunc(b) {
		return 0, fmt.Errorf("%q is not a whole number of bytes", s)
	}
	return ByteSize(b), nil
}

// String is the size in the largest binary unit that keeps it whole.
func (b ByteSize) String() string {
	for _, u := range []struct {
		name  string
		shift uint
	}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}} {
		if b > 0 && b%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d%s", b>>u.shift, u.name)
		}
	}
	return strconv.FormatInt(int64(b), 10)
}

// UnmarshalYAML reads a size with or without a unit.
func (b *ByteSize) UnmarshalYAML(unmarshal func(any) error) error {
	var s string
	if err := unmarshal(&s); err != nil {
		return err
	}
	v, err := ParseByteSize(s)
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// MarshalYAML writes the size as String does, so a saved configuration reads back the same.
func (b ByteSize) MarshalYAML() (any, error) { return b.String(), nil }
