package hub

import (
	"path/filepath"
	"strings"
	"testing"
)

func FuzzParseRevisionInfo(f *testing.F) {
	sha := strings.Repeat("a", 40)
	f.Add([]byte(`{"sha":"` + sha + `","siblings":[{"rfilename":"config.json","size":10,"blobId":"` + sha + `"}]}`))
	f.Add([]byte(`{"sha":"` + sha + `","siblings":[{"rfilename":"model.safetensors","size":3,"blobId":"` + sha + `","lfs":{"sha256":"` + strings.Repeat("b", 64) + `","size":3,"pointerSize":134}}]}`))
	f.Add([]byte(`{"sha":"` + sha + `","siblings":[{"rfilename":"../x"}]}`))
	f.Add([]byte(`{"sha":"` + sha + `","siblings":[{"rfilename":"a"},{"rfilename":"a"}]}`))
	f.Add([]byte(`{"sha":"` + sha + `","siblings":[{"rfilename":"a","size":-1}]}`))
	f.Add([]byte(`{"sha":"XYZ"}`))
	f.Add([]byte(`{"siblings":null}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"sha":"` + sha + `","siblings":[{"rfilename":"a","lfs":{"sha256":"zz"}}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		info, err := ParseRevisionInfo(b)
		if err != nil {
			return
		}
		if !commitRE.MatchString(info.Commit) {
			t.Fatalf("commit %q", info.Commit)
		}
		seen := map[string]bool{}
		for _, f := range info.Files {
			if !validFilename(f.Name) || seen[f.Name] {
				t.Fatalf("name %q", f.Name)
			}
			seen[f.Name] = true
			// Every accepted name stays under the snapshot folder.
			p := filepath.Join("/cache/snapshots/c", filepath.FromSlash(f.Name))
			if !strings.HasPrefix(p, "/cache/snapshots/c/") {
				t.Fatalf("%q escapes to %s", f.Name, p)
			}
			if e := f.ETag(); e != "" && !sha1RE.MatchString(e) && !sha256RE.MatchString(e) {
				t.Fatalf("etag %q", e)
			}
			if f.Size < -1 {
				t.Fatalf("size %d", f.Size)
			}
		}
	})
}

func FuzzParseRef(f *testing.F) {
	for _, s := range []string{"hf:org/name", "hf:org/name@main", "hf:org/name@refs/pr/1", "hf:../x", "hf:a/b@../c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRef(s)
		if err != nil {
			return
		}
		p := filepath.Join("/cache", repoFolder(r.Repo), "refs", filepath.FromSlash(r.Revision))
		if !strings.HasPrefix(p, "/cache/models--") || strings.Contains(p, "..") {
			t.Fatalf("%q escapes to %s", s, p)
		}
	})
}
