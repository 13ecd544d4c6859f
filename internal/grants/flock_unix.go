//go:build unix

package grants

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// errLocked: a lock taken without waiting is held by another.
var errLocked = errors.New("locked by another")

// lockFile takes an exclusive flock of path (created, mode 0600, if need be): waiting for
// it if wait, else failing with errLocked when another holds it. The lock goes with the
// returned func, or with the process.
func lockFile(path string, wait bool) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	how := syscall.LOCK_EX
	if !wait {
		how |= syscall.LOCK_NB
	}
	for {
		err = syscall.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, errLocked
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}, nil
}
