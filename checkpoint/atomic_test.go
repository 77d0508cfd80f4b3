package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// failAt makes Save fail at one step, as an I/O error there would; the hook is reset after the test.
func failAt(t *testing.T, step string) {
	t.Helper()
	saveHook = func(s, _ string) error {
		if s == step {
			return errors.New("injected failure at " + s)
		}
		return nil
	}
	t.Cleanup(func() { saveHook = nil })
}

func TestFailedSaveKeepsPreviousCheckpoint(t *testing.T) {
	for _, step := range []string{"weights", "written", "renamed-away"} {
		t.Run(step, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "ckpt")
			old := newModel(t, tinyConfig(true), 1)
			mustSave(t, dir, old, nil)

			failAt(t, step)
			err := Save(dir, newModel(t, tinyConfig(true), 2), testTokenizer(t), nil)
			expectErr(t, err, "injected failure at "+step)

			m, err := LoadModel(dir)
			if err != nil {
				t.Fatalf("previous checkpoint unreadable after a failed Save: %v", err)
			}
			if firstDiff(m.Params.Data, old.Params.Data) >= 0 {
				t.Fatal("previous checkpoint's weights changed by a failed Save")
			}
			if left := siblings(t, dir); len(left) > 0 {
				t.Fatalf("failed Save left %v", left)
			}
		})
	}
}

func TestSaveReplacesOlderCheckpoint(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	mustSave(t, dir, newModel(t, tinyConfig(false), 1), &State{Optimizer: randomState(newModel(t, tinyConfig(false), 1).NumParams(), 1)})
	next := newModel(t, tinyConfig(true), 2) // a different layout: no file of the old one may survive
	mustSave(t, dir, next, nil)
	ck, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if ck.State != nil || firstDiff(ck.Model.Params.Data, next.Params.Data) >= 0 {
		t.Fatal("the replaced checkpoint's files leaked into the new one")
	}
	if left := siblings(t, dir); len(left) > 0 {
		t.Fatalf("Save left %v", left)
	}
}

func TestSaveCleansCrashLeftovers(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "ckpt")
	mustSave(t, dir, newModel(t, tinyConfig(true), 1), nil)
	// A crash mid-write leaves a half-filled temporary folder; one of another checkpoint's
	// names must survive.
	for _, d := range []string{".ckpt.tmp-123", ".other.tmp-9"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, d, weightsFile), []byte("torn"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	next := newModel(t, tinyConfig(true), 2)
	mustSave(t, dir, next, nil)
	if left := siblings(t, dir); len(left) != 1 || left[0] != ".other.tmp-9" {
		t.Fatalf("after Save the folder holds %v, want only .other.tmp-9 besides ckpt", left)
	}
	m, err := LoadModel(dir)
	if err != nil || firstDiff(m.Params.Data, next.Params.Data) >= 0 {
		t.Fatalf("new checkpoint not in place: %v", err)
	}
}

func TestSaveRestoresCheckpointRenamedAwayByACrash(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "ckpt")
	old := newModel(t, tinyConfig(true), 1)
	mustSave(t, dir, old, nil)
	// The state a crash between the two renames leaves: the old checkpoint renamed away, the
	// new one still under its temporary name.
	if err := os.Rename(dir, filepath.Join(root, ".ckpt.old-77")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, ".ckpt.tmp-78"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The next Save fails after writing; the old checkpoint must be back at dir regardless.
	failAt(t, "written")
	expectErr(t, Save(dir, newModel(t, tinyConfig(true), 2), testTokenizer(t), nil), "injected")
	m, err := LoadModel(dir)
	if err != nil {
		t.Fatalf("old checkpoint not restored: %v", err)
	}
	if firstDiff(m.Params.Data, old.Params.Data) >= 0 {
		t.Fatal("restored checkpoint differs from the old one")
	}
	for _, name := range siblings(t, dir) {
		if strings.HasPrefix(name, ".ckpt.") {
			t.Fatalf("leftover %s survived", name)
		}
	}
}
