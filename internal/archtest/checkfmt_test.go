package archtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestFormatCheckWorksWithoutGit runs scripts/checkfmt in a copy of it outside any git work
// tree, as in an unpacked source archive: it must check the .go files it finds (before, gofmt
// was given no file, read its standard input and passed having checked nothing).
func TestFormatCheckWorksWithoutGit(t *testing.T) {
	script, err := os.ReadFile(filepath.Join("..", "..", "scripts", "checkfmt"))
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	write := func(name, text string, mode os.FileMode) {
		t.Helper()
		path := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("scripts/checkfmt", string(script), 0o755)
	write("good/good.go", "package good\n\nfunc F() {}\n", 0o644)
	write(".cache/dep/ignored.go", "package   dep\n", 0o644) // installed things are not ours
	run := func() (string, error) {
		cmd := exec.Command("bash", filepath.Join(root, "scripts", "checkfmt"))
		cmd.Stdin = strings.NewReader("package stdin\n") // gofmt reading stdin would pass on this
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run(); err != nil || !strings.Contains(out, "1 Go files formatted") {
		t.Fatalf("a formatted tree: %v\n%s", err, out)
	}
	write("bad/bad.go", "package   bad\n", 0o644)
	if out, err := run(); err == nil || !strings.Contains(out, "bad.go") {
		t.Fatalf("an unformatted file passed: %v\n%s", err, out)
	}
}
