package credential

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
)

// maxFileSize is the largest credential file read: a secret, not a document.
const maxFileSize = 64 << 10

// FileHeader returns a Source whose header name has the value read from the file at path (a
// mounted secret, say), trimmed of surrounding whitespace, with prefix prepended (e.g.
// "Bearer "). The file is stat'ed on each use and read again when its modification time, size
// or identity (inode: an atomic rename, a Kubernetes secret update) changed, so a rotated
// secret is used without a restart; otherwise the value read last is reused.
//
// Header fails if the file cannot be read, is larger than 64 KiB, is empty once trimmed, or
// holds a character a header value cannot (a line break inside it, say); the error names the
// file, not its content. A file that fails is read again on the next use.
func FileHeader(name, path, prefix string) Source {
	return &fileHeader{name: name, path: path, prefix: prefix}
}

// fileHeader is what FileHeader returns.
type fileHeader struct {
	name, path, prefix string

	// mu guards the value read last and the file's state when it was read.
	mu sync.Mutex
	// info is the file's state when value was read; nil until a read succeeded.
	info  os.FileInfo
	value string
}

func (f *fileHeader) Header(context.Context) (string, string, error) {
	now, err := os.Stat(f.path)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		// Forget the value: a file that comes back is read again, whatever its state.
		f.info, f.value = nil, ""
		return "", "", fmt.Errorf("credential file: %w", err)
	}
	if f.info != nil && sameVersion(f.info, now) {
		return f.name, f.value, nil
	}
	info, value, err := f.read()
	if err != nil {
		f.info, f.value = nil, ""
		return "", "", fmt.Errorf("credential file %s: %w", f.path, err)
	}
	f.info, f.value = info, f.prefix+value
	return f.name, f.value, nil
}

// read reads the file and the state it had when opened: a change during the read shows as a
// new state on the next stat.
func (f *fileHeader) read() (os.FileInfo, string, error) {
	file, err := os.Open(f.path)
	if err != nil {
		return nil, "", err
	}
	defer file.Close()
	info, err := file.Stat()
	if err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(io.LimitReader(file, maxFileSize+1))
	if err != nil {
		return nil, "", err
	}
	if len(b) > maxFileSize {
		return nil, "", fmt.Errorf("larger than %d bytes", maxFileSize)
	}
	value := strings.TrimSpace(string(b))
	switch {
	case value == "":
		return nil, "", errors.New("empty")
	case !validValue(value):
		return nil, "", errors.New("holds a character a header value cannot (a line break?)")
	}
	return info, value, nil
}

// sameVersion reports whether a and b describe the same file in the same state.
func sameVersion(a, b os.FileInfo) bool {
	return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}
