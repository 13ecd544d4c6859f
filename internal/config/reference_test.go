package config

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/internal/docpage"
)

const referencePage = "../../docs/configuration.md"

// TestConfigurationReference fails when docs/configuration.md is not what the decoder's
// keys, the field comments and the defaults make of it now.
func TestConfigurationReference(t *testing.T) {
	got, missing := renderReference(t)
	if len(missing) > 0 {
		t.Fatalf("keys without text: %s: add a field comment saying (key `name`)", strings.Join(missing, ", "))
	}
	docpage.Check(t, referencePage, got, "go generate ./internal/config/")
}

// TestEveryKeyHasText fails when a key the decoder accepts has no field comment naming it.
func TestEveryKeyHasText(t *testing.T) {
	ref := newReference(t)
	for _, s := range ref.sections {
		for _, k := range s.Keys {
			if ref.doc(s.Path, k).text == "" {
				t.Errorf("%s has no text: add a comment saying (key `%s`) to its field", join(s.Path, k), k)
			}
		}
	}
}

// TestReferenceTiesEachKeyToItsField: keys named by one comment above fields declared one
// per line get each its own field's default (read_timeout showed dial_timeout's 2s).
func TestReferenceTiesEachKeyToItsField(t *testing.T) {
	ref := newReference(t)
	tests := []struct{ path, key, field string }{
		{"session_store", "dial_timeout", "DialTimeout"},
		{"session_store", "read_timeout", "ReadTimeout"},
		{"session_store", "write_timeout", "WriteTimeout"},
		{"upstreams[]", "inherit_env", "InheritEnv"},
	}
	for _, tt := range tests {
		if got := ref.doc(tt.path, tt.key).field; got != tt.field {
			t.Errorf("%s.%s is documented from field %q, want %q", tt.path, tt.key, got, tt.field)
		}
	}
}

// reference is what the page is made of: the decoder's sections, the field comments and
// the struct type each section decodes into.
type reference struct {
	sections []Section
	docs     map[string]map[string]fieldDoc
	types    map[string]string // by section path; "" when no struct type has its keys
}

func newReference(t *testing.T) *reference {
	t.Helper()
	ref := &reference{sections: Sections(), docs: fieldDocs(t), types: map[string]string{"": "Config"}}
	// A section decodes into the type of the field of the key it is under; Sections lists
	// a section after the one holding it.
	for _, s := range ref.sections[1:] {
		parentPath, key := splitSection(s.Path)
		ref.types[s.Path] = ref.docs[ref.types[parentPath]][key].typ
	}
	return ref
}

// doc returns the comment of key in the section at path: its field's, or else the comment
// of the key that holds the section, if that one names the key (as in "a mapping of
// subject, email, ...").
func (r *reference) doc(path, key string) fieldDoc {
	if d := r.docs[r.types[path]][key]; d.text != "" {
		return d
	}
	parentPath, parentKey := splitSection(path)
	if parentKey == "" {
		return fieldDoc{}
	}
	d := r.docs[r.types[parentPath]][parentKey]
	if regexp.MustCompile(`\b` + regexp.QuoteMeta(key) + `\b`).MatchString(d.text) {
		return fieldDoc{text: "See `" + parentKey + "`: " + d.text}
	}
	return fieldDoc{}
}

// splitSection returns the path of the section holding the one at path and the key it is
// under ("" for the top level), leaving out list items and named entries.
func splitSection(path string) (string, string) {
	path = strings.TrimSuffix(strings.TrimSuffix(path, ".<name>"), "[]")
	if path == "" {
		return "", ""
	}
	i := strings.LastIndex(path, ".")
	if i < 0 {
		return "", path
	}
	return path[:i], path[i+1:]
}

// fieldDoc is a struct field that a comment ties to a key: its name, its comment and the
// struct type it holds, if any (through a pointer, a list or a mapping).
type fieldDoc struct{ field, text, typ string }

// keyMention matches "key `a`", "key `a: false`" and "keys `a`, `b` and `c`" in a field
// comment.
var (
	keyMention = regexp.MustCompile("\\bkeys? `[A-Za-z0-9_]+[^`]*`(?:,? (?:and )?`[A-Za-z0-9_]+`)*")
	quotedKey  = regexp.MustCompile("`([A-Za-z0-9_]+)")
)

// fieldDocs reads the comments of the package's struct fields: by type, then by key.
func fieldDocs(t *testing.T) map[string]map[string]fieldDoc {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	docs := make(map[string]map[string]fieldDoc)
	for _, f := range pkgs["config"].Files {
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				return false
			}
			var fieldNames []string
			for _, fl := range st.Fields.List {
				for _, n := range fl.Names {
					fieldNames = append(fieldNames, n.Name)
				}
			}
			for _, fl := range st.Fields.List {
				if fl.Doc == nil {
					continue
				}
				names := fl.Names
				if len(names) == 0 { // an embedded struct
					if id, ok := fl.Type.(*ast.Ident); ok {
						names = []*ast.Ident{id}
					} else {
						continue
					}
				}
				text := strings.Join(strings.Fields(fl.Doc.Text()), " ")
				for _, m := range keyMention.FindAllString(text, -1) {
					keys := quotedKey.FindAllStringSubmatch(m, -1)
					if docs[ts.Name.Name] == nil {
						docs[ts.Name.Name] = make(map[string]fieldDoc)
					}
					for i, k := range keys {
						// Fields declared together ("Groups, Roles []string") name their keys in order.
						name := names[0].Name
						if len(keys) == len(names) {
							name = names[i].Name
						}
						// One comment above fields declared one per line ("DialTimeout,
						// ReadTimeout and WriteTimeout …") ties each key to the field
						// named like it.
						if f := fieldNamed(fieldNames, k[1]); f != "" {
							name = f
						}
						docs[ts.Name.Name][k[1]] = fieldDoc{field: name, text: text, typ: elemType(fl.Type)}
					}
				}
			}
			return false
		})
	}
	return docs
}

// fieldNamed returns the field whose name is key without its underscores, in any case
// (read_timeout: ReadTimeout), or "".
func fieldNamed(fields []string, key string) string {
	for _, f := range fields {
		if strings.EqualFold(f, strings.ReplaceAll(key, "_", "")) {
			return f
		}
	}
	return ""
}

// elemType returns the name of the type x holds, through pointers, lists and mappings, or
// "" for a type of another package.
func elemType(x ast.Expr) string {
	for {
		switch e := x.(type) {
		case *ast.StarExpr:
			x = e.X
		case *ast.ArrayType:
			x = e.Elt
		case *ast.MapType:
			x = e.Value
		case *ast.Ident:
			return e.Name
		default:
			return ""
		}
	}
}

// referenceSample is the config whose values show the defaults. Its upstream's name and
// command are no defaults, nor the prefix made of the name: values equal to probeName are
// not shown.
const referenceSample = "upstreams:\n  - name: " + probeName + "\n    command: " + probeName + "\n"

// renderReference writes the page and returns the keys without text.
func renderReference(t *testing.T) ([]byte, []string) {
	t.Helper()
	ref := newReference(t)
	c, err := Parse("gateway.yaml", []byte(referenceSample), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("parsing the sample: %v", err)
	}
	// value returns the struct the section at path decodes into in the sample, if there is one.
	var value func(path string) (reflect.Value, bool)
	value = func(path string) (reflect.Value, bool) {
		if path == "" {
			return reflect.ValueOf(c).Elem(), true
		}
		if strings.HasSuffix(path, ".<name>") {
			return reflect.Value{}, false
		}
		parentPath, key := splitSection(path)
		pv, ok := value(parentPath)
		if !ok {
			return pv, false
		}
		v, ok := fieldValue(pv, ref.doc(parentPath, key).field)
		if !ok {
			return v, false
		}
		if strings.HasSuffix(path, "[]") {
			if v.Kind() != reflect.Slice || v.Len() == 0 {
				return reflect.Value{}, false
			}
			v = v.Index(0)
		}
		if v.Kind() == reflect.Pointer && !v.IsNil() {
			v = v.Elem()
		}
		return v, v.Kind() == reflect.Struct
	}

	var b bytes.Buffer
	var missing []string
	b.WriteString("# Configuration reference\n\n")
	b.WriteString("<!-- Generated by `go generate ./internal/config/` from the decoder's keys, the field comments and the defaults; do not edit. -->\n\n")
	b.WriteString("Every key of the config file, by section. A list item is written `[]`, an entry keyed by a name `<name>`. ")
	b.WriteString("The default column shows the value the gateway uses when the key is left out, where that is a plain value; the description says the rest.\n")
	for _, s := range ref.sections {
		title := "Top level"
		if s.Path != "" {
			title = "`" + s.Path + "`"
		}
		fmt.Fprintf(&b, "\n## %s\n\n| Key | Default | Description |\n| --- | --- | --- |\n", title)
		sv, hasValue := value(s.Path)
		for _, k := range s.Keys {
			d := ref.doc(s.Path, k)
			if d.text == "" {
				missing = append(missing, join(s.Path, k))
			}
			def := ""
			if hasValue {
				if v, ok := fieldValue(sv, d.field); ok {
					def = formatDefault(v)
				}
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s |\n", k, def, strings.ReplaceAll(d.text, "|", "\\|"))
		}
	}
	return b.Bytes(), missing
}

func fieldValue(v reflect.Value, name string) (reflect.Value, bool) {
	if name == "" || v.Kind() != reflect.Struct {
		return reflect.Value{}, false
	}
	f := v.FieldByName(name)
	return f, f.IsValid()
}

// formatDefault shows a plain value; zero values and structured ones show nothing.
func formatDefault(v reflect.Value) string {
	if !v.IsValid() || v.IsZero() || v.Kind() == reflect.String && v.String() == probeName {
		return ""
	}
	if d, ok := v.Interface().(time.Duration); ok {
		return "`" + d.String() + "`"
	}
	switch v.Kind() {
	case reflect.String, reflect.Bool, reflect.Int, reflect.Int64, reflect.Float64:
		return fmt.Sprintf("`%v`", v.Interface())
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.String {
			return fmt.Sprintf("`%s`", strings.Join(v.Interface().([]string), ", "))
		}
	}
	return ""
}

// TestSections checks that the probe reaches mappings of every shape: the top level, a
// section, a list item, an entry keyed by a name, and those nested in them.
func TestSections(t *testing.T) {
	keys := make(map[string][]string)
	for _, s := range Sections() {
		keys[s.Path] = s.Keys
	}
	tests := []struct{ path, key string }{
		{"", "listen"},
		{"", "overrides"},
		{"session_store.sentinel", "master"},
		{"upstreams[]", "resource_templates"},
		{"upstreams[].credentials.header_files[]", "prefix"},
		{"upstreams[].tools.overrides.<name>.annotations", "readOnlyHint"},
		{"overrides[]", "isolation"},
		{"profiles[]", "name"},
		{"policy.rules[].match.arguments[]", "pointer"},
		{"plugins[]", "sha256"},
	}
	for _, tt := range tests {
		if !slices.Contains(keys[tt.path], tt.key) {
			t.Errorf("section %q: keys %q, want %q among them", tt.path, keys[tt.path], tt.key)
		}
	}
}
