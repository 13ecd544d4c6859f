package audit_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/manifold-mcp/manifold/internal/audit"
)

func TestOpenSinkOffAndStdout(t *testing.T) {
	w, err := audit.OpenSink("off", "")
	if w != nil || err != nil {
		t.Errorf(`OpenSink("off") = %v, %v; want nil, nil`, w, err)
	}

	w, err = audit.OpenSink("stdout", "ignored")
	if err != nil || w == nil {
		t.Fatalf(`OpenSink("stdout") = %v, %v; want a writer`, w, err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := os.Stdout.Stat(); err != nil {
		t.Errorf("stdout after closing the sink: %v; want it still open", err)
	}
}

// TestOpenSinkFile checks that the file sink creates its file readable by its owner only,
// and appends to it when opened again.
func TestOpenSinkFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	for _, line := range []string{"first\n", "second\n"} {
		w, err := audit.OpenSink("file", path)
		if err != nil {
			t.Fatalf("OpenSink: %v", err)
		}
		if _, err := w.Write([]byte(line)); err != nil {
			t.Fatalf("Write: %v", err)
		}
		if err := w.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(data), "first\nsecond\n"; got != want {
		t.Errorf("file holds %q, want %q", got, want)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := info.Mode().Perm(); got != 0o600 {
		t.Errorf("file mode = %v, want -rw-------", got)
	}
}

func TestOpenSinkFileKeepsTheModeOfAnExistingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o640); err != nil { // as an operator may set it for a log reader
		t.Fatal(err)
	}
	w, err := audit.OpenSink("file", path)
	if err != nil {
		t.Fatalf("OpenSink: %v", err)
	}
	w.Close()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := info.Mode().Perm(); got != 0o640 {
		t.Errorf("file mode = %v, want -rw-r----- as it was", got)
	}
}

func TestOpenSinkErrors(t *testing.T) {
	missingDir := filepath.Join(t.TempDir(), "absent", "audit.log")
	tests := []struct {
		name       string
		sink, path string
		is         error // what the error must match, if anything
	}{
		{"file without a path", "file", "", nil},
		{"file in a missing directory", "file", missingDir, fs.ErrNotExist},
		{"unknown sink", "syslog", "", nil},
		{"sink names are lower case", "Stdout", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := audit.OpenSink(tt.sink, tt.path)
			if err == nil {
				w.Close()
				t.Fatalf("OpenSink(%q, %q) succeeded, want an error", tt.sink, tt.path)
			}
			if w != nil {
				t.Errorf("OpenSink returned a writer with its error")
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("OpenSink error = %v, want one matching %v", err, tt.is)
			}
			t.Log(err) // for the reader of -v: the messages say what to do
		})
	}
}
