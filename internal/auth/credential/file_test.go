package credential

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// writeSecret writes content to path and sets its modification time to mtime.
func writeSecret(t *testing.T, path, content string, mtime time.Time) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

func TestFileHeaderFollowsRotation(t *testing.T) {
	checkGoroutines(t)
	path := filepath.Join(t.TempDir(), "token")
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	up := newRecorder(t)
	rt := Transport(nil, FileHeader("Authorization", path, "Bearer "))
	send := func() {
		t.Helper()
		if err := up.get(t, rt, nil); err != nil {
			t.Fatal(err)
		}
	}

	writeSecret(t, path, "  first-secret\n", t0)
	send()
	// Same size and modification time: the cached value is used, the file is not read.
	writeSecret(t, path, "  xxxxx-xxxxxx\n", t0)
	send()
	// Rotated: new content and a later mtime.
	writeSecret(t, path, "second-secret-longer\n", t0.Add(time.Hour))
	send()
	// Same size, only the modification time changed.
	writeSecret(t, path, "third--secret-longer\n", t0.Add(2*time.Hour))
	send()
	// Replaced by a rename, same size and mtime as before: another file.
	next := path + ".new"
	writeSecret(t, next, "fourth-secret-longer\n", t0.Add(2*time.Hour))
	if err := os.Rename(next, path); err != nil {
		t.Fatal(err)
	}
	send()

	want := []string{
		"Bearer first-secret",
		"Bearer first-secret",
		"Bearer second-secret-longer",
		"Bearer third--secret-longer",
		"Bearer fourth-secret-longer",
	}
	if diff := cmp.Diff(want, up.authorizations()); diff != "" {
		t.Errorf("Authorization at the upstream (-want +got):\n%s", diff)
	}
}

func TestFileHeaderErrors(t *testing.T) {
	dir := t.TempDir()
	big := strings.Repeat("x", maxFileSize+1)
	tests := []struct {
		name    string
		content *string // nil: no file
		wantIs  error
	}{
		{"missing file", nil, fs.ErrNotExist},
		{"empty file", ptr(" \n\t"), nil},
		{"line break inside", ptr("s3cret\nX-Evil: 1"), nil},
		{"too large", &big, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-"))
			if tt.content != nil {
				writeSecret(t, path, *tt.content, time.Now())
			}
			_, _, err := FileHeader("Authorization", path, "Bearer ").Header(t.Context())
			if err == nil {
				t.Fatal("Header succeeded")
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("error %v does not wrap %v", err, tt.wantIs)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("error %q shows the file's content", err)
			}
		})
	}
}

// TestFileHeaderRecovers: a file that failed (deleted mid-rotation) is read again once it is
// back, and a failure does not leave the old value in use.
func TestFileHeaderRecovers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	src := FileHeader("X-Api-Key", path, "")
	writeSecret(t, path, "key-1", t0)
	if _, v, err := src.Header(t.Context()); err != nil || v != "key-1" {
		t.Fatalf("Header = %q, %v; want key-1", v, err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, _, err := src.Header(t.Context()); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Header of a removed file: %v, want fs.ErrNotExist", err)
	}
	writeSecret(t, path, "key-2", t0)
	if name, v, err := src.Header(t.Context()); err != nil || name != "X-Api-Key" || v != "key-2" {
		t.Fatalf("Header = %q, %q, %v; want X-Api-Key, key-2", name, v, err)
	}
}

func ptr[T any](v T) *T { return &v }
