// Command guard is an example Manifold policy plugin, written with plugin/sdk. It
//
//   - denies a call when any string in its arguments (at any depth) matches one of the
//     regular expressions in "block", naming the pattern and where it matched;
//   - adds the arguments in "defaults" that a call lacks (top-level keys only), by rewriting
//     the call's arguments;
//   - redacts e-mail addresses in results, each becomes "[redacted email]": in a tool's
//     result (tools/call, tasks/result), in the text of every "content" item and in every
//     string of "structuredContent"; in a resource's (resources/read), in the text of every
//     item of "contents"; in a prompt's (prompts/get), in the text of every message's
//     content; in a completion's (completion/complete), in its values. The gateway asks it
//     about the methods its `methods:` names (tools/call by default).
//
// Its configuration, under the plugin's `config:` in the gateway's configuration:
//
//	{"block": ["(?i)drop\\s+table", "BEGIN [A-Z ]*PRIVATE KEY"], "defaults": {"limit": 10}}
//
// Build it with `go build -o .cache/guard ./examples/plugins/guard` and give the gateway its
// sha256sum (`sha256sum .cache/guard`), as the example config shows.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/manifold-mcp/manifold/plugin/sdk"
)

func main() { sdk.Serve(&guard{}) }

// config is guard's configuration.
type config struct {
	// Block are regular expressions (Go's RE2 syntax); a call whose arguments hold a
	// string that one matches is denied.
	Block []string `json:"block"`
	// Defaults are arguments to add to calls that lack them.
	Defaults map[string]json.RawMessage `json:"defaults"`
}

// guard is the plugin. Configure runs before any other call, so its fields are only read
// afterwards, concurrently.
type guard struct {
	block    []*regexp.Regexp
	defaults map[string]json.RawMessage
}

// Interface guards.
var (
	_ sdk.Plugin     = (*guard)(nil)
	_ sdk.Inspector  = (*guard)(nil)
	_ sdk.Configurer = (*guard)(nil)
)

func (g *guard) Configure(raw json.RawMessage) error {
	var c config
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return fmt.Errorf("guard config: %w", err)
	}
	g.block = nil
	for _, pattern := range c.Block {
		re, err := regexp.Compile(pattern)
		if err != nil {
			return fmt.Errorf("guard config: block: %w", err)
		}
		g.block = append(g.block, re)
	}
	for k, v := range c.Defaults {
		if !json.Valid(v) {
			return fmt.Errorf("guard config: defaults: %s is not JSON", k)
		}
	}
	g.defaults = c.Defaults
	return nil
}

func (g *guard) Decide(_ context.Context, call *sdk.Call) (*sdk.Decision, error) {
	if len(g.block) > 0 && len(call.Arguments) > 0 {
		args, err := decode(call.Arguments)
		if err != nil {
			return nil, fmt.Errorf("arguments: %w", err)
		}
		if reason := g.blocked(args, ""); reason != "" {
			return sdk.Deny(reason), nil
		}
	}
	return g.withDefaults(call.Arguments)
}

// blocked returns why v, found at the JSON Pointer path, is blocked, or "".
func (g *guard) blocked(v any, path string) string {
	switch v := v.(type) {
	case string:
		for _, re := range g.block {
			if re.MatchString(v) {
				where := "an argument"
				if path != "" {
					where = "the argument " + strconv.Quote(path)
				}
				return fmt.Sprintf("%s matches the blocked pattern %q", where, re.String())
			}
		}
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(v)) { // the first match in a stable order
			if r := g.blocked(v[k], path+"/"+escapePointer(k)); r != "" {
				return r
			}
		}
	case []any:
		for i, e := range v {
			if r := g.blocked(e, path+"/"+strconv.Itoa(i)); r != "" {
				return r
			}
		}
	}
	return ""
}

// withDefaults allows the call, adding the default arguments it lacks by a rewrite.
func (g *guard) withDefaults(raw json.RawMessage) (*sdk.Decision, error) {
	if len(g.defaults) == 0 {
		return sdk.Allow(), nil
	}
	args := map[string]json.RawMessage{}
	if len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, &args); err != nil {
			return nil, fmt.Errorf("arguments: %w", err)
		}
	}
	if args == nil {
		args = map[string]json.RawMessage{} // the arguments were null
	}
	added := false
	for k, v := range g.defaults {
		if _, ok := args[k]; !ok {
			args[k] = v
			added = true
		}
	}
	if !added {
		return sdk.Allow(), nil
	}
	out, err := json.Marshal(args)
	if err != nil {
		return nil, err
	}
	return sdk.Rewrite(out), nil
}

// email matches an e-mail address.
var email = regexp.MustCompile(`[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}`)

const redacted = "[redacted email]"

// textsOf are, for each method whose results guard redacts other than a tool's, where the
// texts are in its result: a path of members, "*" for every item of an array.
var textsOf = map[string][]string{
	"resources/read":      {"contents", "*", "text"},
	"prompts/get":         {"messages", "*", "content", "text"},
	"completion/complete": {"completion", "values", "*"},
}

func (g *guard) Inspect(_ context.Context, call *sdk.Call, result json.RawMessage) (json.RawMessage, error) {
	path, ok := textsOf[call.Method]
	if !ok {
		// tools/call, and tasks/result: a tool's result.
		return inspectToolResult(result)
	}
	v, err := decode(result)
	if err != nil {
		return nil, fmt.Errorf("result: %w", err)
	}
	if v, changed := redactAt(v, path); changed {
		return marshal(v), nil
	}
	return result, nil
}

// redactAt redacts the e-mail addresses in the strings of v found at path (see textsOf),
// and says whether there were any.
func redactAt(v any, path []string) (any, bool) {
	if len(path) == 0 {
		if s, ok := v.(string); ok && email.MatchString(s) {
			return email.ReplaceAllString(s, redacted), true
		}
		return v, false
	}
	changed := false
	switch v := v.(type) {
	case map[string]any:
		if e, ok := v[path[0]]; ok {
			if e, ok := redactAt(e, path[1:]); ok {
				v[path[0]], changed = e, true
			}
		}
	case []any:
		if path[0] != "*" {
			return v, false
		}
		for i, e := range v {
			if e, ok := redactAt(e, path[1:]); ok {
				v[i], changed = e, true
			}
		}
	}
	return v, changed
}

// inspectToolResult redacts a CallToolResult: the text of its content items and every string
// of its structuredContent.
func inspectToolResult(result json.RawMessage) (json.RawMessage, error) {
	var r map[string]json.RawMessage
	if err := json.Unmarshal(result, &r); err != nil {
		return nil, fmt.Errorf("result: %w", err)
	}
	changed := false
	if raw, ok := r["content"]; ok {
		var items []map[string]json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return nil, fmt.Errorf("result content: %w", err)
		}
		itemsChanged := false
		for _, item := range items {
			var text string
			if t, ok := item["text"]; !ok || json.Unmarshal(t, &text) != nil || !email.MatchString(text) {
				continue
			}
			item["text"] = marshal(email.ReplaceAllString(text, redacted))
			itemsChanged = true
		}
		if itemsChanged {
			r["content"], changed = marshal(items), true
		}
	}
	if raw, ok := r["structuredContent"]; ok {
		v, err := decode(raw)
		if err != nil {
			return nil, fmt.Errorf("result structuredContent: %w", err)
		}
		if v, ok := redact(v); ok {
			r["structuredContent"], changed = marshal(v), true
		}
	}
	if !changed {
		return result, nil
	}
	return marshal(r), nil
}

// redact returns v with the e-mail addresses in its strings (at any depth) redacted, and
// whether there were any.
func redact(v any) (any, bool) {
	switch v := v.(type) {
	case string:
		if email.MatchString(v) {
			return email.ReplaceAllString(v, redacted), true
		}
	case map[string]any:
		changed := false
		for k, e := range v {
			if e, ok := redact(e); ok {
				v[k], changed = e, true
			}
		}
		return v, changed
	case []any:
		changed := false
		for i, e := range v {
			if e, ok := redact(e); ok {
				v[i], changed = e, true
			}
		}
		return v, changed
	}
	return v, false
}

// decode decodes JSON keeping numbers exact.
func decode(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// marshal encodes v without escaping <, > and & (the result goes to a client, not a page).
func marshal(v any) json.RawMessage {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err) // v came from decoding JSON: it always encodes
	}
	return bytes.TrimRight(b.Bytes(), "\n")
}

// escapePointer escapes a key for a JSON Pointer (RFC 6901, section 3).
func escapePointer(k string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(k)
}
