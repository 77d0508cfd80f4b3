package config

import (
	"strings"
	"testing"
)

func TestParseByteSize(t *testing.T) {
	for s, want := range map[string]ByteSize{
		"12GiB": 12 << 30, "512MiB": 512 << 20, "1.5GiB": 3 << 29, "8GB": 8e9, "4096": 4096, "4096B": 4096, " 2 TiB ": 2 << 40, "1KB": 1000,
	} {
		got, err := ParseByteSize(s)
		if err != nil || got != want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "GiB", "-1GiB", "twelve", "1.5B", "NaN", "1e30TiB", "12 GiBs"} {
		if got, err := ParseByteSize(s); err == nil {
			t.Errorf("ParseByteSize(%q) = %d; want an error", s, got)
		}
	}
	for _, b := range []ByteSize{12 << 30, 512 << 20, 3 << 29, 4097, 8e9} {
		if got, err := ParseByteSize(b.String()); err != nil || got != b {
			t.Errorf("%d prints as %q, which reads back as %d, %v", b, b, got, err)
		}
	}
}

// limits.memory is read from a file and from --set, survives a save and load, and a limits
// block without it is refused.
func TestLimitsMemory(t *testing.T) {
	c, err := Preset("calc")
	if err != nil {
		t.Fatal(err)
	}
	c, err = Override(c, []string{"limits={memory: 12GiB}"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Limits == nil || c.Limits.Memory != 12<<30 {
		t.Fatalf("limits %+v", c.Limits)
	}
	data, err := Encode(c)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "memory: 12GiB") {
		t.Fatalf("saved as:\n%s", data)
	}
	back, err := Decode(data)
	if err != nil || back.Limits == nil || back.Limits.Memory != 12<<30 {
		t.Fatalf("read back as %+v, %v", back.Limits, err)
	}
	for text, want := range map[string]ByteSize{"limits:\n  memory: 4096\n": 4096, "limits:\n  memory: 1.5 GiB\n": 3 << 29} {
		d, err := Decode([]byte(strings.Replace(string(data), "limits:\n  memory: 12GiB\n", text, 1)))
		if err != nil || d.Limits == nil || d.Limits.Memory != want {
			t.Errorf("%q: %+v, %v", text, d.Limits, err)
		}
	}
	if _, err := Decode([]byte(strings.Replace(string(data), "memory: 12GiB", "memory: lots", 1))); err == nil || !strings.Contains(err.Error(), `"lots" is not a size`) {
		t.Errorf("memory: lots: %v", err)
	}
	empty, err := Override(c, []string{"limits={}"})
	if err != nil {
		t.Fatal(err)
	}
	if err := empty.Validate(nil); err == nil || !strings.Contains(err.Error(), "limits.memory must be set") {
		t.Errorf("limits: {}: %v", err)
	}
}

// ParseByteSize never panics, and what it reads prints as a size that reads back the same.
func FuzzParseByteSize(f *testing.F) {
	for _, s := range []string{"12GiB", "1.5 GB", "4096", "", "-1", "1e400", "0.5B", "9223372036854775807", "8TiB", "NaNGiB", "0x10MiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := ParseByteSize(s)
		if err != nil {
			return
		}
		if b < 0 {
			t.Fatalf("%q read as %d", s, b)
		}
		if back, err := ParseByteSize(b.String()); err != nil || back != b {
			t.Fatalf("%q read as %d, printed %q, read back as %d, %v", s, b, b, back, err)
		}
	})
}
