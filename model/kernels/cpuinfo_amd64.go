//go:build amd64 && !purego

package kernels

import "strings"

// cpuidCaches reads the deterministic cache parameters: CPUID leaf 4 on Intel, 0x8000001D on
// AMD (and Hygon), one subleaf per cache until a null type.
func cpuidCaches() (CPUInfo, bool) {
	maxLeaf, b, c, d := cpuid(0, 0)
	vendor := string(le32(b)) + string(le32(d)) + string(le32(c))
	leaf := uint32(4)
	switch vendor {
	case "GenuineIntel":
		if maxLeaf < 4 {
			return CPUInfo{}, false
		}
	case "AuthenticAMD", "HygonGenuine":
		if maxExt, _, _, _ := cpuid(0x80000000, 0); maxExt < 0x8000001d {
			return CPUInfo{}, false
		}
		leaf = 0x8000001d
	default:
		return CPUInfo{}, false
	}
	var info CPUInfo
	for sub := uint32(0); sub < 16; sub++ {
		a, b, c, _ := cpuid(leaf, sub)
		typ := a & 0x1f
		if typ == 0 {
			break
		}
		if typ != 1 && typ != 3 { // data or unified
			continue
		}
		level := int(a>>5) & 7
		sharing := int(a>>14)&0xfff + 1
		ways := int(b>>22) + 1
		partitions := int(b>>12)&0x3ff + 1
		line := int(b)&0xfff + 1
		sets := int(c) + 1
		info.set(level, ways*partitions*line*sets, sharing)
	}
	if info.L1D == 0 {
		return CPUInfo{}, false
	}
	info.Source = "cpuid"
	return info, true
}

// cpuidBrand is the processor brand string of CPUID leaves 0x80000002–4.
func cpuidBrand() string {
	if maxExt, _, _, _ := cpuid(0x80000000, 0); maxExt < 0x80000004 {
		return ""
	}
	var s []byte
	for leaf := uint32(0x80000002); leaf <= 0x80000004; leaf++ {
		a, b, c, d := cpuid(leaf, 0)
		for _, r := range []uint32{a, b, c, d} {
			s = append(s, le32(r)...)
		}
	}
	return strings.TrimSpace(strings.TrimRight(string(s), "\x00"))
}

func le32(v uint32) []byte { return []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)} }
