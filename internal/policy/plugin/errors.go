package plugin

import (
	"errors"
	"fmt"
)

// ErrNotRunning is the cause of a PluginError for a call to a plugin whose process is down:
// it crashed and is being restarted, or the Host is closed.
var ErrNotRunning = errors.New("the plugin is not running")

// PluginError says why a plugin gave no usable answer to one call: it was not running, did
// not answer within its Timeout (Err wraps context.DeadlineExceeded), returned an error, or
// answered something invalid. Its text may hold internals: it is for logs and audit, and the
// client is told only that the plugin is unavailable (Result.Reason).
type PluginError struct {
	// Plugin is the plugin's Spec.Name.
	Plugin string
	// Err is the cause.
	Err error
}

func (e *PluginError) Error() string { return fmt.Sprintf("policy plugin %s: %v", e.Plugin, e.Err) }

func (e *PluginError) Unwrap() error { return e.Err }

// ChecksumError reports that a plugin's executable is not the one its Spec names: its SHA-256
// checksum differs from Spec.SHA256. The plugin is not started.
type ChecksumError struct {
	// Plugin is the plugin's Spec.Name, and Path its executable.
	Plugin, Path string
	// Want is the checksum in the Spec, and Got the executable's, both in lowercase hex.
	Want, Got string
}

func (e *ChecksumError) Error() string {
	return fmt.Sprintf("policy plugin %s: executable %s has sha256 %s, but the configuration expects %s", e.Plugin, e.Path, e.Got, e.Want)
}

// unavailableReason is what the client is told when plugin fails closed: its name and no
// more.
func unavailableReason(plugin string) string {
	return fmt.Sprintf("the policy plugin %q is unavailable; try again later", plugin)
}
