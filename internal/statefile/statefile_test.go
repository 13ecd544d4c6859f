package statefile

import (
	"os"
	"path/filepath"
	"testing"
)

// TestWriteAtomic: the file is created with its directory, replaced whole, private to the
// gateway's user, and no temporary file is left beside it.
func TestWriteAtomic(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	path := filepath.Join(dir, "f.json")
	for _, data := range []string{"first", "second, longer"} {
		if err := WriteAtomic(path, []byte(data)); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != data {
			t.Errorf("read %q, %v; want %q", got, err, data)
		}
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("directory: %v, %v; want mode 0700", st.Mode(), err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("file: %v, %v; want mode 0600", st.Mode(), err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 {
		t.Errorf("directory holds %v, %v; want the file alone", entries, err)
	}
	if err := WriteAtomic(filepath.Join(path, "under-a-file"), nil); err == nil {
		t.Error("writing under a file succeeded")
	}
}
