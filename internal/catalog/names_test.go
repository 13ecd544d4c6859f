package catalog

import (
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var (
	exposedNameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)
	// rfc3986Scheme is RFC 3986's scheme = ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ).
	rfc3986Scheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*$`)
	prefixRE      = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,32}$`)
)

func TestExposedName(t *testing.T) {
	long61 := strings.Repeat("a", 61)
	tests := []struct {
		name              string
		prefix, sep, tool string
		want              string
	}{
		{name: "prefix and separator", prefix: "gh", sep: "__", tool: "search", want: "gh__search"},
		{name: "dot separator", prefix: "gh", sep: ".", tool: "search", want: "gh.search"},
		{name: "empty prefix leaves the name unchanged", prefix: "", sep: "__", tool: "search", want: "search"},
		{name: "empty prefix ignores the separator", prefix: "", sep: "/", tool: "a.b-c_D9", want: "a.b-c_D9"},
		{name: "allowed punctuation kept", prefix: "my-srv.v2", sep: "_", tool: "get.item-x", want: "my-srv.v2_get.item-x"},
		{name: "space replaced and hash added", prefix: "gh", sep: "__", tool: "list files", want: "gh__list_files_7aaccfad"},
		{name: "non-ASCII replaced byte by byte", prefix: "gh", sep: "__", tool: "héllo", want: "gh__h__llo_4bb63e9e"},
		{name: "separator outside the set replaced", prefix: "gh", sep: "/", tool: "search", want: "gh_search_40970334"},
		{name: "empty name", prefix: "", sep: "__", tool: "", want: "__e3b0c442"},
		{name: "exactly 64 characters kept", prefix: "gh", sep: "__", tool: strings.Repeat("a", 60), want: "gh__" + strings.Repeat("a", 60)},
		{name: "65 characters truncated with hash", prefix: "gh", sep: "__", tool: long61, want: "gh__" + strings.Repeat("a", 51) + "_cd82315a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ExposedName(tt.prefix, tt.sep, tt.tool)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ExposedName(%q, %q, %q) (-want +got):\n%s", tt.prefix, tt.sep, tt.tool, diff)
			}
			if !exposedNameRE.MatchString(got) {
				t.Errorf("ExposedName(%q, %q, %q) = %q, not within ^[A-Za-z0-9_.-]{1,64}$", tt.prefix, tt.sep, tt.tool, got)
			}
			if again := ExposedName(tt.prefix, tt.sep, tt.tool); again != got {
				t.Errorf("ExposedName(%q, %q, %q) not deterministic: %q then %q", tt.prefix, tt.sep, tt.tool, got, again)
			}
		})
	}
}

// TestExposedNameDistinct checks that originals which sanitising or truncation would merge
// still get different exposed names.
func TestExposedNameDistinct(t *testing.T) {
	head := strings.Repeat("x", 64)
	tests := []struct {
		name string
		a, b [3]string // prefix, separator, name
	}{
		{name: "long names sharing a 64-character head", a: [3]string{"gh", "__", head + "a"}, b: [3]string{"gh", "__", head + "b"}},
		{name: "long names differing only at the end", a: [3]string{"", "__", head + strings.Repeat("y", 100) + "1"}, b: [3]string{"", "__", head + strings.Repeat("y", 100) + "2"}},
		{name: "64-character name and a longer one", a: [3]string{"", "__", head}, b: [3]string{"", "__", head + "x"}},
		{name: "names that sanitise alike", a: [3]string{"gh", "__", "a b"}, b: [3]string{"gh", "__", "a/b"}},
		{name: "sanitised name and its clean look-alike", a: [3]string{"gh", "__", "a b"}, b: [3]string{"gh", "__", "a_b"}},
		{name: "different prefixes", a: [3]string{"gh", "__", "search"}, b: [3]string{"gl", "__", "search"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := ExposedName(tt.a[0], tt.a[1], tt.a[2])
			b := ExposedName(tt.b[0], tt.b[1], tt.b[2])
			if a == b {
				t.Errorf("ExposedName%q and ExposedName%q are both %q", tt.a, tt.b, a)
			}
			for _, got := range []string{a, b} {
				if !exposedNameRE.MatchString(got) {
					t.Errorf("exposed name %q (%d bytes) not within ^[A-Za-z0-9_.-]{1,64}$", got, len(got))
				}
			}
		})
	}
}

func TestURIScheme(t *testing.T) {
	tests := []struct {
		name   string
		prefix string
		want   string
	}{
		{name: "empty prefix means no scheme", prefix: "", want: ""},
		{name: "lowercase kept", prefix: "github", want: "github"},
		{name: "uppercase lowered", prefix: "GitHub", want: "github"},
		{name: "digits, dot and hyphen kept", prefix: "srv-2.prod", want: "srv-2.prod"},
		{name: "underscore replaced", prefix: "my_server", want: "my-server"},
		{name: "plus replaced", prefix: "a+b", want: "a-b"},
		{name: "other characters replaced", prefix: "a b/c:d", want: "a-b-c-d"},
		{name: "leading digit gets a letter", prefix: "1password", want: "x1password"},
		{name: "leading hyphen gets a letter", prefix: "-x", want: "x-x"},
		{name: "leading dot gets a letter", prefix: ".x", want: "x.x"},
		{name: "leading underscore gets a letter", prefix: "_x", want: "x-x"},
		{name: "all digits", prefix: "42", want: "x42"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := URIScheme(tt.prefix)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("URIScheme(%q) (-want +got):\n%s", tt.prefix, diff)
			}
			if got == "" {
				return
			}
			if !rfc3986Scheme.MatchString(got) {
				t.Errorf("URIScheme(%q) = %q, not an RFC 3986 scheme", tt.prefix, got)
			}
			if strings.ContainsRune(got, '+') {
				t.Errorf("URIScheme(%q) = %q contains '+', the exposed-URI separator", tt.prefix, got)
			}
			if got != strings.ToLower(got) {
				t.Errorf("URIScheme(%q) = %q is not lower case", tt.prefix, got)
			}
		})
	}
}

func TestExposeURI(t *testing.T) {
	tests := []struct {
		name   string
		scheme string
		uri    string
		want   string
	}{
		{name: "file URI", scheme: "gh", uri: "file:///a", want: "gh+file:///a"},
		{name: "template", scheme: "notes", uri: "file:///notes/{id}", want: "notes+file:///notes/{id}"},
		{name: "template with operators", scheme: "gh", uri: "repo://{owner}/{repo}{?ref,path*}", want: "gh+repo://{owner}/{repo}{?ref,path*}"},
		{name: "URI with a plus in its scheme", scheme: "gh", uri: "svn+ssh://host/repo", want: "gh+svn+ssh://host/repo"},
		{name: "URI with a plus in its path", scheme: "gh", uri: "https://h/a+b?q=c+d", want: "gh+https://h/a+b?q=c+d"},
		{name: "empty scheme leaves the URI unchanged", scheme: "", uri: "file:///a", want: "file:///a"},
		{name: "empty URI", scheme: "gh", uri: "", want: "gh+"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ExposeURI(tt.scheme, tt.uri)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ExposeURI(%q, %q) (-want +got):\n%s", tt.scheme, tt.uri, diff)
			}
			if tt.scheme == "" {
				return
			}
			scheme, original, ok := splitExposedURI(got)
			if diff := cmp.Diff([]any{tt.scheme, tt.uri, true}, []any{scheme, original, ok}); diff != "" {
				t.Errorf("splitExposedURI(%q) (-want +got):\n%s", got, diff)
			}
		})
	}
}

func TestSplitExposedURI(t *testing.T) {
	tests := []struct {
		name         string
		uri          string
		wantScheme   string
		wantOriginal string
		wantOK       bool
	}{
		{name: "prefixed", uri: "gh+file:///a", wantScheme: "gh", wantOriginal: "file:///a", wantOK: true},
		{name: "prefixed template", uri: "notes+file:///notes/{id}", wantScheme: "notes", wantOriginal: "file:///notes/{id}", wantOK: true},
		{name: "original contains a plus", uri: "gh+svn+ssh://h/r", wantScheme: "gh", wantOriginal: "svn+ssh://h/r", wantOK: true},
		{name: "scheme with digits, dot and hyphen", uri: "x1.a-b+mem://k", wantScheme: "x1.a-b", wantOriginal: "mem://k", wantOK: true},
		{name: "upper-case scheme lowered", uri: "GH+file:///a", wantScheme: "gh", wantOriginal: "file:///a", wantOK: true},
		{name: "empty original", uri: "gh+", wantScheme: "gh", wantOriginal: "", wantOK: true},
		{name: "no plus", uri: "file:///a"},
		{name: "plus after the scheme", uri: "file:///a+b"},
		{name: "plus in the query", uri: "https://h/?q=a+b"},
		{name: "leading plus", uri: "+file:///a"},
		{name: "underscore before the plus", uri: "my_srv+file:///a"},
		{name: "space before the plus", uri: "a b+file:///a"},
		{name: "empty", uri: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			scheme, original, ok := splitExposedURI(tt.uri)
			if diff := cmp.Diff([]any{tt.wantScheme, tt.wantOriginal, tt.wantOK}, []any{scheme, original, ok}); diff != "" {
				t.Errorf("splitExposedURI(%q) (-want +got):\n%s", tt.uri, diff)
			}
		})
	}
}

// TestExposeURIRoundTripThroughScheme runs prefixes through URIScheme, as the gateway does,
// before exposing and splitting.
func TestExposeURIRoundTripThroughScheme(t *testing.T) {
	tests := []struct {
		name   string
		prefix string
		uri    string
	}{
		{name: "plain", prefix: "github", uri: "repo://a/b"},
		{name: "mixed case prefix", prefix: "GitHub", uri: "file:///x"},
		{name: "underscore prefix", prefix: "my_srv", uri: "file:///notes/{id}"},
		{name: "leading digit prefix", prefix: "9lives", uri: "svn+ssh://h/r"},
		{name: "punctuation-only prefix", prefix: "._-", uri: "a+b+c"},
		{name: "32-character prefix", prefix: strings.Repeat("Z", 32), uri: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := URIScheme(tt.prefix)
			exposed := ExposeURI(s, tt.uri)
			scheme, original, ok := splitExposedURI(exposed)
			if diff := cmp.Diff([]any{s, tt.uri, true}, []any{scheme, original, ok}); diff != "" {
				t.Errorf("splitExposedURI(%q) (-want +got):\n%s", exposed, diff)
			}
		})
	}
}

func FuzzExposeURIRoundTrip(f *testing.F) {
	f.Add("gh", "file:///a")
	f.Add("GitHub", "file:///notes/{id}")
	f.Add("my_srv", "svn+ssh://host/repo")
	f.Add("1x", "")
	f.Add("-", "+")
	f.Add("a.b-c", "https://h/a+b?q={q}")
	f.Fuzz(func(t *testing.T, prefix, uri string) {
		if !prefixRE.MatchString(prefix) {
			t.Skip()
		}
		s := URIScheme(prefix)
		if !rfc3986Scheme.MatchString(s) || strings.ContainsRune(s, '+') {
			t.Fatalf("URIScheme(%q) = %q, not an RFC 3986 scheme without '+'", prefix, s)
		}
		exposed := ExposeURI(s, uri)
		scheme, original, ok := splitExposedURI(exposed)
		if scheme != s || original != uri || !ok {
			t.Fatalf("splitExposedURI(ExposeURI(URIScheme(%q), %q)) = (%q, %q, %v), want (%q, %q, true)",
				prefix, uri, scheme, original, ok, s, uri)
		}
	})
}

func FuzzExposedName(f *testing.F) {
	f.Add("gh", "__", "search")
	f.Add("", "__", "")
	f.Add("gh", "/", "list files")
	f.Add("", "", "héllo")
	f.Add("gh", "__", strings.Repeat("a", 70))
	f.Add(strings.Repeat("p", 32), "::", strings.Repeat("\xff", 40))
	f.Fuzz(func(t *testing.T, prefix, sep, name string) {
		got := ExposedName(prefix, sep, name)
		if !exposedNameRE.MatchString(got) {
			t.Fatalf("ExposedName(%q, %q, %q) = %q (%d bytes), not within ^[A-Za-z0-9_.-]{1,64}$", prefix, sep, name, got, len(got))
		}
		if again := ExposedName(prefix, sep, name); again != got {
			t.Fatalf("ExposedName(%q, %q, %q) not deterministic: %q then %q", prefix, sep, name, got, again)
		}
	})
}
