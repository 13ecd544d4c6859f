package config

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"
)

// Plugin is a policy plugin (key `plugins`, a list): a separate program the gateway starts
// and asks about each call it sees, after the policy's rules and rate limits and before
// approval, in config order.
type Plugin struct {
	// Name names the plugin in logs, the audit trail and refusals (key `name`). Required,
	// unique.
	Name string
	// Path is the plugin's executable (key `path`), relative to the config file's directory.
	Path string
	// SHA256 is the executable's SHA-256 checksum in hex, as sha256sum prints it (key
	// `sha256`): a program that differs is not started.
	SHA256 string
	// Config is handed to the plugin at start (key `config`: any YAML, given as JSON).
	Config json.RawMessage
	// Methods, Upstreams and Tools say which calls the plugin sees (keys `methods`,
	// `upstreams`, `tools`): methods among tools/call (the default; a task's tasks/result
	// with it), prompts/get, resources/read and completion/complete, before the call and,
	// for a plugin that inspects, its result; globs over upstream names and over the
	// upstreams' own tool, prompt or resource names (a completion's: the prompt's or
	// template's). Empty: all.
	Methods, Upstreams, Tools []string
	// Timeout bounds each call to the plugin (key `timeout`); greater than 0. Defaults to 1s.
	Timeout time.Duration
	// Failure is what a call gets while the plugin fails (crashed, timed out, errs) (key
	// `failure`): fail_closed (the default) refuses it, fail_open skips the plugin.
	Failure string
	// Env is the plugin's environment (key `env`); it inherits nothing of the gateway's.
	Env map[string]string
	// Line is the entry's line, for messages.
	Line int
}

// The values of Plugin.Failure.
const (
	FailClosedPlugin = "fail_closed"
	FailOpenPlugin   = "fail_open"
)

// PluginMethods are the methods a plugin may see.
var PluginMethods = []string{"tools/call", "prompts/get", "resources/read", "completion/complete"}

const defaultPluginTimeout = time.Second

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

func plugin(p *Plugin) decodeFunc {
	return func(d *decoder, n *yaml.Node, path string) bool {
		p.Line = n.Line
		return d.mapping(n, path, "a mapping with `name:`, `path:` and `sha256:`", []field{
			{key: "name", decode: str(&p.Name)},
			{key: "path", decode: str(&p.Path)},
			{key: "sha256", decode: str(&p.SHA256)},
			{key: "config", decode: jsonValue(&p.Config)},
			{key: "methods", decode: strList(&p.Methods)},
			{key: "upstreams", decode: strList(&p.Upstreams)},
			{key: "tools", decode: strList(&p.Tools)},
			{key: "timeout", decode: duration(&p.Timeout)},
			{key: "failure", decode: str(&p.Failure)},
			{key: "env", decode: strMap(&p.Env)},
		})
	}
}

// jsonValue decodes any YAML value into its JSON form; ${ENV} references in strings are
// expanded, as everywhere.
func jsonValue(dst *json.RawMessage) decodeFunc {
	return func(d *decoder, n *yaml.Node, path string) bool {
		v, ok := d.plain(resolve(n), path)
		if !ok {
			return false
		}
		out, err := json.Marshal(v)
		if err != nil {
			d.problemf(n.Line, path, "cannot be given as JSON: %v", err)
			return false
		}
		*dst = out
		return true
	}
}

// plain returns a YAML value as plain Go values (maps, slices, strings, numbers, booleans).
func (d *decoder) plain(n *yaml.Node, path string) (any, bool) {
	switch n.Kind {
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		ok := true
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i].Value
			v, good := d.plain(resolve(n.Content[i+1]), path+"."+k)
			m[k] = v
			ok = ok && good
		}
		return m, ok
	case yaml.SequenceNode:
		s := make([]any, len(n.Content))
		ok := true
		for i, e := range n.Content {
			v, good := d.plain(resolve(e), fmt.Sprintf("%s[%d]", path, i))
			s[i] = v
			ok = ok && good
		}
		return s, ok
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!null":
			return nil, true
		case "!!bool":
			b, err := strconv.ParseBool(n.Value)
			return b, err == nil
		case "!!int", "!!float":
			return json.Number(n.Value), json.Valid([]byte(n.Value))
		}
		s, problems := expand(n.Value, d.lookupEnv)
		for _, p := range problems {
			d.problemf(n.Line, path, "%s", p)
		}
		return s, len(problems) == 0
	}
	d.problemf(n.Line, path, "want a YAML value, got %s", describe(n))
	return nil, false
}

// applyPluginDefaults fills the plugin settings the file leaves out.
func applyPluginDefaults(c *Config, ix *index) {
	for i := range c.Plugins {
		p := &c.Plugins[i]
		key := fmt.Sprintf("plugins[%d].", i)
		if !ix.has(key + "timeout") {
			p.Timeout = defaultPluginTimeout
		}
		if !ix.has(key + "failure") {
			p.Failure = FailClosedPlugin
		}
		if len(p.Methods) == 0 {
			p.Methods = []string{"tools/call"}
		}
	}
}

// resolvePluginPaths makes the plugins' relative paths relative to the config file's
// directory.
func resolvePluginPaths(c *Config, configDir string) {
	base, err := filepath.Abs(configDir)
	if err != nil {
		return
	}
	for i := range c.Plugins {
		if p := &c.Plugins[i]; p.Path != "" && !filepath.IsAbs(p.Path) {
			p.Path = filepath.Join(base, p.Path)
		}
	}
}

// plugins checks the plugins.
func (v *validator) plugins(c *Config, w where) {
	names := map[string]bool{}
	for i := range c.Plugins {
		p, pp := &c.Plugins[i], fmt.Sprintf("plugins[%d]", i)
		switch {
		case p.Name == "":
			v.check(w, pp+".name", "required: the plugin's name, which logs, the audit trail and refusals show")
		case names[p.Name]:
			v.check(w, pp+".name", fmt.Sprintf("%s names another plugin too: names must be unique", quote(p.Name)))
		}
		names[p.Name] = true
		if p.Path == "" {
			v.check(w, pp+".path", "required: the plugin's executable, like ./plugins/guard")
		}
		if !sha256Hex.MatchString(p.SHA256) {
			v.check(w, pp+".sha256", "required: the executable's SHA-256 in lower-case hex, as `sha256sum PATH` prints it; a program that differs is not started")
		}
		for j, m := range p.Methods {
			if !slices.Contains(PluginMethods, m) {
				v.check(w, fmt.Sprintf("%s.methods[%d]", pp, j), fmt.Sprintf("%s: a plugin sees tools/call, prompts/get, resources/read or completion/complete", quote(m)))
			}
		}
		v.compileGlobs(w, pp+".upstreams", p.Upstreams)
		v.compileGlobs(w, pp+".tools", p.Tools)
		if p.Timeout <= 0 {
			v.check(w, pp+".timeout", "must be greater than 0, like 500ms: how long the gateway waits for the plugin's answer")
		}
		switch p.Failure {
		case FailClosedPlugin, FailOpenPlugin:
		default:
			v.check(w, pp+".failure", fmt.Sprintf("%s: use fail_closed (refuse calls while the plugin fails) or fail_open (skip it)", quote(p.Failure)))
		}
	}
}
