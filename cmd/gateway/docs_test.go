package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/manifold-mcp/manifold/internal/config"
	"go.yaml.in/yaml/v3"
)

// A ```yaml block in the docs is checked as `gateway validate` checks a config file, by
// these rules:
//
//   - a block whose top level is a mapping is a config; one without `upstreams:` gets
//     `upstreams: []` added after it;
//   - a block just after `<!-- example: fragment of PATH -->` (PATH dotted, like upstreams
//     or policy.rules) is the body of that section, a list item or a mapping, and is
//     checked inside a config that has only that section;
//   - a block just after `<!-- example: with upstreams A, B -->` is a config whose upstreams
//     A and B are defined elsewhere (an imported server list, another example): it is checked
//     with a server list (-mcp-servers) that has stdio servers of those names;
//   - a block just after `<!-- example: not a config -->` is not checked.
//
// Every ${VAR} is set (see docsEnv). The programs examples name (stdio commands, plugins)
// need not exist here: the checks of those that `gateway validate` runs after parsing are
// left out.

// docsFiles are the files whose examples are checked, relative to the module root.
func docsFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{filepath.Join("..", "..", "README.md")}, files...)
}

// docBlock is one ```yaml block of a Markdown file.
type docBlock struct {
	file   string // as named in messages, relative to the module root
	fence  int    // line of the opening fence
	marker string // the example marker just before it, or ""
	body   string
}

var exampleMarker = regexp.MustCompile(`^<!--\s*example:\s*(.*?)\s*-->$`)

// yamlBlocks returns the ```yaml blocks of a Markdown file, each with the marker comment
// on the line before its fence, if any.
func yamlBlocks(name string, data []byte) ([]docBlock, error) {
	var (
		blocks []docBlock
		cur    *docBlock
		prev   string
		line   int
	)
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line++
		text := sc.Text()
		switch {
		case cur != nil && strings.TrimSpace(text) == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.body += text + "\n"
		case strings.TrimSpace(text) == "```yaml":
			cur = &docBlock{file: name, fence: line}
			if m := exampleMarker.FindStringSubmatch(strings.TrimSpace(prev)); m != nil {
				cur.marker = m[1]
			}
		}
		prev = text
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: yaml block has no closing fence", name, cur.fence)
	}
	return blocks, sc.Err()
}

// configOf returns the config file a block is checked as: the block's lines keep their line
// numbers in the Markdown file (blank lines and the wrapping section keys go before them),
// so that a problem names the line in the docs. ok is false for a block not to be checked.
func configOf(b docBlock) (config string, ok bool, problem string) {
	var section []string
	switch m := b.marker; {
	case strings.HasPrefix(m, "with upstreams "):
	case m == "not a config":
		return "", false, ""
	case strings.HasPrefix(m, "fragment of "):
		section = strings.Split(strings.TrimPrefix(m, "fragment of "), ".")
	case m != "":
		return "", false, "unknown example marker " + m + `: use "fragment of PATH", "with upstreams A, B" or "not a config"`
	}
	var top yaml.Node
	if err := yaml.Unmarshal([]byte(b.body), &top); err != nil {
		return "", false, "not YAML: " + err.Error()
	}
	if section == nil && (len(top.Content) == 0 || top.Content[0].Kind != yaml.MappingNode) {
		return "", false, "not a mapping: mark it <!-- example: fragment of PATH --> or <!-- example: not a config -->"
	}
	if len(section) >= b.fence {
		return "", false, "too near the start of the file for its section keys"
	}
	var sb strings.Builder
	sb.WriteString(strings.Repeat("\n", b.fence-len(section)))
	for i, key := range section {
		sb.WriteString(strings.Repeat("  ", i) + key + ":\n")
	}
	indent := strings.Repeat("  ", len(section))
	for _, l := range strings.SplitAfter(b.body, "\n") {
		if strings.TrimSpace(l) != "" {
			l = indent + l
		}
		sb.WriteString(l)
	}
	if section == nil || section[0] != "upstreams" {
		if !hasTopKey(&top, "upstreams") {
			sb.WriteString("upstreams: []\n")
		}
	}
	return sb.String(), true, ""
}

// hasTopKey reports whether a block that is a mapping has key at its top level.
func hasTopKey(doc *yaml.Node, key string) bool {
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return false
	}
	m := doc.Content[0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return true
		}
	}
	return false
}

// docsEnv sets every variable an example names: a key's secret to 32 bytes in base64,
// anything else to a plain word.
func docsEnv(name string) (string, bool) {
	if strings.HasPrefix(name, "MANIFOLD_KEY") {
		return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0x5a}, 32)), true
	}
	return "example", true
}

// buildExample builds the config doc made of block b, with the server list its marker asks
// for, if any. Messages name b's file, not the temporary one.
func buildExample(t *testing.T, b docBlock, doc string) (*config.Config, error) {
	names, ok := strings.CutPrefix(b.marker, "with upstreams ")
	if !ok {
		return config.Parse(b.file, []byte(doc), docsEnv)
	}
	servers := map[string]any{}
	for _, n := range strings.Split(names, ",") {
		servers[strings.TrimSpace(n)] = map[string]any{"command": "true"}
	}
	list, err := json.Marshal(map[string]any{"mcpServers": servers})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfgPath, listPath := filepath.Join(dir, "config.yaml"), filepath.Join(dir, "servers.json")
	if err := os.WriteFile(cfgPath, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(listPath, list, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Build(cfgPath, []string{listPath}, docsEnv)
	if err != nil {
		return cfg, errors.New(strings.ReplaceAll(err.Error(), cfgPath, b.file))
	}
	return cfg, nil
}

func TestDocsYAMLExamplesAreValidConfigs(t *testing.T) {
	var checked int
	for _, path := range docsFiles(t) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(filepath.ToSlash(path), "../../")
		blocks, err := yamlBlocks(name, data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, b := range blocks {
			doc, ok, problem := configOf(b)
			if problem != "" {
				t.Errorf("%s:%d: yaml example: %s", b.file, b.fence, problem)
				continue
			}
			if !ok {
				continue
			}
			checked++
			cfg, err := buildExample(t, b, doc)
			if err != nil {
				t.Errorf("yaml example at %s:%d (marker %q) is not a valid config:\n%v", b.file, b.fence, b.marker, err)
				continue
			}
			for _, w := range config.PolicyWarnings(cfg) {
				t.Errorf("yaml example at %s:%d: warning: %s", b.file, b.fence, w)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no yaml example found in README.md or docs/*.md: has the test lost the files?")
	}
}

// TestDocsYAMLExampleRules checks that the rules above catch what they must: a broken
// example fails with the line it is on in the Markdown file.
func TestDocsYAMLExampleRules(t *testing.T) {
	tests := []struct {
		name     string
		markdown string
		wantErr  string // substring of the Parse error or the problem; "" for valid
		skipped  bool
	}{
		{
			name:     "whole config without upstreams",
			markdown: "text\n\n```yaml\nsession_store: {type: memory}\n```\n",
		},
		{
			name:     "unknown key names its line",
			markdown: "text\n\n```yaml\nupstreams: []\nsesion_store: {type: memory}\n```\n",
			wantErr:  "README.md:5:",
		},
		{
			name:     "fragment of a list",
			markdown: "text\n<!-- example: fragment of upstreams -->\n```yaml\n- name: a\n  url: https://a.example/mcp\n```\n",
		},
		{
			name:     "fragment with a bad value names its line",
			markdown: "text\n<!-- example: fragment of upstreams -->\n```yaml\n- name: a\n  url: https://a.example/mcp\n  transport: carrier-pigeon\n```\n",
			wantErr:  "README.md:6:",
		},
		{
			name:     "nested fragment",
			markdown: "one\ntwo\n<!-- example: fragment of policy.rules -->\n```yaml\n- {name: r, effect: deny, match: {tools: [x]}}\n```\n",
		},
		{
			name:     "config used with a server list",
			markdown: "text\n<!-- example: with upstreams fs -->\n```yaml\noverrides:\n  - {name: fs, isolation: session}\n```\n",
		},
		{
			name:     "config naming a server the list lacks",
			markdown: "text\n<!-- example: with upstreams fs -->\n```yaml\noverrides:\n  - {name: gh, isolation: session}\n```\n",
			wantErr:  "README.md:5:",
		},
		{
			name:     "list without marker",
			markdown: "text\n\n```yaml\n- name: a\n```\n",
			wantErr:  "not a mapping",
		},
		{
			name:     "not a config",
			markdown: "text\n<!-- example: not a config -->\n```yaml\nservices: {}\n```\n",
			skipped:  true,
		},
		{
			name:     "unclosed block",
			markdown: "text\n\n```yaml\nupstreams: []\n",
			wantErr:  "no closing fence",
		},
		{
			name:     "unknown marker",
			markdown: "text\n<!-- example: fragmnet of upstreams -->\n```yaml\n- name: a\n```\n",
			wantErr:  "unknown example marker",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			blocks, err := yamlBlocks("README.md", []byte(tt.markdown))
			if err != nil && tt.wantErr != "" && strings.Contains(err.Error(), tt.wantErr) {
				return
			}
			if err != nil || len(blocks) != 1 {
				t.Fatalf("yamlBlocks = %d blocks, %v; want 1", len(blocks), err)
			}
			doc, ok, problem := configOf(blocks[0])
			if ok == tt.skipped && problem == "" {
				t.Fatalf("checked = %v, want %v", ok, !tt.skipped)
			}
			msg := problem
			if ok {
				if _, err := buildExample(t, blocks[0], doc); err != nil {
					msg = err.Error()
				}
			}
			switch {
			case tt.wantErr == "" && msg != "":
				t.Errorf("got %q, want valid", msg)
			case tt.wantErr != "" && !strings.Contains(msg, tt.wantErr):
				t.Errorf("got %q, want it to contain %q", msg, tt.wantErr)
			}
		})
	}
}
