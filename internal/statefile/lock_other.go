//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package statefile

// Lock is not available where flock(2) is not: it fails with ErrNoLocks.
func Lock(string, bool) (unlock func(), err error) { return nil, ErrNoLocks }
