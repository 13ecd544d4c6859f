package statefile

import "errors"

// ErrLocked is Lock's answer, without waiting, when another holds the lock.
var ErrLocked = errors.New("locked by another")

// ErrNoLocks is Lock's answer on a system without flock(2).
var ErrNoLocks = errors.New("this system has no file locks (flock)")
