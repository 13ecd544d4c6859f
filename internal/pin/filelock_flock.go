//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package pin

import (
	"fmt"
	"os"
	"syscall"
)

// lockDir takes an exclusive lock on the directory dir (made, mode 0700, if need be), waiting
// while another process or store holds it; unlock releases it. The lock is flock(2)'s:
// advisory, held by the open directory, released by the system if the process dies. Locking
// the directory, not the file, leaves no file of its own, and holds across the rename that
// replaces the file.
func lockDir(dir string) (unlock func(), err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	for {
		err = syscall.Flock(int(d.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return func() {
		_ = syscall.Flock(int(d.Fd()), syscall.LOCK_UN)
		_ = d.Close()
	}, nil
}
