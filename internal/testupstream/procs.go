package testupstream

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
)

// EnvRun names the environment variable that marks every process a test run starts, so that
// Leftovers can find them, grandchildren included.
const EnvRun = "MANIFOLD_TEST_RUN"

// Leftovers returns the ids of live processes (zombies included) whose environment carries
// EnvRun=marker. It reads /proc; elsewhere it finds nothing.
func Leftovers(marker string) []int {
	want := []byte(EnvRun + "=" + marker)
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var pids []int
	self := os.Getpid()
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil || pid == self {
			continue
		}
		// A zombie has no environment left; count it when it is this process's child.
		if stat, err := os.ReadFile(filepath.Join(d, "stat")); err == nil && isZombieChildOf(stat, self) {
			pids = append(pids, pid)
			continue
		}
		env, err := os.ReadFile(filepath.Join(d, "environ"))
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if bytes.Equal(kv, want) {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// isZombieChildOf reads a /proc/PID/stat line: "pid (comm) state ppid …".
func isZombieChildOf(stat []byte, parent int) bool {
	end := bytes.LastIndexByte(stat, ')')
	if end < 0 {
		return false
	}
	fields := bytes.Fields(stat[end+1:])
	return len(fields) >= 2 && string(fields[0]) == "Z" && string(fields[1]) == strconv.Itoa(parent)
}
