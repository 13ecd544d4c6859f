// Package testredis gives tests a real Redis server: the one this machine runs at
// 127.0.0.1:6379 when it answers, else a redis-server started on a free port for the test
// binary, else the test is skipped with a loud message — or fails, when MANIFOLD_REDIS is
// "require" (scripts/test sets it), so that CI never passes without running it. Each test gets
// its own key prefix, whose keys are deleted when it ends.
package testredis

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultAddr is where the machine's own Redis listens.
const DefaultAddr = "127.0.0.1:6379"

var (
	once    sync.Once
	addr    string
	why     string
	started *exec.Cmd
)

// Addr returns the host:port of a Redis server for the test.
func Addr(t testing.TB) string {
	t.Helper()
	once.Do(find)
	if addr == "" {
		if os.Getenv("MANIFOLD_REDIS") == "require" {
			t.Fatalf("NO REDIS for this test: %s", why)
		}
		t.Skipf("SKIPPED, NO REDIS: %s (start redis-server, or install it)", why)
	}
	return addr
}

// find looks for a Redis that answers, and starts one if none does.
func find() {
	if ping(DefaultAddr) == nil {
		addr = DefaultAddr
		return
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		why = "nothing answers at " + DefaultAddr + " and redis-server is not on PATH"
		return
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		why = err.Error()
		return
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(bin, "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		why = "starting redis-server: " + err.Error()
		return
	}
	a := fmt.Sprintf("127.0.0.1:%d", port)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if ping(a) == nil {
			addr, started = a, cmd
			return
		}
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	why = "redis-server started on " + a + " but did not answer"
}

// Stop stops a redis-server this package started; for TestMain, after the tests.
func Stop() {
	if started != nil {
		_ = started.Process.Kill()
		_ = started.Wait()
		started = nil
	}
}

// ping sends PING to addr over plain RESP.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

// Prefix returns a key prefix of its own for the test, and deletes the keys under it when the
// test ends.
func Prefix(t testing.TB, addr string) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "mftest-" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		if n, err := DeleteKeys(addr, prefix); err != nil {
			t.Errorf("deleting the test's %d Redis keys under %s: %v", n, prefix, err)
		}
	})
	return prefix
}

// Keys returns the keys under prefix.
func Keys(addr, prefix string) ([]string, error) {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	var keys []string
	iter := c.Scan(context.Background(), 0, prefix+"*", 1000).Iterator()
	for iter.Next(context.Background()) {
		keys = append(keys, iter.Val())
	}
	return keys, iter.Err()
}

// DeleteKeys deletes the keys under prefix and returns how many there were.
func DeleteKeys(addr, prefix string) (int, error) {
	keys, err := Keys(addr, prefix)
	if err != nil || len(keys) == 0 {
		return len(keys), err
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	return len(keys), c.Del(context.Background(), keys...).Err()
}
