//go:build !linux

package plugin

import "os/exec"

// setProcAttr does nothing here: only Linux can tie a child's life to its parent's.
func setProcAttr(*exec.Cmd) {}
