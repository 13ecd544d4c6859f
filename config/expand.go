package config

import (
	"fmt"
	"strings"
)

// expand replaces ${NAME} and ${NAME:-default} in s with values from lookup
// and $$ with $, as the package doc describes. It returns the expanded text
// and one message for each reference it could not expand.
func expand(s string, lookup func(string) (string, bool)) (string, []string) {
	if !strings.Contains(s, "$") {
		return s, nil
	}
	var out strings.Builder
	var problems []string
	for {
		i := strings.IndexByte(s, '$')
		if i < 0 || i == len(s)-1 {
			out.WriteString(s)
			return out.String(), problems
		}
		out.WriteString(s[:i])
		switch s[i+1] {
		case '$':
			out.WriteByte('$')
			s = s[i+2:]
			continue
		case '{':
		default: // a bare $X stays literal
			out.WriteByte('$')
			s = s[i+1:]
			continue
		}

		end := strings.IndexByte(s[i:], '}')
		if end < 0 {
			problems = append(problems, "unterminated ${: close it with }, or write $$ for a literal $")
			out.WriteString(s[i:])
			return out.String(), problems
		}
		ref := s[i : i+end+1] // ${...}
		s = s[i+end+1:]
		name, def, hasDef := strings.Cut(ref[2:len(ref)-1], ":-")
		switch {
		case !validVarName(name):
			problems = append(problems, fmt.Sprintf("%q is not a variable reference: write ${NAME} or ${NAME:-default}, or $$ for a literal $", ref))
			continue
		case strings.Contains(def, "${"):
			problems = append(problems, fmt.Sprintf("%q: a default cannot refer to another variable", ref))
			continue
		}
		val, ok := lookup(name)
		switch {
		case hasDef && val == "":
			out.WriteString(def)
		case ok:
			out.WriteString(val)
		default:
			problems = append(problems, fmt.Sprintf("environment variable %s is not set: set it, or give a default with ${%s:-default}", name, name))
		}
	}
}

// validVarName reports whether s is a variable name: a letter or _ followed
// by letters, digits and _.
func validVarName(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for _, r := range s {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}
