package modern

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/manifold-mcp/manifold/internal/protocol"
)

// annotation is the JSON Schema keyword that marks a tool argument to mirror in a header.
const annotation = "x-mcp-header"

// ErrInvalidAnnotation is wrapped by the error of [HeaderParams] for a schema whose
// x-mcp-header annotations break the rules of SEP-2243. A client drops such a tool from its
// list, and so does the gateway from the lists it serves.
var ErrInvalidAnnotation = errors.New("invalid x-mcp-header annotation")

// Param is a tool argument that a modern tools/call mirrors in a Mcp-Param-* header.
type Param struct {
	// Header is the annotation's value; the header is HeaderParamPrefix followed by it.
	Header string
	// Path is the chain of property names from the arguments object to the argument.
	Path []string
	// Type is the argument's JSON Schema type: "string", "integer" or "boolean".
	Type string
}

// HeaderName returns the name of the header that mirrors the argument.
func (p Param) HeaderName() string { return HeaderParamPrefix + p.Header }

// argument names the argument in error messages: arguments.a.b.
func (p Param) argument() string { return "arguments." + strings.Join(p.Path, ".") }

// HeaderParams returns the arguments a tool's inputSchema marks with x-mcp-header, ordered by
// path. An annotation is valid (SEP-2243) when its value is a non-empty string of RFC 9110
// token characters, unique case-insensitively within the schema, on a property of type
// string, integer or boolean (or one of those and null), reached from the root through
// properties alone (nested objects are fine; items, the composition keywords, $defs and the
// like are not). One invalid annotation makes the whole schema invalid: the error wraps
// ErrInvalidAnnotation and says where. A nil or empty schema has no params.
func HeaderParams(schema json.RawMessage) ([]Param, error) {
	if len(bytes.TrimSpace(schema)) == 0 || isNull(schema) {
		return nil, nil
	}
	if !bytes.Contains(schema, []byte(annotation)) && bytes.IndexByte(schema, '\\') < 0 {
		return nil, nil // the common case, without decoding (a key may be escaped)
	}
	dec := json.NewDecoder(bytes.NewReader(schema))
	dec.UseNumber()
	var root any
	if err := dec.Decode(&root); err != nil {
		return nil, fmt.Errorf("decode input schema: %w", err)
	}
	w := paramWalker{seen: map[string]string{}}
	if err := w.walk(root, "", nil, true); err != nil {
		return nil, err
	}
	slices.SortFunc(w.params, func(a, b Param) int { return slices.Compare(a.Path, b.Path) })
	return w.params, nil
}

// paramWalker collects the annotations of one schema.
type paramWalker struct {
	params []Param
	seen   map[string]string // lowercased header → where it was declared
}

// Keywords whose values are subschemas, by shape. An annotation under any of them is out of
// the reach of the properties chain.
var (
	schemaMapKeywords   = []string{"patternProperties", "$defs", "definitions", "dependentSchemas"}
	schemaOneKeywords   = []string{"additionalProperties", "items", "additionalItems", "contains", "not", "if", "then", "else", "propertyNames", "unevaluatedProperties", "unevaluatedItems", "contentSchema"}
	schemaArrayKeywords = []string{"allOf", "anyOf", "oneOf", "prefixItems", "items"}
)

// walk visits the schema node at the JSON pointer at; path is the chain of property names
// that leads to it, and reachable says whether that chain is made of properties alone.
func (w *paramWalker) walk(node any, at string, path []string, reachable bool) error {
	obj, ok := node.(map[string]any)
	if !ok {
		return nil // a boolean schema, or not a schema
	}
	if value, ok := obj[annotation]; ok {
		if err := w.add(obj, value, at, path, reachable); err != nil {
			return err
		}
	}
	if props, ok := obj["properties"].(map[string]any); ok {
		for _, name := range sortedKeys(props) {
			if err := w.walk(props[name], at+"/properties/"+pointerToken(name), append(slices.Clip(path), name), reachable); err != nil {
				return err
			}
		}
	}
	for _, kw := range schemaMapKeywords {
		if m, ok := obj[kw].(map[string]any); ok {
			for _, name := range sortedKeys(m) {
				if err := w.walk(m[name], at+"/"+kw+"/"+pointerToken(name), nil, false); err != nil {
					return err
				}
			}
		}
	}
	for _, kw := range schemaOneKeywords {
		if err := w.walk(obj[kw], at+"/"+kw, nil, false); err != nil {
			return err
		}
	}
	for _, kw := range schemaArrayKeywords {
		if list, ok := obj[kw].([]any); ok {
			for i, sub := range list {
				if err := w.walk(sub, at+"/"+kw+"/"+strconv.Itoa(i), nil, false); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func (w *paramWalker) add(obj map[string]any, value any, at string, path []string, reachable bool) error {
	where := at
	if where == "" {
		where = "the schema's root"
	}
	if !reachable || len(path) == 0 {
		return fmt.Errorf("%w at %s: only a property reached through properties may carry one", ErrInvalidAnnotation, where)
	}
	header, ok := value.(string)
	if !ok || header == "" {
		return fmt.Errorf("%w at %s: the value must be a non-empty string", ErrInvalidAnnotation, where)
	}
	if i := strings.IndexFunc(header, func(r rune) bool { return !isTokenChar(r) }); i >= 0 {
		return fmt.Errorf("%w at %s: %q holds %q, which a header name cannot", ErrInvalidAnnotation, where, header, header[i:i+1])
	}
	lower := strings.ToLower(header)
	if first, dup := w.seen[lower]; dup {
		return fmt.Errorf("%w at %s: %q is already used at %s", ErrInvalidAnnotation, where, header, first)
	}
	w.seen[lower] = where
	typ, ok := scalarType(obj["type"])
	if !ok {
		return fmt.Errorf("%w at %s: only a string, integer or boolean property may carry one", ErrInvalidAnnotation, where)
	}
	w.params = append(w.params, Param{Header: header, Path: slices.Clone(path), Type: typ})
	return nil
}

// scalarType returns the type a schema's type member gives when it is string, integer or
// boolean, alone or with null.
func scalarType(t any) (string, bool) {
	var names []string
	switch t := t.(type) {
	case string:
		names = []string{t}
	case []any:
		for _, v := range t {
			s, ok := v.(string)
			if !ok {
				return "", false
			}
			if s != "null" {
				names = append(names, s)
			}
		}
	}
	if len(names) != 1 {
		return "", false
	}
	switch names[0] {
	case "string", "integer", "boolean":
		return names[0], true
	}
	return "", false
}

// isTokenChar reports whether r may appear in an RFC 9110 token (a header name).
func isTokenChar(r rune) bool {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		return true
	}
	return strings.ContainsRune("!#$%&'*+-.^_`|~", r)
}

func sortedKeys(m map[string]any) []string { return slices.Sorted(maps.Keys(m)) }

// pointerToken escapes a name for a JSON pointer (RFC 6901).
func pointerToken(name string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(name)
}

// argumentAt returns the raw value at path in a tools/call's arguments object, or nil when
// it is absent or null.
func argumentAt(arguments json.RawMessage, path []string) json.RawMessage {
	v := arguments
	for _, name := range path {
		if !isObject(v) {
			return nil
		}
		var ok bool
		var err error
		if v, ok, err = protocol.Member(v, name); err != nil || !ok {
			return nil
		}
	}
	if isNull(v) {
		return nil
	}
	return v
}

// checkParams mirrors each annotated argument of a tools/call against its header.
func checkParams(headers mcpHeaders, params json.RawMessage, toolParams []Param) error {
	arguments, _, err := protocol.Member(params, "arguments")
	if err != nil {
		return invalidParams("Invalid params: tools/call needs params as an object")
	}
	for _, p := range toolParams {
		arg := argumentAt(arguments, p.Path)
		got, present, err := headers.value(p.HeaderName())
		switch {
		case err != nil:
			return err
		case arg == nil && present:
			return headerMismatch("Header mismatch: %s is %s but %s is absent", p.HeaderName(), quoteValue(got), p.argument())
		case arg == nil:
			continue
		case !present:
			return headerMismatch("Header mismatch: the %s header is required when %s is given", p.HeaderName(), p.argument())
		}
		if !headerMatches(got, arg) {
			return headerMismatch("Header mismatch: %s is %s but %s is %s", p.HeaderName(), quoteValue(got), p.argument(), quoteValue(argumentText(arg)))
		}
	}
	return nil
}

// headerMatches reports whether a decoded header value mirrors the raw JSON value arg: a
// string as it is, a boolean as true or false, a number compared numerically (so 10, 1e1
// and 10.0 agree). An object or array matches nothing.
func headerMatches(header string, arg json.RawMessage) bool {
	switch arg[0] {
	case '"':
		var s string
		return json.Unmarshal(arg, &s) == nil && s == header
	case 't', 'f':
		return string(arg) == header
	case '{', '[':
		return false
	}
	a, okA := canonicalNumber(string(arg))
	h, okH := canonicalNumber(header)
	return okA && okH && a == h
}

// headerText returns the header value (before encoding) that mirrors the raw JSON value
// arg: a string as it is, a boolean as true or false, an integral number in decimal.
func headerText(arg json.RawMessage) (string, error) {
	switch arg[0] {
	case '"':
		var s string
		err := json.Unmarshal(arg, &s)
		return s, err
	case 't', 'f':
		return string(arg), nil
	case '{', '[':
		return "", errors.New("an object or array cannot be mirrored in a header")
	}
	if d, ok := decimalInteger(string(arg)); ok {
		return d, nil
	}
	return string(arg), nil
}

// argumentText shows a raw argument in a message: a string as its value, anything else as
// its JSON.
func argumentText(arg json.RawMessage) string {
	var s string
	if arg[0] == '"' && json.Unmarshal(arg, &s) == nil {
		return s
	}
	return string(arg)
}

// UpstreamHeaders returns the standard headers of a modern request toward an upstream:
// Mcp-Method, Mcp-Name (name, for the methods that carry one: the upstream's own tool or
// prompt name, or the resource URI) and, for tools/call, a Mcp-Param-* header for each of
// params (the upstream tool's annotations, from [HeaderParams]) whose argument is present
// and not null. Values are encoded with [EncodeHeaderValue]. The caller sets
// MCP-Protocol-Version to the version it chose for that upstream. The error says which
// argument cannot be mirrored (an object or array where the schema wants a scalar); the
// upstream would refuse such arguments.
func UpstreamHeaders(method, name string, arguments json.RawMessage, params []Param) (http.Header, error) {
	h := http.Header{}
	h.Set(HeaderMethod, EncodeHeaderValue(method))
	if nameMember(method) != "" {
		h.Set(HeaderName, EncodeHeaderValue(name))
	}
	if method != protocol.MethodCallTool {
		return h, nil
	}
	for _, p := range params {
		arg := argumentAt(arguments, p.Path)
		if arg == nil {
			continue
		}
		text, err := headerText(arg)
		if err != nil {
			return nil, fmt.Errorf("mirror %s in %s: %w", p.argument(), p.HeaderName(), err)
		}
		h.Set(p.HeaderName(), EncodeHeaderValue(text))
	}
	return h, nil
}
