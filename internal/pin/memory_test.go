package pin

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestMemoryReopen: pins, changes and decisions survive reopening the file.
func TestMemoryReopen(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "state", "pins")
	file := filepath.Join(dir, "pins.json")
	v1 := newVersion(t, `{"name": "a", "description": "<b>bold</b> & \u2028"}`)
	v2 := newVersion(t, `{"name": "a", "description": "changed"}`)
	v3 := newVersion(t, `{"name": "b"}`)

	s := openFileStore(t, file)
	for i, o := range []struct {
		tool string
		v    version
	}{{"a", v1}, {"a", v2}, {"b", v3}, {"c", v1}, {"c", v3}} {
		if _, _, err := s.Observe(ctx, "up", o.tool, o.v.def, current, tick(i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Reject(ctx, "up", "a", v2.h, "bob", tick(5)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Accept(ctx, "up", "c", v3.h, "alice", tick(6)); err != nil {
		t.Fatal(err)
	}
	want, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}

	got, err := openFileStore(t, file).List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pins after reopening mismatch (-before +after):\n%s", diff)
	}

	for path, mode := range map[string]os.FileMode{dir: 0o700 | os.ModeDir, file: 0o600} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != mode {
			t.Errorf("mode of %s = %v, want %v", path, fi.Mode(), mode)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("the directory holds %d files, want pins.json alone (temporary files left?)", len(entries))
	}
}

// TestMemoryMissingFile: a file that does not exist yet is an empty store, and none is
// written until something is pinned.
func TestMemoryMissingFile(t *testing.T) {
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "pins.json")
	s := openFileStore(t, file)
	if list, err := s.List(ctx); err != nil || len(list) != 0 {
		t.Fatalf("List = %v, %v; want none", list, err)
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("Stat of the file before any pin = %v, want not found", err)
	}
}

// TestMemoryFileForm: the file is the pins, one a line, ordered.
func TestMemoryFileForm(t *testing.T) {
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "pins.json")
	s := openFileStore(t, file)
	v := newVersion(t, `{"name": "a"}`)
	for _, tool := range []string{"b", "a"} {
		if _, _, err := s.Observe(ctx, "up", tool, v.def, current, t0); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	pinLine := func(tool string) string {
		return `{"upstream":"up","tool":"` + tool + `","hash":"` + v.h + `","scheme":{"version":2},"definition":{"name":"a"},"pinned":"2026-03-01T12:00:00Z"}`
	}
	want := "{\"pins\": [\n  " + pinLine("a") + ",\n  " + pinLine("b") + "\n]}\n"
	if string(data) != want {
		t.Errorf("file =\n%s\nwant\n%s", data, want)
	}
}

// TestMemoryCorruptFile: a file that cannot be read as pins is an error that names the file
// and says what to do.
func TestMemoryCorruptFile(t *testing.T) {
	v := newVersion(t, `{"name": "a"}`)
	pin := `{"upstream":"up","tool":"a","hash":"` + v.h + `","definition":{"name":"a"},"pinned":"2026-03-01T12:00:00Z"}`
	tests := []struct {
		name, data string
	}{
		{"not JSON", `{"pins": [`},
		{"truncated to nothing", ``},
		{"not pins", `{"pins": {"a": 1}}`},
		{"a pin without hash", `{"pins": [{"upstream": "up", "tool": "a", "definition": {}}]}`},
		{"a pin twice", `{"pins": [` + pin + `,` + pin + `]}`},
		{"an upstream with NUL", `{"pins": [{"upstream": "u\u0000p", "tool": "a", "hash": "sha256:00", "definition": {}}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "pins.json")
			if err := os.WriteFile(file, []byte(tt.data), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := NewMemoryStore(file)
			if err == nil {
				t.Fatal("NewMemoryStore of a corrupt file succeeded")
			}
			if !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "move it away") {
				t.Errorf("error %q does not name the file %s and say to move it away", err, file)
			}
		})
	}
	t.Run("a good file", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "pins.json")
		if err := os.WriteFile(file, []byte(`{"pins": [`+pin+`]}`), 0o600); err != nil {
			t.Fatal(err)
		}
		list, err := openFileStore(t, file).List(context.Background())
		if err != nil || len(list) != 1 || list[0].Hash != v.h {
			t.Errorf("List = %+v, %v; want the file's one pin", list, err)
		}
	})
}

// TestMemoryUnreadableFile: a file that cannot be read is an error naming it.
func TestMemoryUnreadableFile(t *testing.T) {
	dir := t.TempDir() // a directory is no file to read
	if _, err := NewMemoryStore(dir); err == nil || !strings.Contains(err.Error(), dir) {
		t.Errorf("NewMemoryStore of a directory = %v, want an error naming it", err)
	}
}

// TestMemorySaveFails: a save that fails is the error of the call that changed the pin,
// which stays changed in memory; the next call saves again.
func TestMemorySaveFails(t *testing.T) {
	ctx := context.Background()
	parent := t.TempDir()
	dir := filepath.Join(parent, "sub")
	file := filepath.Join(dir, "pins.json")
	s := openFileStore(t, file)
	// A file where the directory should be: no one, not even root, can create it.
	if err := os.WriteFile(dir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	v := newVersion(t, `{"name": "a"}`)
	p, changed, err := s.Observe(ctx, "up", "a", v.def, current, t0)
	if err == nil {
		t.Fatal("Observe succeeded with an unwritable directory")
	}
	if !strings.Contains(err.Error(), file) {
		t.Errorf("error %q does not name the file %s", err, file)
	}
	if !changed || p.Hash != v.h {
		t.Errorf("Observe = %+v, changed %v; want the new pin, changed", p, changed)
	}
	if list, err := s.List(ctx); err != nil || len(list) != 1 {
		t.Errorf("List = %v, %v; want the pin kept in memory", list, err)
	}

	// Once the directory can be made, the next observation saves, though it changes nothing.
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if _, changed, err := s.Observe(ctx, "up", "a", v.def, current, tick(1)); err != nil || changed {
		t.Fatalf("Observe again = changed %v, %v; want no change and no error", changed, err)
	}
	list, err := openFileStore(t, file).List(ctx)
	if err != nil || len(list) != 1 || list[0].Hash != v.h {
		t.Errorf("List after reopening = %+v, %v; want the pin saved", list, err)
	}
}

// TestMemoryReadOnlyDir: a directory the gateway may not write to fails the save.
func TestMemoryReadOnlyDir(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root writes to read-only directories; TestMemorySaveFails covers the failure")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(dir, 0o700) })
	file := filepath.Join(dir, "pins.json")
	s := openFileStore(t, file)
	v := newVersion(t, `{"name": "a"}`)
	if _, _, err := s.Observe(context.Background(), "up", "a", json.RawMessage(v.def), current, t0); err == nil || !strings.Contains(err.Error(), file) {
		t.Errorf("Observe = %v, want an error naming %s", err, file)
	}
}

// TestMemorySharedFile: two stores on one file, as two gateway processes on one state_dir,
// pinning side by side, lose none of each other's pins, and each sees what the other decided.
func TestMemorySharedFile(t *testing.T) {
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "state", "pins.json")
	stores := []*MemoryStore{openFileStore(t, file), openFileStore(t, file)}
	const perStore = 20
	var wg sync.WaitGroup
	errs := make([]error, len(stores))
	for i, s := range stores {
		wg.Go(func() {
			for n := range perStore {
				tool := fmt.Sprintf("t%d_%d", i, n)
				v := newVersion(t, fmt.Sprintf(`{"name": %q}`, tool))
				if _, _, err := s.Observe(ctx, "up", tool, v.def, current, t0); err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("store %d: Observe: %v", i, err)
		}
	}
	list, err := openFileStore(t, file).List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != len(stores)*perStore {
		t.Errorf("the file holds %d pins, want %d: a store wrote over the other's", len(list), len(stores)*perStore)
	}

	// A change one store records and the other accepts is accepted for both.
	changed := newVersion(t, `{"name": "t0_0", "description": "changed"}`)
	p, _, err := stores[0].Observe(ctx, "up", "t0_0", changed.def, current, tick(1))
	if err != nil || !p.Pending() {
		t.Fatalf("Observe of a changed definition = %+v, %v; want a pending change", p, err)
	}
	if _, err := stores[1].Accept(ctx, "up", "t0_0", changed.h, "alice", tick(2)); err != nil {
		t.Fatalf("Accept in the other store: %v", err)
	}
	list, err = stores[0].List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, p := range list {
		if p.Tool == "t0_0" {
			seen++
			if p.Hash != changed.h || p.By != "alice" {
				t.Errorf("the first store's pin = %+v, want the change accepted by alice", p)
			}
		}
	}
	if seen != 1 {
		t.Errorf("the first store lists t0_0 %d times, want once", seen)
	}
}

// TestMemoryFailedSaveKeepsOthersDecisions: a store whose save failed once re-read the shared
// file no more, and its next save wrote all its pins over it, undoing what another process
// decided meanwhile. Now it merges: the file's pins for the tools it did not change since its
// last good save, its own for those it did.
func TestMemoryFailedSaveKeepsOthersDecisions(t *testing.T) {
	ctx := context.Background()
	parent := t.TempDir()
	dir := filepath.Join(parent, "pins")
	file := filepath.Join(dir, "pins.json")
	a, b := openFileStore(t, file), openFileStore(t, file)
	v1 := map[string]version{}
	v2 := map[string]version{}
	for _, tool := range []string{"accepted", "rejected", "mine", "gone"} {
		v1[tool] = newVersion(t, fmt.Sprintf(`{"name": %q}`, tool))
		v2[tool] = newVersion(t, fmt.Sprintf(`{"name": %q, "description": "changed"}`, tool))
		if _, _, err := a.Observe(ctx, "up", tool, v1[tool].def, current, t0); err != nil {
			t.Fatal(err)
		}
	}
	// Two changes for the other store to decide on.
	for _, tool := range []string{"accepted", "rejected"} {
		if p, _, err := a.Observe(ctx, "up", tool, v2[tool].def, current, tick(1)); err != nil || !p.Pending() {
			t.Fatalf("Observe %s changed = %+v, %v; want a pending change", tool, p, err)
		}
	}

	// The directory goes away for a moment (a file in its place: no one, not even root, can
	// lock or write there): a's changes stay in its memory only.
	away := filepath.Join(parent, "away")
	if err := os.Rename(dir, away); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if p, _, err := a.Observe(ctx, "up", "mine", v2["mine"].def, current, tick(2)); err == nil || !p.Pending() {
		t.Fatalf("Observe with the directory gone = %+v, %v; want the change in memory and an error", p, err)
	}
	if _, err := a.Sweep(ctx, "up", []string{"accepted", "rejected", "mine"}, tick(2), 0); err == nil {
		t.Fatal("Sweep with the directory gone succeeded")
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(away, dir); err != nil {
		t.Fatal(err)
	}

	// Another process decides on the changes a had saved.
	if _, err := b.Accept(ctx, "up", "accepted", v2["accepted"].h, "alice", tick(3)); err != nil {
		t.Fatalf("Accept: %v", err)
	}
	if _, err := b.Reject(ctx, "up", "rejected", v2["rejected"].h, "bob", tick(3)); err != nil {
		t.Fatalf("Reject: %v", err)
	}

	// a's next operation saves; a and the file then have both stores' decisions.
	if _, _, err := a.Observe(ctx, "up", "accepted", v2["accepted"].def, current, tick(4)); err != nil {
		t.Fatalf("Observe once the directory is back: %v", err)
	}
	for name, s := range map[string]*MemoryStore{"the store whose save failed": a, "the file": openFileStore(t, file)} {
		list, err := s.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]Pin{}
		for _, p := range list {
			got[p.Tool] = p
		}
		if p := got["accepted"]; p.Hash != v2["accepted"].h || p.By != "alice" || p.Change != nil {
			t.Errorf("%s: accepted = %+v; want the change alice accepted", name, p)
		}
		if p := got["rejected"]; p.Hash != v1["rejected"].h || p.Change == nil || !p.Change.Rejected || p.Change.By != "bob" {
			t.Errorf("%s: rejected = %+v; want the change bob rejected", name, p)
		}
		if p := got["mine"]; !p.Pending() || p.Change.Hash != v2["mine"].h {
			t.Errorf("%s: mine = %+v; want the change observed while the directory was gone", name, p)
		}
		if p := got["gone"]; !p.Missing.Equal(tick(2)) {
			t.Errorf("%s: gone = %+v; want it missing since the sweep while the directory was gone", name, p)
		}
	}
}
