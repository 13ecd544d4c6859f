package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// headingAnchor is the anchor a Markdown renderer such as GitHub's gives a heading: lower
// case, every character but letters, digits, spaces, hyphens and underscores dropped, spaces
// made hyphens.
func headingAnchor(heading string) string {
	heading = strings.TrimSpace(strings.TrimLeft(heading, "#"))
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

func TestHeadingAnchor(t *testing.T) {
	tests := []struct{ heading, want string }{
		{"## Keys: what replicas seal", "keys-what-replicas-seal"},
		{"### Approval, pinning and the admin page", "approval-pinning-and-the-admin-page"},
		{"# Policy: who may see and call what, and how often", "policy-who-may-see-and-call-what-and-how-often"},
		{"## `gateway serve` and -listen", "gateway-serve-and--listen"},
		{"## Headers (SEP-2243)", "headers-sep-2243"},
	}
	for _, tt := range tests {
		if got := headingAnchor(tt.heading); got != tt.want {
			t.Errorf("headingAnchor(%q) = %q, want %q", tt.heading, got, tt.want)
		}
	}
}

// markdownAnchors returns the anchors of a Markdown text's headings outside code blocks,
// numbered as renderers number a repeated heading (-1, -2, …).
func markdownAnchors(text string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	inCode := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		if inCode || !strings.HasPrefix(line, "#") {
			continue
		}
		a := headingAnchor(line)
		if n := seen[a]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors
}

var markdownLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// brokenLinks returns the relative links of a Markdown file that name no file of the
// repository, or no heading of the Markdown file they name.
func brokenLinks(file string, read func(string) (string, error)) ([]string, error) {
	text, err := read(file)
	if err != nil {
		return nil, err
	}
	var broken []string
	inCode := false
	for n, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		if inCode {
			continue
		}
		for _, m := range markdownLink.FindAllStringSubmatch(line, -1) {
			link := m[1]
			if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(link, "#")
			target := file
			if path != "" {
				target = filepath.Join(filepath.Dir(file), path)
			}
			targetText, err := read(target)
			if err != nil {
				broken = append(broken, fmt.Sprintf("%s:%d: %s: no such file", file, n+1, link))
				continue
			}
			if anchor != "" && strings.HasSuffix(target, ".md") && !markdownAnchors(targetText)[anchor] {
				broken = append(broken, fmt.Sprintf("%s:%d: %s: no heading with that anchor in %s", file, n+1, link, target))
			}
		}
	}
	return broken, nil
}

func readFileText(name string) (string, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		info, statErr := os.Stat(name)
		if statErr == nil && info.IsDir() {
			return "", nil // a link to a folder of the repository
		}
	}
	return string(data), err
}

// TestDocsLinksResolve: every relative link of README.md and docs/*.md names a file that
// exists and, into a Markdown file, a heading it has. Moving a section between pages breaks
// the links to it; this says which.
func TestDocsLinksResolve(t *testing.T) {
	for _, file := range docsFiles(t) {
		broken, err := brokenLinks(file, readFileText)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range broken {
			t.Error(b)
		}
	}
}

// TestBrokenLinksAreFound: the checker finds a missing file, a missing heading and a
// heading of its own file, and accepts links that resolve.
func TestBrokenLinksAreFound(t *testing.T) {
	files := map[string]string{
		"README.md": "# Top\n\n## Own part\n\nsee [a](docs/a.md#the-part), [b](docs/a.md#nothing),\n" +
			"[c](docs/gone.md), [d](#own-part), [e](#not-here), [f](https://example.com/x#y)\n```\n[g](inside-code.md)\n```\n",
		"docs/a.md": "# A\n\n## The part\n",
	}
	read := func(name string) (string, error) {
		text, ok := files[filepath.ToSlash(name)]
		if !ok {
			return "", os.ErrNotExist
		}
		return text, nil
	}
	broken, err := brokenLinks("README.md", read)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"README.md:5: docs/a.md#nothing: no heading with that anchor in docs/a.md",
		"README.md:6: docs/gone.md: no such file",
		"README.md:6: #not-here: no heading with that anchor in README.md",
	}
	if strings.Join(broken, "\n") != strings.Join(want, "\n") {
		t.Errorf("broken links:\n%s\nwant:\n%s", strings.Join(broken, "\n"), strings.Join(want, "\n"))
	}
}

// TestReadmeStaysShort: the README is what a newcomer reads first, in a few screens; what
// grows goes into its topic's page under docs/.
func TestReadmeStaysShort(t *testing.T) {
	const limit = 16 << 10
	info, err := os.Stat(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if info.Size() >= limit {
		t.Errorf("README.md has %d bytes, over %d: move what grew into its topic's page under docs/ and link it", info.Size(), limit)
	}
}
