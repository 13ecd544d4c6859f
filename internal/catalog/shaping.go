package catalog

import (
	"encoding/json"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/manifold-mcp/manifold/internal/glob"
	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/upstream"
)

// Shaping is what an upstream's items look like to clients beyond its prefix: which are
// listed (filters over the upstream's own names and URIs) and, for tools and prompts, under
// what name, title, description and annotations. It is applied when a snapshot is built, so
// that the call path stays a table lookup. The zero Shaping changes nothing.
type Shaping struct {
	// Filters keep or drop items, by kind, by the upstream's own name, URI or URI template.
	Filters [upstream.NumKinds]Filter
	// Overrides change tools and prompts (indexes upstream.Tools and upstream.Prompts), by
	// the upstream's own name.
	Overrides [upstream.NumKinds]map[string]Override
}

// Filter keeps or drops items by glob. The zero Filter keeps everything.
type Filter struct {
	include glob.Set
	// restricted is set when include applies: an empty include then keeps nothing.
	restricted bool
	exclude    glob.Set
}

// NewFilter returns the filter that keeps what one of include matches (everything when
// include is nil) and that no pattern of exclude matches. The patterns are compiled; the
// first that does not compile is the error.
func NewFilter(include, exclude []string) (Filter, error) {
	in, err := glob.CompileSet(include)
	if err != nil {
		return Filter{}, err
	}
	ex, err := glob.CompileSet(exclude)
	if err != nil {
		return Filter{}, err
	}
	return Filter{include: in, restricted: include != nil, exclude: ex}, nil
}

// Keeps reports whether the filter keeps the item named s.
func (f Filter) Keeps(s string) bool {
	return (!f.restricted || f.include.Match(s)) && !f.exclude.Match(s)
}

// keepsAll reports whether the filter keeps every item.
func (f Filter) keepsAll() bool { return !f.restricted && len(f.exclude) == 0 }

// Override changes how one tool or prompt looks to clients; an empty field keeps the
// upstream's.
type Override struct {
	// Name replaces the item's name before the prefix: clients see and call it, the upstream
	// receives its own.
	Name        string
	Title       string
	Description string
	// Annotations set a tool's annotation hints, such as readOnlyHint; its other
	// annotations stay.
	Annotations map[string]bool
}

// shapeItem returns an upstream's list entry as clients see it: its key field set to
// exposed, a resource's or template's name behind the prefix, and an override's fields.
func shapeItem(raw json.RawMessage, k upstream.Kind, exposed string, ns *Namespace, sep string, ov *Override) (json.RawMessage, error) {
	raw, err := rewriteField(raw, k.KeyField(), exposed)
	if err != nil {
		return nil, err
	}
	if (k == upstream.Resources || k == upstream.ResourceTemplates) && ns.Prefix != "" {
		// Two upstreams' "readme" must be told apart in a host's picker, as tool names are.
		if name, ok, _ := protocol.StringMember(raw, "name"); ok && name != "" {
			if raw, err = rewriteField(raw, "name", ns.Prefix+sep+name); err != nil {
				return nil, err
			}
		}
	}
	if ov == nil {
		return raw, nil
	}
	if ov.Title != "" {
		if raw, err = rewriteField(raw, "title", ov.Title); err != nil {
			return nil, err
		}
	}
	if ov.Description != "" {
		if raw, err = rewriteField(raw, "description", ov.Description); err != nil {
			return nil, err
		}
	}
	if len(ov.Annotations) > 0 {
		annotations, ok, _ := protocol.Member(raw, "annotations")
		if !ok || !isObject(annotations) {
			annotations = json.RawMessage(`{}`)
		}
		// In a fixed order: the list's bytes, and so its version, must not change from one
		// build to the next.
		for _, hint := range slices.Sorted(maps.Keys(ov.Annotations)) {
			if annotations, err = protocol.SetMember(annotations, hint, json.RawMessage(boolJSON(ov.Annotations[hint]))); err != nil {
				return nil, err
			}
		}
		if raw, err = protocol.SetMember(raw, "annotations", annotations); err != nil {
			return nil, err
		}
	}
	return raw, nil
}

func isObject(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return strings.HasPrefix(s, "{")
}

func boolJSON(v bool) string {
	if v {
		return "true"
	}
	return "false"
}

// templatePattern returns a regexp that matches the URIs a URI template (RFC 6570) expands
// to, and the template itself: a simple {var} expands to text without '/', '?' or '#'
// (they are percent-encoded), other expressions ({+path}, {/seg}, {?query}, …) to any text.
// A read of such a URI is allowed where the template is listed, whatever filter applies to
// listed resources. nil for a template that does not compile (never expected).
func templatePattern(template string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString(`(?s)^`)
	rest := template
	for {
		open := strings.IndexByte(rest, '{')
		if open < 0 {
			break
		}
		end := strings.IndexByte(rest[open:], '}')
		if end < 0 {
			break
		}
		b.WriteString(regexp.QuoteMeta(rest[:open]))
		expr := rest[open+1 : open+end]
		if expr != "" && strings.ContainsRune("+#./;?&", rune(expr[0])) {
			b.WriteString(`.*`)
		} else {
			b.WriteString(`(?:[^/?#]*|` + regexp.QuoteMeta(rest[open:open+end+1]) + `)`)
		}
		rest = rest[open+end+1:]
	}
	b.WriteString(regexp.QuoteMeta(rest))
	b.WriteString(`$`)
	re, err := regexp.Compile(b.String())
	if err != nil {
		return nil
	}
	return re
}
