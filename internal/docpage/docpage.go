// Package docpage keeps a page of the documentation that is generated from the code in
// step with it: a test renders the page and either compares it with the file or, when
// `go generate` runs the test with -write-docs, writes the file.
package docpage

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"testing"
)

var write = flag.Bool("write-docs", false, "rewrite the generated documentation pages instead of comparing them")

// Check fails t when the file at path differs from got, saying to run generate; with
// -write-docs it writes got to path instead.
func Check(t testing.TB, path string, got []byte, generate string) {
	t.Helper()
	if *write {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatalf("writing %s: %v", path, err)
		}
		return
	}
	if err := Compare(path, got); err != nil {
		t.Fatalf("%v: run `%s`", err, generate)
	}
}

// Compare returns an error when the file at path cannot be read or differs from got.
func Compare(path string, got []byte) error {
	want, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading the generated page: %w", err)
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("%s is out of date", path)
	}
	return nil
}
