package config

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Import reads a server list in the format of Claude Desktop or Cursor (a
// top-level "mcpServers" object) or of VS Code (a top-level "servers"
// object), and returns its servers as upstreams, in file order, with defaults
// applied; nil if the list is empty. A file with both objects gives the
// servers of both. Other top-level keys (a host's own settings, VS Code's
// "inputs") are ignored. Every file may be JSONC: // and /* */ comments and
// trailing commas are allowed.
//
// Each server becomes an upstream named by its key, which is also its
// prefix. A key that is not a valid name is made into one, without a
// message: each character outside A-Z a-z 0-9 _ - becomes '-', and it is cut
// to 64 bytes (and to 32 for the prefix). Two servers whose names end up the
// same are a problem.
//
// A server has "command" (with "args", "env", "cwd") or "url" (with
// "headers"). "type" is "stdio", "http" (also "streamable-http" or
// "streamableHttp"; Streamable HTTP) or "sse" (legacy HTTP+SSE); without it,
// the transport follows from "command" or "url". "disabled": true imports the
// server with Enabled false. A null value counts as absent. Keys that other
// hosts use and that do not matter to the gateway (such as "autoApprove",
// "timeout" or "description") are ignored, but "envFile" is a problem: the
// gateway does not read it, and the server would start without those
// variables.
//
// A server list has none of the gateway's own settings (isolation, prefix,
// tools, ...): the upstreams get the defaults, and Build applies the config
// file's top-level overrides to them (see the package doc).
//
// String values may refer to variables, looked up with lookupEnv (nil means
// none is set): ${NAME}, ${NAME:-default}, VS Code's ${env:NAME}, and $$ for a
// literal $, as in the config file. References the gateway cannot resolve,
// VS Code's ${input:ID} prompts and its editor variables such as
// ${workspaceFolder}, are problems.
//
// The upstreams are checked as they would be in a config file, except the
// separator, which belongs to the config (see Build). If the file cannot be
// read, the error wraps the one from the file system; if its content cannot
// be used, the error is an *Error listing every problem as file:line:field,
// where field is a path such as mcpServers.github.args[0]. Import is safe for
// concurrent use.
func Import(path string, lookupEnv func(string) (string, bool)) ([]Upstream, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("import server list: %w", err)
	}
	return parseImport(path, data, lookupEnv)
}

// parseImport is Import on data already read from file.
func parseImport(file string, data []byte, lookupEnv func(string) (string, bool)) ([]Upstream, error) {
	if lookupEnv == nil {
		lookupEnv = func(string) (string, bool) { return "", false }
	}
	ups, sites, problems := decodeImport(file, data, lookupEnv)
	problems = append(problems, validate(&Config{Upstreams: ups}, nil, sites, "")...)
	if len(problems) > 0 {
		slices.SortStableFunc(problems, func(a, b Problem) int { return a.Line - b.Line })
		return nil, &Error{Problems: problems}
	}
	return ups, nil
}

// decodeImport decodes the server list data read from file into upstreams
// with defaults applied, and tells where each was found.
func decodeImport(file string, data []byte, lookupEnv func(string) (string, bool)) ([]Upstream, []site, []Problem) {
	root, problems := parseJSONC(file, data)
	if root == nil {
		return nil, nil, problems
	}
	im := &importer{decoder: newDecoder(file, lookupEnv)}
	im.lines[""] = root.line
	if root.kind != jsonObject {
		im.problemf(root.line, "", `want a JSON object with "mcpServers" (Claude Desktop, Cursor) or "servers" (VS Code), got %s`, describeJSON(root))
		return nil, nil, im.problems
	}
	found := false
	seen := make(map[string]int)
	for _, m := range root.members {
		if m.key != "mcpServers" && m.key != "servers" {
			continue // a setting of the host, not ours
		}
		found = true
		if first, dup := seen[m.key]; dup {
			im.problemf(m.line, m.key, "duplicate key, first set on line %d: remove one of them", first)
			continue
		}
		seen[m.key] = m.line
		im.vscode = m.key == "servers"
		im.servers(m)
	}
	if !found {
		return nil, nil, []Problem{{File: file, Message: `no "mcpServers" or "servers" object: this is not a server list of Claude Desktop, Cursor or VS Code`}}
	}
	return im.ups, im.sites, im.problems
}

// importer decodes the servers of one server list.
type importer struct {
	*decoder
	// vscode is set while decoding VS Code's "servers", where ${NAME} may
	// be an editor variable.
	vscode bool
	ups    []Upstream
	sites  []site
}

// servers decodes m, an object of servers by key.
func (im *importer) servers(m jsonMember) {
	path := m.key
	im.lines[path] = m.line
	v := m.value
	switch v.kind {
	case jsonNull:
		return
	case jsonObject:
	default:
		im.problemf(v.line, path, `want an object of servers by name, like {"github": {"command": "npx"}}, got %s`, describeJSON(v))
		im.bad[path] = true
		return
	}
	seen := make(map[string]int)
	for _, sm := range v.members {
		spath := join(path, jsonKey(sm.key))
		if first, dup := seen[sm.key]; dup {
			im.problemf(sm.line, spath, "duplicate server key, first on line %d: remove one of them", first)
			continue
		}
		seen[sm.key] = sm.line
		im.server(sm, spath)
	}
}

// server decodes the server sm, whose field path is path, into an upstream.
func (im *importer) server(sm jsonMember, path string) {
	name := sanitizeName(sm.key)
	u := Upstream{
		Name:   name,
		Prefix: name[:min(len(name), maxPrefixLen)],
		File:   im.file,
		Line:   sm.line,
	}
	// Server lists have none of the gateway's own settings: all take their defaults.
	applyUpstreamDefaults(&u, func(string) bool { return false })
	im.lines[path] = sm.line
	defer func() {
		if fetchesOnFirstUse(u.Command) {
			u.FirstInitializeTimeout = defaultFirstFetchTimeout // the command is known now
		}
		im.ups = append(im.ups, u)
		im.sites = append(im.sites, site{where: where{file: im.file, ix: &im.index}, path: path, imported: true, key: sm.key})
	}()

	v := sm.value
	if v.kind != jsonObject {
		im.problemf(v.line, path, `want an object with "command" (a program to start) or "url" (an HTTP server), got %s`, describeJSON(v))
		im.bad[path] = true
		return
	}
	var typ *jsonNode
	seen := make(map[string]int)
	for _, f := range v.members {
		fpath := join(path, jsonKey(f.key))
		if first, dup := seen[f.key]; dup {
			im.problemf(f.line, fpath, "duplicate key, first set on line %d: remove one of them", first)
			continue
		}
		seen[f.key] = f.line
		if f.value.kind == jsonNull {
			continue // as if absent
		}
		ok := true
		switch f.key {
		case "command":
			ok = im.str(f.value, fpath, &u.Command)
		case "args":
			ok = im.strList(f.value, fpath, &u.Args)
		case "env":
			ok = im.strMap(f.value, fpath, &u.Env, true)
		case "cwd":
			ok = im.str(f.value, fpath, &u.Dir)
		case "url":
			ok = im.str(f.value, fpath, &u.URL)
		case "headers":
			ok = im.strMap(f.value, fpath, &u.Headers, false)
		case "type":
			typ = f.value
		case "disabled":
			if ok = f.value.kind == jsonBool; ok {
				u.Enabled = !f.value.boolean
			} else {
				im.problemf(f.value.line, fpath, "want true or false, got %s", describeJSON(f.value))
			}
		case "envFile":
			im.problemf(f.line, fpath, `not supported: the gateway does not read env files; copy the variables the server needs into "env" (values may be ${env:NAME})`)
			ok = false
		default:
			continue // a key of another host, harmless here
		}
		im.lines[fpath] = f.line
		if !ok {
			im.bad[fpath] = true
		}
	}

	if typ != nil {
		tpath := join(path, "type")
		if t, ok := im.transport(typ, tpath, &u); ok {
			u.Transport = t
		} else {
			im.bad[tpath] = true
		}
	}
	if u.Transport == "" {
		u.Transport = defaultTransport(&u)
	}
}

// transport decodes n, the "type" of u at path, into a transport, and checks
// that it fits u's command or url.
func (im *importer) transport(n *jsonNode, path string, u *Upstream) (string, bool) {
	var typ string
	if !im.str(n, path, &typ) {
		return "", false
	}
	var t string
	switch typ {
	case "stdio":
		t = TransportStdio
	case "http", "streamable-http", "streamableHttp":
		t = TransportStreamableHTTP
	case "sse":
		t = TransportSSE
	default:
		im.problemf(n.line, path, `%s is not a server type: use "stdio", "http" or "sse"`, quote(typ))
		return "", false
	}
	switch {
	case t == TransportStdio && u.Command == "" && u.URL != "":
		im.problemf(n.line, path, `type "stdio" needs "command", and this server has "url": use "http" or "sse", or remove "type"`)
		return "", false
	case t != TransportStdio && u.URL == "" && u.Command != "":
		im.problemf(n.line, path, `type %q needs "url", and this server has "command": use "stdio", or remove "type"`, typ)
		return "", false
	}
	return t, true
}

// str decodes the string n of the field at path into dst, expanding
// variables.
func (im *importer) str(n *jsonNode, path string, dst *string) bool {
	if n.kind != jsonString {
		im.problemf(n.line, path, "want a string, got %s", describeJSON(n))
		return false
	}
	s, ok := im.expand(n, path)
	if ok {
		*dst = s
	}
	return ok
}

// strList decodes the array of strings n of the field at path into dst.
func (im *importer) strList(n *jsonNode, path string, dst *[]string) bool {
	if n.kind != jsonArray {
		im.problemf(n.line, path, `want an array of strings, like ["-y", "server"]; got %s`, describeJSON(n))
		return false
	}
	list := make([]string, len(n.items))
	for i, item := range n.items {
		ipath := fmt.Sprintf("%s[%d]", path, i)
		im.lines[ipath] = item.line
		if !im.str(item, ipath, &list[i]) {
			im.bad[ipath] = true
		}
	}
	*dst = list
	return true
}

// strMap decodes the object n of the field at path, whose values are strings
// (or, if numbers is set, numbers too), into dst. Keys are taken as written.
func (im *importer) strMap(n *jsonNode, path string, dst *map[string]string, numbers bool) bool {
	if n.kind != jsonObject {
		im.problemf(n.line, path, `want an object of "NAME": "value"; got %s`, describeJSON(n))
		return false
	}
	m := make(map[string]string)
	seen := make(map[string]int)
	for _, e := range n.members {
		epath := join(path, e.key)
		if first, dup := seen[e.key]; dup {
			im.problemf(e.line, epath, "duplicate key, first set on line %d: remove one of them", first)
			continue
		}
		seen[e.key] = e.line
		im.lines[epath] = e.line
		var s string
		ok := true
		if numbers && e.value.kind == jsonNumber {
			s = e.value.text
		} else {
			ok = im.str(e.value, epath, &s)
		}
		if ok {
			m[e.key] = s
		} else {
			im.bad[epath] = true
		}
	}
	*dst = m
	return true
}

// expand returns the string n of the field at path with variables expanded.
func (im *importer) expand(n *jsonNode, path string) (string, bool) {
	s, problems := expandRefs(n.text, im.resolve)
	for _, p := range problems {
		im.problemf(n.line, path, "%s", p)
	}
	return s, len(problems) == 0
}

// resolve returns the value of the reference ref, ${...}, in a server list.
func (im *importer) resolve(ref string) (string, string) {
	body := ref[2 : len(ref)-1]
	kind, rest, hasColon := strings.Cut(body, ":")
	switch {
	case hasColon && strings.HasPrefix(rest, "-"): // ${NAME:-default}
	case kind == "env" && hasColon:
		return lookupVar(ref, rest, im.lookupEnv)
	case kind == "input" && hasColon:
		return "", fmt.Sprintf("%q asks the editor to prompt for a value, which the gateway cannot do: write ${env:NAME} instead and set NAME", ref)
	case hasColon && validVarName(kind), im.vscode && editorVars[kind]:
		return "", fmt.Sprintf("%q is an editor variable the gateway cannot resolve: write the value, or ${env:NAME}", ref)
	}
	return lookupRef(ref, im.lookupEnv)
}

// editorVars are the variables VS Code resolves itself (see "Variables
// reference" in its documentation), which are not environment variables.
var editorVars = map[string]bool{
	"userHome": true, "workspaceFolder": true, "workspaceFolderBasename": true,
	"workspaceRoot": true, "file": true, "fileWorkspaceFolder": true,
	"relativeFile": true, "relativeFileDirname": true, "fileBasename": true,
	"fileBasenameNoExtension": true, "fileExtname": true, "fileDirname": true,
	"fileDirnameBasename": true, "cwd": true, "lineNumber": true,
	"selectedText": true, "execPath": true, "defaultBuildTask": true,
	"pathSeparator": true, "extensionInstallFolder": true,
}

// sanitizeName makes a valid upstream name of a server key: each character
// outside A-Z a-z 0-9 _ - becomes '-', and the result is cut to maxNameLen
// bytes. An empty key stays empty, which validation reports.
func sanitizeName(key string) string {
	var b strings.Builder
	for _, r := range key {
		if r < utf8.RuneSelf && onlyChars(string(r), "_-") {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	s := b.String()
	return s[:min(len(s), maxNameLen)]
}

// jsonKey returns key for use in a field path: as it is if it is a plain
// name, else quoted.
func jsonKey(key string) string {
	if key != "" && onlyChars(key, "_-") {
		return key
	}
	return strconv.Quote(key)
}

// describeJSON names the kind of n for messages, without quoting it: it may
// hold a secret.
func describeJSON(n *jsonNode) string {
	switch n.kind {
	case jsonNull:
		return "null"
	case jsonBool:
		return "true or false"
	case jsonNumber:
		return "a number"
	case jsonString:
		return "a string"
	case jsonArray:
		return "an array"
	default:
		return "an object"
	}
}
