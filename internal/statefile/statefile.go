// Package statefile writes the files the gateway keeps in its state directory so that a
// crash never leaves half of one: WriteAtomic replaces a file whole or not at all; and Lock
// keeps the processes that share the directory from writing over each other.
package statefile

import (
	"os"
	"path/filepath"
)

// WriteAtomic replaces the file path with data (mode 0600), creating its directory (mode
// 0700) if need be: it writes a temporary file beside it, syncs it and renames it over path,
// then syncs the directory, so that a crash leaves the old file or the new. Writers of one
// file must exclude each other themselves; readers need no lock.
func WriteAtomic(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	if err := f.Chmod(0o600); err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	// The rename is durable once the directory is synced. Some file systems cannot sync a
	// directory; the file itself is in place either way.
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}
