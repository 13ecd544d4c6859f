package config

import (
	"strconv"
	"strings"
)

// Error is returned by Load, Parse, Import and Build when a config file or
// server list cannot be used. It lists every problem found, in file order
// (for Build, file by file); Problems is never empty. Get it with errors.As.
type Error struct {
	Problems []Problem
	// Partial is the config as far as it could be decoded despite the problems, with
	// defaults applied, for checks that look further than the content (the programs that
	// `gateway validate` finds missing); nil when nothing could be decoded. It must not be
	// served: values the problems name may be wrong or missing.
	Partial *Config
}

// Error returns the problems one per line, each formatted as by
// Problem.String.
func (e *Error) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// Problem is one thing wrong with a config file.
//
// Messages never quote the values of env, args, headers or url, which may
// hold secrets.
type Problem struct {
	// File is the file name given to Load, Parse, Import or Build.
	File string
	// Line is the 1-based line of the field, or of the mapping that lacks a
	// required field; 0 when the problem concerns the whole file.
	Line int
	// Field is the path of the field in key names with [i] list indexes,
	// such as "upstreams[0].request_timeout", or in a server list
	// "mcpServers.github.args[1]" (a key that is not a plain name is
	// quoted: servers."my server".url); empty when no field applies (a
	// syntax error, an empty file).
	Field string
	// Message says what is wrong and what to do about it.
	Message string
}

// String formats p as FILE:LINE: FIELD: MESSAGE, leaving out LINE when it is
// 0 and FIELD when it is empty.
func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		b.WriteString(":")
		b.WriteString(strconv.Itoa(p.Line))
	}
	b.WriteString(": ")
	if p.Field != "" {
		b.WriteString(p.Field)
		b.WriteString(": ")
	}
	b.WriteString(p.Message)
	return b.String()
}
