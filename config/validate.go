package config

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
)

const (
	maxNameLen   = 64
	maxPrefixLen = 32
	maxPageSize  = 1000
)

// validator collects the problems of a decoded Config with defaults applied.
type validator struct {
	file     string
	ix       *index
	problems []Problem
}

// check records msg as a problem of the field at path unless msg is empty or
// the field failed to decode (that problem is already reported).
func (v *validator) check(path, msg string) {
	if msg == "" || !v.ix.usable(path) {
		return
	}
	v.problems = append(v.problems, Problem{File: v.file, Line: v.ix.line(path), Field: path, Message: msg})
}

// validate returns every problem of c. ix tells where fields were found and
// which ones failed to decode.
func validate(c *Config, file string, ix *index) []Problem {
	v := &validator{file: file, ix: ix}
	v.check("listen", checkListen(c.Listen))
	v.check("separator", checkSeparator(c.Separator))
	v.check("log_level", checkLogLevel(c.LogLevel))
	for i, o := range c.AllowedOrigins {
		v.check(fmt.Sprintf("allowed_origins[%d]", i), checkOrigin(o))
	}
	if c.MaxBodyBytes <= 0 {
		v.check("max_body_bytes", "must be greater than 0: it is the largest request body accepted, in bytes (default 4194304, 4 MiB)")
	}
	if c.MaxSessions <= 0 {
		v.check("max_sessions", "must be greater than 0 (default 1000)")
	}
	if c.SessionIdleTimeout <= 0 {
		v.check("session_idle_timeout", "must be greater than 0, like 30m")
	}
	if c.PageSize < 1 || c.PageSize > maxPageSize {
		v.check("page_size", fmt.Sprintf("must be from 1 to %d (default 100)", maxPageSize))
	}
	v.upstreams(c)
	return v.problems
}

// upstreams checks each upstream, and that names and prefixes are unique.
func (v *validator) upstreams(c *Config) {
	sepOK := v.ix.usable("separator") && checkSeparator(c.Separator) == ""
	names := make(map[string]int)    // name → index of the first upstream with it
	prefixes := make(map[string]int) // effective prefix → index of the first upstream with it
	for i, u := range c.Upstreams {
		path := upstreamPath(i)
		if !v.ix.usable(path) {
			continue
		}

		// A name that is valid and unique can serve as the default prefix.
		nameOK := false
		switch j, dup := names[u.Name]; {
		case u.Name == "" && !v.ix.present(path+".name"):
			v.check(path+".name", "required: a unique name for this upstream, like github (it is also the default prefix of its tools)")
		case !validName(u.Name):
			v.check(path+".name", fmt.Sprintf("%q is not a valid name: use 1 to %d characters from A-Z a-z 0-9 _ -", u.Name, maxNameLen))
		case dup:
			v.check(path+".name", fmt.Sprintf("%q is also the name of %s (line %d): names must be unique", u.Name, upstreamPath(j), c.Upstreams[j].Line))
		default:
			names[u.Name] = i
			nameOK = true
		}

		if u.Command == "" {
			v.check(path+".command", "required: the program to start for this stdio upstream")
		}
		if u.RequestTimeout <= 0 {
			v.check(path+".request_timeout", "must be greater than 0, like 60s")
		}
		envNames := make([]string, 0, len(u.Env))
		for k := range u.Env {
			envNames = append(envNames, k)
		}
		slices.Sort(envNames)
		for _, k := range envNames {
			if k == "" || strings.ContainsAny(k, "=\x00") {
				v.check(path+".env."+k, "not a valid environment variable name: it must be non-empty, without = or NUL")
			}
		}

		// A prefix taken from the name is reported at the name, where it
		// is written; it is checked only if the name itself is fine.
		prefixPath, from := path+".prefix", ""
		if !v.ix.present(prefixPath) {
			if !nameOK {
				continue
			}
			prefixPath, from = path+".name", " (taken from the name)"
		}
		if !v.ix.usable(prefixPath) {
			continue
		}
		if msg := checkPrefix(u.Prefix, from); msg != "" {
			v.check(prefixPath, msg)
			continue
		}
		if sepOK && u.Prefix != "" && strings.Index(u.Prefix+c.Separator, c.Separator) != len(u.Prefix) {
			v.check(prefixPath, fmt.Sprintf("prefix %q%s clashes with the separator %q: in %q the separator is found too early; choose another prefix or separator",
				u.Prefix, from, c.Separator, u.Prefix+c.Separator+"tool"))
			continue
		}
		j, dup := prefixes[u.Prefix]
		switch {
		case !dup:
			prefixes[u.Prefix] = i
		case u.Prefix == "":
			v.check(prefixPath, fmt.Sprintf(`"" (unprefixed) is also the prefix of %s %q (line %d): at most one upstream can be unprefixed; give one of them a prefix`,
				upstreamPath(j), c.Upstreams[j].Name, c.Upstreams[j].Line))
		default:
			v.check(prefixPath, fmt.Sprintf("prefix %q%s is also the prefix of %s %q (line %d): give one of them a distinct prefix",
				u.Prefix, from, upstreamPath(j), c.Upstreams[j].Name, c.Upstreams[j].Line))
		}
	}
}

func checkListen(s string) string {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Sprintf("%q is not host:port: write e.g. 127.0.0.1:8080, or :8080 for all interfaces", s)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Sprintf("port %q is not a number from 0 to 65535: write e.g. 127.0.0.1:8080", port)
	}
	return ""
}

func checkSeparator(s string) string {
	if len(s) < 1 || len(s) > 4 || !onlyChars(s, "_.-") {
		return fmt.Sprintf("%q is not a valid separator: use 1 to 4 characters from A-Z a-z 0-9 _ . -, like __", s)
	}
	return ""
}

func checkLogLevel(s string) string {
	switch s {
	case "debug", "info", "warn", "error":
		return ""
	}
	return fmt.Sprintf("%q is not a log level: use debug, info, warn or error", s)
}

func checkOrigin(s string) string {
	if _, ok := parseOrigin(s, true); !ok {
		return fmt.Sprintf("%q is not an origin: write scheme://host, scheme://host:port or scheme://host:* (any port), with scheme http or https and no path", s)
	}
	return ""
}

// checkPrefix checks the charset and length of prefix p; from says where it
// came from, for the message.
func checkPrefix(p, from string) string {
	switch {
	case len(p) > maxPrefixLen:
		return fmt.Sprintf("prefix %q%s is longer than %d characters: set a shorter prefix", p, from, maxPrefixLen)
	case !onlyChars(p, "_.-"):
		return fmt.Sprintf("%q is not a valid prefix: use up to %d characters from A-Z a-z 0-9 _ . -, or \"\" for none", p, maxPrefixLen)
	}
	return ""
}

func validName(s string) bool {
	return len(s) >= 1 && len(s) <= maxNameLen && onlyChars(s, "_-")
}

// onlyChars reports whether s consists of ASCII letters, digits and the
// characters in extra.
func onlyChars(s, extra string) bool {
	for _, r := range s {
		if !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || strings.ContainsRune(extra, r)) {
			return false
		}
	}
	return true
}
