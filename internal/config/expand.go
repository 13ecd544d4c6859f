package config

import (
	"fmt"
	"strings"
)

// expand replaces ${NAME} and ${NAME:-default} in s with values from lookup
// and $$ with $, as the package doc describes. It returns the expanded text
// and one message for each reference it could not expand.
func expand(s string, lookup func(string) (string, bool)) (string, []string) {
	return expandRefs(s, func(ref string) (string, string) { return lookupRef(ref, lookup) })
}

// expandRefs replaces each reference ${...} in s with the value resolve
// returns for it, and $$ with $. resolve gets the whole reference, braces
// included, and returns its value or a message saying why it has none.
// expandRefs returns the expanded text and the messages.
func expandRefs(s string, resolve func(ref string) (string, string)) (string, []string) {
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
		val, problem := resolve(ref)
		if problem != "" {
			problems = append(problems, problem)
			continue
		}
		out.WriteString(val)
	}
}

// lookupRef resolves ref, ${NAME} or ${NAME:-default}, with lookup.
func lookupRef(ref string, lookup func(string) (string, bool)) (string, string) {
	return lookupVar(ref, ref[2:len(ref)-1], lookup)
}

// lookupVar resolves body, the text NAME or NAME:-default of the reference
// ref, with lookup.
func lookupVar(ref, body string, lookup func(string) (string, bool)) (string, string) {
	name, def, hasDef := strings.Cut(body, ":-")
	switch {
	case !validVarName(name):
		return "", fmt.Sprintf("%q is not a variable reference: write ${NAME} or ${NAME:-default}, or $$ for a literal $", ref)
	case strings.Contains(def, "${"):
		return "", fmt.Sprintf("%q: a default cannot refer to another variable", ref)
	}
	val, ok := lookup(name)
	switch {
	case hasDef && val == "":
		return def, ""
	case ok:
		return val, ""
	default:
		return "", fmt.Sprintf("environment variable %s is not set: set it, or give a default with ${%s:-default}", name, name)
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
