package plugin

import (
	"os/exec"
	"syscall"
)

// setProcAttr makes the kernel kill the plugin when the gateway dies without stopping it (a
// SIGKILL, a crash), so that no plugin outlives its gateway.
//
// The signal is tied to the OS thread that started the process: it also fires if that thread
// exits first, which the Go runtime does only for a goroutine that locked its thread and
// returned (https://go.dev/issue/27505); the supervisor would then restart the plugin.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
