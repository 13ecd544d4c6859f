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
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/manifold-mcp/manifold/internal/testwait"
)

// DefaultAddr is where the machine's own Redis listens.
const DefaultAddr = "127.0.0.1:6379"

var (
	once    sync.Once
	addr    string
	why     string
	started *exec.Cmd
)

// Main runs m's tests, with go-redis's log of each failed dial silenced (the tests that cut
// Redis off check the errors), stops the Redis started for them, and exits with their code.
func Main(m *testing.M) {
	redis.SetLogger(quietLog{})
	code := m.Run()
	Stop()
	os.Exit(code)
}

type quietLog struct{}

func (quietLog) Printf(context.Context, string, ...any) {}

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
	a, cmd, err := start("--save", "", "--appendonly", "no")
	if err != nil {
		why = "nothing answers at " + DefaultAddr + ", and " + err.Error()
		return
	}
	addr, started = a, cmd
}

// StartServer starts redis-server with args (a config file, --sentinel, …) on a free
// loopback port, waits until it answers PING, and stops it when the test ends; it returns
// its host:port. It skips the test when redis-server is not on PATH.
func StartServer(t testing.TB, args ...string) string {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server is not on PATH")
	}
	a, cmd, err := start(args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return a
}

// start starts redis-server with args on a free loopback port and waits until it answers.
func start(args ...string) (string, *exec.Cmd, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", nil, errors.New("redis-server is not on PATH")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(bin, append(args, "--port", fmt.Sprint(port), "--bind", "127.0.0.1")...)
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("starting redis-server: %w", err)
	}
	a := fmt.Sprintf("127.0.0.1:%d", port)
	if testwait.Within(5*time.Second, func() bool { return ping(a) == nil }) {
		return a, cmd, nil
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	return "", nil, fmt.Errorf("redis-server started on %s but did not answer", a)
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

// Monitor starts MONITOR on addr, on a connection of its own (go-redis's MonitorCmd shares
// a pooled connection), and returns a func that stops it and returns the lines it saw in
// between.
func Monitor(t *testing.T, addr string) func() []string {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 100000)
	done := make(chan struct{})
	go func() {
		defer close(done)
		rd := bufio.NewReader(conn)
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				close(lines)
				return
			}
			lines <- strings.TrimRight(line, "\r\n")
		}
	}()
	echo := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, ReadTimeout: 5 * time.Second})
	// wait reads lines until one shows marker m, sent (again) until MONITOR shows it.
	wait := func(m string) []string {
		var seen []string
		deadline := time.After(5 * time.Second)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		_ = echo.Echo(context.Background(), m).Err()
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					t.Fatal("MONITOR ended")
				}
				if strings.Contains(line, m) {
					return seen
				}
				seen = append(seen, line)
			case <-tick.C:
				_ = echo.Echo(context.Background(), m).Err()
			case <-deadline:
				t.Fatalf("MONITOR did not show %s", m)
			}
		}
	}
	wait(fmt.Sprintf("monitor-begin-%d", time.Now().UnixNano()))
	return func() []string {
		seen := wait(fmt.Sprintf("monitor-end-%d", time.Now().UnixNano()))
		_ = echo.Close()
		_ = conn.Close()
		<-done
		return seen
	}
}
