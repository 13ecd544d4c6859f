package grants

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// fileBacking returns the backing of Vaults in a state directory of t's own.
func fileBacking(t *testing.T) (backing, string) {
	dir := t.TempDir()
	keys := testKeys(t)
	path := func(p Principal) string { return filepath.Join(dir, "grants", p.Hash()+".json") }
	readFile := func(t *testing.T, p Principal) map[string]any {
		b, err := os.ReadFile(path(p))
		if err != nil {
			t.Fatal(err)
		}
		var f map[string]any
		if err := json.Unmarshal(b, &f); err != nil {
			t.Fatal(err)
		}
		return f
	}
	return backing{
		open: func(t *testing.T, opts *Options) *Vault {
			v, err := NewFileVault(dir, keys, opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = v.Close() })
			return v
		},
		raw: func(t *testing.T, p Principal, upstream string) []byte {
			f := readFile(t, p)
			var b []byte
			raw, _ := json.Marshal(f["grants"].(map[string]any)[upstream])
			if err := json.Unmarshal(raw, &b); err != nil {
				t.Fatal(err)
			}
			return b
		},
		setRaw: func(t *testing.T, p Principal, upstream string, v []byte) {
			f := readFile(t, p)
			f["grants"].(map[string]any)[upstream] = v
			b, _ := json.Marshal(f)
			if err := os.WriteFile(path(p), b, 0o600); err != nil {
				t.Fatal(err)
			}
		},
		everything: func(t *testing.T) [][]byte {
			var out [][]byte
			err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				b, err := os.ReadFile(p)
				out = append(out, []byte(p), b)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			return out
		},
	}, dir
}

func TestFileVault(t *testing.T) {
	runContract(t, func(t *testing.T) backing { b, _ := fileBacking(t); return b })
}

// TestFileModes: the grants' directory is 0700 and their files 0600, and no temporary file
// is left behind.
func TestFileModes(t *testing.T) {
	b, dir := fileBacking(t)
	v := b.open(t, nil)
	if err := v.Put(context.Background(), grant(alice, "github", time.Hour)); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, "grants"))
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("directory: %v, %v; want mode 0700", st.Mode(), err)
	}
	entries, err := os.ReadDir(filepath.Join(dir, "grants"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
		info, err := e.Info()
		if err != nil || info.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, %v; want mode 0600", e.Name(), info.Mode(), err)
		}
	}
	if want := []string{alice.Hash() + ".json", alice.Hash() + ".lock"}; fmt.Sprint(names) != fmt.Sprint(want) {
		t.Errorf("files %q, want %q", names, want)
	}
}

// TestFileConcurrentWriters: processes that share the state directory (here: Vaults that
// each open its files) lose no write of one principal's file to another's.
func TestFileConcurrentWriters(t *testing.T) {
	b, _ := fileBacking(t)
	ctx := context.Background()
	vaults := []*Vault{b.open(t, nil), b.open(t, nil), b.open(t, nil)}
	const n = 30
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { errs[i] = vaults[i%len(vaults)].Put(ctx, grant(alice, fmt.Sprintf("up%02d", i), time.Hour)) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Put %d: %v", i, err)
		}
	}
	list, err := vaults[0].List(ctx, alice)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != n {
		t.Errorf("%d grants stored of %d put", len(list), n)
	}
}

// TestFileCorrupt: a file that is not a grants file is reported with what to do.
func TestFileCorrupt(t *testing.T) {
	b, dir := fileBacking(t)
	v := b.open(t, nil)
	ctx := context.Background()
	if err := v.Put(ctx, grant(alice, "github", time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "grants", alice.Hash()+".json"), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := v.Get(ctx, alice, "github")
	if !errors.Is(err, errCorrupt) {
		t.Fatalf("Get of a corrupt file: %v, want errCorrupt", err)
	}
	t.Logf("the error says: %v", err)
	if all, _, err := v.ListAll(ctx, "", 0); err != nil || len(all) != 1 || !all[0].Unreadable {
		t.Errorf("ListAll with a corrupt file = %v, %v; want it listed unreadable", all, err)
	}
}

// TestFileConcurrentProcesses: gateway processes that share the state directory lose no
// write: each of several processes (this test binary, run again as a child) puts grants of
// one principal at once.
func TestFileConcurrentProcesses(t *testing.T) {
	dir := t.TempDir()
	const procs, each = 3, 10
	cmds := make([]*exec.Cmd, procs)
	for i := range cmds {
		cmd := exec.Command(os.Args[0], "-test.run=^TestFileChildProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), "GRANTS_CHILD_DIR="+dir, fmt.Sprintf("GRANTS_CHILD_ID=%d", i), fmt.Sprintf("GRANTS_CHILD_EACH=%d", each))
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[i] = cmd
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("process %d: %v", i, err)
		}
	}
	v, err := NewFileVault(dir, testKeys(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	list, err := v.List(context.Background(), alice)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != procs*each {
		t.Errorf("%d grants stored of %d put by %d processes", len(list), procs*each, procs)
	}
}

// TestFileChildProcess is a process of TestFileConcurrentProcesses; it does nothing when
// run otherwise.
func TestFileChildProcess(t *testing.T) {
	dir := os.Getenv("GRANTS_CHILD_DIR")
	if dir == "" {
		t.Skip("a child process of TestFileConcurrentProcesses")
	}
	var id, each int
	fmt.Sscan(os.Getenv("GRANTS_CHILD_ID"), &id)
	fmt.Sscan(os.Getenv("GRANTS_CHILD_EACH"), &each)
	v, err := NewFileVault(dir, testKeys(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	for j := range each {
		if err := v.Put(context.Background(), grant(alice, fmt.Sprintf("p%d-up%02d", id, j), time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
}
