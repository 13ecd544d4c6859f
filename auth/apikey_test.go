package auth_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/manifold-mcp/manifold/auth"
)

func TestNewAPIKey(t *testing.T) {
	key, hash, err := auth.NewAPIKey()
	if err != nil {
		t.Fatal(err)
	}
	rest, ok := strings.CutPrefix(key, auth.APIKeyPrefix)
	if !ok {
		t.Fatalf("key %q lacks the prefix %q", key, auth.APIKeyPrefix)
	}
	raw, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil || len(raw) != 32 {
		t.Errorf("key body is not 32 bytes of unpadded base64url: %d bytes, %v", len(raw), err)
	}
	if hash != auth.HashAPIKey(key) {
		t.Errorf("hash %q != HashAPIKey(key) %q", hash, auth.HashAPIKey(key))
	}
	sum := sha256.Sum256([]byte(key))
	if want := "sha256:" + hex.EncodeToString(sum[:]); hash != want {
		t.Errorf("hash = %q, want %q", hash, want)
	}
	other, _, err := auth.NewAPIKey()
	if err != nil {
		t.Fatal(err)
	}
	if other == key {
		t.Error("two calls returned the same key")
	}
}

func TestHashAPIKey(t *testing.T) {
	// sha256("test"), a well-known vector.
	const want = "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	if got := auth.HashAPIKey("test"); got != want {
		t.Errorf("HashAPIKey(test) = %q, want %q", got, want)
	}
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadAPIKeys(t *testing.T) {
	h1, h2 := auth.HashAPIKey("mfk_one"), auth.HashAPIKey("mfk_two")
	want := []auth.APIKey{
		{Name: "ci", Hash: h1, Email: "ci@example.com", Groups: []string{"bots"}, Roles: []string{"runner"}, Scopes: []string{"tools.read", "tools.call"}},
		{Name: "ops", Hash: h2},
	}
	tests := []struct {
		name, file, content string
	}{
		{"yaml", "keys.yaml", `
- name: ci
  hash: ` + h1 + `
  email: ci@example.com
  groups: [bots]
  roles:
    - runner
  scopes: [tools.read, tools.call]
- name: ops
  hash: ` + h2 + `
`},
		{"json", "keys.json", `[
  {"name": "ci", "hash": "` + h1 + `", "email": "ci@example.com", "groups": ["bots"], "roles": ["runner"], "scopes": ["tools.read", "tools.call"]},
  {"name": "ops", "hash": "` + h2 + `"}
]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := auth.LoadAPIKeys(writeFile(t, tt.file, tt.content))
			if err != nil {
				t.Fatalf("LoadAPIKeys: %v", err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("keys (-want +got):\n%s", diff)
			}
			if _, err := auth.New(auth.Config{APIKeys: got}); err != nil {
				t.Errorf("New with the loaded keys: %v", err)
			}
		})
	}

	t.Run("empty", func(t *testing.T) {
		got, err := auth.LoadAPIKeys(writeFile(t, "keys.yaml", "\n# no keys yet\n"))
		if err != nil || len(got) != 0 {
			t.Errorf("LoadAPIKeys = %v, %v; want no keys, no error", got, err)
		}
	})
}

func TestLoadAPIKeysErrors(t *testing.T) {
	good := auth.HashAPIKey("mfk_one")
	tests := []struct {
		name    string
		content string
		want    []string // each must appear after the file path
	}{
		{"not a list", "name: ci\nhash: " + good + "\n",
			[]string{":1: want a list of API keys"}},
		{"entry not a mapping", "- ci\n",
			[]string{":1: entry 0: want a mapping"}},
		{"unknown field", "- name: ci\n  hash: " + good + "\n  scope: [x]\n",
			[]string{`:1: entry 0: unknown field "scope"`}},
		{"bad hash", "- name: ci\n  hash: " + good + "\n- name: ops\n  hash: sha256:abc\n",
			[]string{`:3: entry 1: hash: must be "sha256:" followed by 64 hex digits`}},
		{"duplicate name", "- name: ci\n  hash: " + good + "\n- name: ci\n  hash: " + auth.HashAPIKey("mfk_two") + "\n",
			[]string{`:3: entry 1: name: "ci" is already the name of`, ":1: entry 0"}},
		{"wrong type", "- name: ci\n  hash: " + good + "\n  groups: {a: b}\n",
			[]string{":1: entry 0:", "cannot unmarshal"}},
		{"several problems", "- name: ci\n  hash: nope\n- 7\n- name: \"\"\n  hash: " + good + "\n",
			[]string{"entry 0: hash", "entry 1: want a mapping", "entry 2: name: must not be empty"}},
		{"not YAML", "- name: [unclosed\n",
			[]string{"yaml"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, "keys.yaml", tt.content)
			got, err := auth.LoadAPIKeys(path)
			if err == nil {
				t.Fatalf("LoadAPIKeys = %v, want an error", got)
			}
			msg := err.Error()
			if !strings.Contains(msg, path) {
				t.Errorf("error does not name the file %s:\n%v", path, err)
			}
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error does not contain %q:\n%v", w, err)
				}
			}
		})
	}

	t.Run("missing file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "absent.yaml")
		_, err := auth.LoadAPIKeys(path)
		if !os.IsNotExist(unwrapAll(err)) || !strings.Contains(err.Error(), path) {
			t.Errorf("error = %v, want a not-exist error naming the file", err)
		}
	})
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return err
		}
		err = u.Unwrap()
	}
}
