//go:build !unix

package grants

import "errors"

var errLocked = errors.New("locked by another")

// lockFile is not available here: the file vault needs flock.
func lockFile(string, bool) (func(), error) {
	return nil, errors.New("grants in files need a unix system (flock): use Redis")
}
