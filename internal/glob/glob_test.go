package glob

import (
	"strings"
	"testing"
)

func TestMatch(t *testing.T) {
	tests := []struct {
		pattern string
		match   []string
		miss    []string
	}{
		{"read_file", []string{"read_file"}, []string{"read_files", "Read_file", "read_fil"}},
		{"read_*", []string{"read_", "read_file", "read_a/b"}, []string{"rea", "write_file", "xread_file"}},
		{"*", []string{"", "anything", "file:///a/b/c"}, nil},
		{"**", []string{"", "a/b"}, nil},
		{"file:///docs/*", []string{"file:///docs/a", "file:///docs/a/b.md"}, []string{"file:///doc/a", "file:///etc/passwd"}},
		{"a?c", []string{"abc", "a/c"}, []string{"ac", "abbc"}},
		{"[ab]x", []string{"ax", "bx"}, []string{"cx", "x"}},
		{"[!ab]x", []string{"cx", "-x"}, []string{"ax", "bx"}},
		{"[a-c]", []string{"a", "b", "c"}, []string{"d", "-"}},
		{"[]]", []string{"]"}, []string{"["}},
		{"x[-]y", []string{"x-y"}, []string{"xay"}},
		{`\*`, []string{"*"}, []string{"a", `\*`}},
		{`a\?b`, []string{"a?b"}, []string{"axb"}},
		{"a.b(c)+$^", []string{"a.b(c)+$^"}, []string{"axb(c)+$^", "a.bc"}},
		{"get_{id}", []string{"get_{id}"}, []string{"get_1"}},
		{"*", []string{"a\nb"}, nil},
		{"file:///secret/*", []string{"file:///secret/key\n"}, []string{"file:///public/\nfile:///secret/x"}},
		{"a?b", []string{"a\nb"}, nil},
		{`[a\-z]`, []string{"a", "-", "z"}, []string{"b"}},
		{`[\]x]`, []string{"]", "x"}, []string{"\\"}},
	}
	for _, tt := range tests {
		p, err := Compile(tt.pattern)
		if err != nil {
			t.Fatalf("Compile(%q): %v", tt.pattern, err)
		}
		for _, s := range tt.match {
			if !p.Match(s) {
				t.Errorf("%q does not match %q; it should", tt.pattern, s)
			}
		}
		for _, s := range tt.miss {
			if p.Match(s) {
				t.Errorf("%q matches %q; it should not", tt.pattern, s)
			}
		}
	}
}

func TestCompileRefusesBadPatterns(t *testing.T) {
	tests := []struct{ pattern, want string }{
		{"", "empty pattern"},
		{"read_[", "without its closing ]"},
		{"[a-", "without its closing ]"},
		{`a\`, `lone \`},
		{`[a\`, `lone \`},
		{"[z-a]", "not a valid pattern"},
	}
	for _, tt := range tests {
		_, err := Compile(tt.pattern)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Compile(%q) = %v, want an error with %q", tt.pattern, err, tt.want)
		}
	}
}

func TestSet(t *testing.T) {
	var none Set
	if none.Match("x") {
		t.Error("the nil set matches")
	}
	set, err := CompileSet([]string{"a*", "b"})
	if err != nil {
		t.Fatal(err)
	}
	if !set.Match("abc") || !set.Match("b") || set.Match("c") {
		t.Error("set matches wrongly")
	}
	_, err = CompileSet([]string{"ok", "bad["})
	var se *SetError
	if err == nil || !asSetError(err, &se) || se.Index != 1 {
		t.Errorf("CompileSet error = %v, want a SetError for index 1", err)
	}
}

func asSetError(err error, target **SetError) bool {
	se, ok := err.(*SetError)
	*target = se
	return ok
}
