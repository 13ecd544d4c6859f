// Package glob matches names and URIs against the shell-like patterns of Manifold's config:
// catalog filters and profiles; the upstreams, tools, prompts and resources of policy rules,
// rate limits and plugins; the subjects and API keys that name principals.
//
//	p, err := glob.Compile("read_*")
//	p.Match("read_file") // true
//
// A pattern matches a whole string. `*` matches any run of characters, `/` included, so
// that "file:///docs/*" matches every URI under /docs; `?` matches one character; `[abc]`,
// `[a-z]` and `[!abc]` match one character of (or, with `!`, outside) a set; `\` makes the
// next character literal. Every other character matches itself, case-sensitively.
package glob

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Pattern is a compiled glob. It is safe for concurrent use.
type Pattern struct {
	text string
	// literal is set when the pattern has no wildcard: it then matches text alone.
	literal bool
	re      *regexp.Regexp
}

// Compile compiles pattern. An empty pattern, an unclosed `[` and a trailing `\` are errors
// whose message says what to write instead.
func Compile(pattern string) (*Pattern, error) {
	if pattern == "" {
		return nil, errors.New("empty pattern: write * to match everything")
	}
	var re strings.Builder
	// (?s): a wildcard matches a newline too, so that no name or URI slips past an exclude
	// by carrying one.
	re.WriteString(`(?s)^`)
	literal := true
	for i := 0; i < len(pattern); i++ {
		switch c := pattern[i]; c {
		case '*':
			literal = false
			re.WriteString(`.*`)
			for i+1 < len(pattern) && pattern[i+1] == '*' {
				i++ // ** is *
			}
		case '?':
			literal = false
			re.WriteString(`.`)
		case '\\':
			if i+1 == len(pattern) {
				return nil, fmt.Errorf("%q ends in a lone \\: write \\\\ for a backslash", pattern)
			}
			i++
			literal = false // the pattern's text is not what it matches
			re.WriteString(regexp.QuoteMeta(pattern[i : i+1]))
		case '[':
			end, class, err := charClass(pattern, i)
			if err != nil {
				return nil, err
			}
			literal = false
			re.WriteString(class)
			i = end
		default:
			re.WriteString(regexp.QuoteMeta(pattern[i : i+1]))
		}
	}
	re.WriteString(`$`)
	p := &Pattern{text: pattern, literal: literal}
	if !literal {
		compiled, err := regexp.Compile(re.String())
		if err != nil {
			return nil, fmt.Errorf("%q is not a valid pattern: %w", pattern, err)
		}
		p.re = compiled
	}
	return p, nil
}

// charClass translates the set that starts at pattern[start] ('[') into a regexp class,
// returning the index of its closing ']'.
func charClass(pattern string, start int) (end int, class string, err error) {
	var b strings.Builder
	b.WriteByte('[')
	i := start + 1
	if i < len(pattern) && (pattern[i] == '!' || pattern[i] == '^') {
		b.WriteByte('^')
		i++
	}
	first := i
	for ; i < len(pattern); i++ {
		c := pattern[i]
		switch {
		case c == ']' && i > first:
			b.WriteByte(']')
			return i, b.String(), nil
		case c == '\\':
			if i+1 == len(pattern) {
				return 0, "", fmt.Errorf("%q ends in a lone \\: write \\\\ for a backslash", pattern)
			}
			i++
			// Escaped, a character stands for itself: '-' and ']' included.
			if e := pattern[i]; e >= 'a' && e <= 'z' || e >= 'A' && e <= 'Z' || e >= '0' && e <= '9' {
				b.WriteByte(e)
			} else {
				b.WriteByte('\\')
				b.WriteByte(e)
			}
		case c == '-' && i > first && i+1 < len(pattern) && pattern[i+1] != ']':
			b.WriteByte('-')
		default:
			b.WriteString(regexp.QuoteMeta(pattern[i : i+1]))
		}
	}
	return 0, "", fmt.Errorf("%q has a [ without its closing ]: write \\[ for a literal bracket", pattern)
}

// String is the pattern as written.
func (p *Pattern) String() string { return p.text }

// Match reports whether s matches the whole pattern.
func (p *Pattern) Match(s string) bool {
	if p.literal {
		return s == p.text
	}
	return p.re.MatchString(s)
}

// Set is a list of patterns; it matches a string that any of them matches. The nil Set
// matches nothing.
type Set []*Pattern

// CompileSet compiles each pattern, returning the first error with the index of its pattern.
func CompileSet(patterns []string) (Set, error) {
	if patterns == nil {
		return nil, nil
	}
	set := make(Set, 0, len(patterns))
	for i, text := range patterns {
		p, err := Compile(text)
		if err != nil {
			return nil, &SetError{Index: i, Err: err}
		}
		set = append(set, p)
	}
	return set, nil
}

// SetError is a pattern of a Set that does not compile.
type SetError struct {
	Index int
	Err   error
}

func (e *SetError) Error() string { return fmt.Sprintf("pattern %d: %v", e.Index, e.Err) }
func (e *SetError) Unwrap() error { return e.Err }

// Match reports whether any pattern of the set matches s.
func (s Set) Match(str string) bool {
	for _, p := range s {
		if p.Match(str) {
			return true
		}
	}
	return false
}
