package config

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzImport checks that parseImport (Import without the file system) never
// panics, returns upstreams or problems, and that what it returns is valid.
func FuzzImport(f *testing.F) {
	paths, err := filepath.Glob(filepath.Join("testdata", "import", "*.json*"))
	if err != nil {
		f.Fatal(err)
	}
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"mcpServers": {"a b": {"command": "x", "env": {"K": "${V:-$$}"}}, "a-b": null}}`))
	f.Add([]byte("{/*\n*/\"servers\":{\"x\":{\"type\":\"sse\",\"url\":\"http://h\",},},}//"))
	f.Add([]byte(`{"servers": {"\u00e9\ud800": {"url": "${env:V}"}}}`))
	f.Add([]byte(`"\`))
	lookup := func(name string) (string, bool) {
		if name == "V" {
			return "http://v.example.com", true
		}
		return "", false
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ups, err := parseImport("fuzz.json", data, lookup)
		if err != nil {
			if ups != nil {
				t.Fatalf("parseImport returned upstreams along with error %v", err)
			}
			var cerr *Error
			if !errors.As(err, &cerr) || len(cerr.Problems) == 0 {
				t.Fatalf("parseImport error = %v, want an *Error with problems", err)
			}
			return
		}
		for _, u := range ups {
			if !validName(u.Name) || checkPrefix(u.Prefix, "") != "" {
				t.Fatalf("upstream with name %q, prefix %q accepted", u.Name, u.Prefix)
			}
			if (u.Command == "") == (u.URL == "") || u.Transport == "" {
				t.Fatalf("upstream %q accepted with command %q, url %q, transport %q", u.Name, u.Command, u.URL, u.Transport)
			}
		}
	})
}
