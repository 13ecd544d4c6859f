package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/manifold-mcp/manifold/internal/config"
)

func TestParsePolicy(t *testing.T) {
	yaml := `
session_store: {type: redis, url: "redis://127.0.0.1:6379/0"}
policy:
  default: deny
  dry_run: true
  rules:
    - name: read-only tools
      effect: allow
      match:
        upstreams: [docs]
        annotations: {readOnlyHint: true}
    - effect: hide
      reason: not for contractors
      match:
        principal: {groups: [contractors], anonymous: false}
        tools: ["delete_*"]
        arguments: [{pointer: /path, matches: "^/etc/"}, {pointer: /force, equals: "true"}]
    - effect: deny
      match:
        arguments:
          - {pointer: /path, path: true, fold_case: true, matches: "^/etc(/|$)"}
          - {pointer: /dir, path: true, equals: /srv/data/x}
  rate_limits:
    - {key: principal, rate: 600/m, burst: 20}
    - {key: upstream, rate: 5/s, burst: 5, shared: true, upstreams: [docs], tools: ["search*"]}
    - {key: principal, rate: 1/s, burst: 1, principal: {groups: [contractors], api_keys: ["ci-*"], anonymous: false}}
  shared_limit_failure: closed
upstreams:
  - {name: docs, command: x, trust_annotations: true}
`
	c, err := config.Parse("gw.yaml", []byte(yaml+testKeysYAML), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	yes, no, force, srvX := true, false, "true", "/srv/data/x"
	want := config.Policy{
		Default: "deny", DryRun: true, SharedLimitFailure: "closed", File: "gw.yaml", Line: 4, Approval: config.Approval{Timeout: 2 * time.Minute, By: "auto"},
		Rules: []config.Rule{
			{Name: "read-only tools", Effect: "allow", Line: 7, Match: config.Match{Upstreams: []string{"docs"}, ReadOnlyHint: &yes}},
			{Name: "rule 2", Effect: "hide", Reason: "not for contractors", Line: 12, Match: config.Match{
				Principal: config.PrincipalMatch{Groups: []string{"contractors"}, Anonymous: &no}, Tools: []string{"delete_*"},
				Arguments: []config.ArgumentMatch{{Pointer: "/path", Matches: "^/etc/", Line: 17}, {Pointer: "/force", Equals: &force, Line: 17}},
			}},
			{Name: "rule 3", Effect: "deny", Line: 18, Match: config.Match{Arguments: []config.ArgumentMatch{
				{Pointer: "/path", Path: true, FoldCase: true, Matches: "^/etc(/|$)", Line: 21},
				{Pointer: "/dir", Path: true, Equals: &srvX, Line: 22},
			}}},
		},
		RateLimits: []config.RateLimit{
			{Key: "principal", Rate: 10, Per: time.Minute, Burst: 20, Line: 24},
			{Key: "upstream", Rate: 5, Per: time.Second, Burst: 5, Shared: true, Upstreams: []string{"docs"}, Tools: []string{"search*"}, Line: 25},
			{Key: "principal", Rate: 1, Per: time.Second, Burst: 1, Line: 26, Principal: config.PrincipalMatch{Groups: []string{"contractors"}, APIKeys: []string{"ci-*"}, Anonymous: &no}},
		},
	}
	if diff := cmp.Diff(want, c.Policy); diff != "" {
		t.Errorf("policy (-want +got):\n%s", diff)
	}
	if !c.Upstreams[0].TrustAnnotations {
		t.Error("trust_annotations not read")
	}
}

func TestPolicyProblems(t *testing.T) {
	p := func(line int, field, msg string) config.Problem {
		return config.Problem{File: "gw.yaml", Line: line, Field: field, Message: msg}
	}
	tests := []struct {
		name string
		yaml string
		want []config.Problem
	}{
		{"effects", "policy:\n  default: approve\n  rules:\n    - {effect: permit}\n    - {name: a, effect: deny}\n    - {name: a}\nupstreams: []\n", []config.Problem{
			p(2, "policy.default", `"approve" is not a default effect: use allow, deny or hide`),
			p(4, "policy.rules[0].effect", `"permit" is not an effect: use allow, deny, hide or approve`),
			p(6, "policy.rules[2].effect", "required: allow, deny, hide or approve"),
			p(6, "policy.rules[2].name", `"a" also names rule 2: names must be unique (audit records name the deciding rule)`),
		}},
		{"matchers", "policy:\n  rules:\n    - effect: deny\n      match:\n        tools: [\"[a-\"]\n        arguments:\n          - {pointer: path, equals: x}\n          - {pointer: /a, matches: \"(\"}\n          - {pointer: /b}\nupstreams: []\n", []config.Problem{
			p(5, "policy.rules[0].match.tools[0]", `"[a-" has a [ without its closing ]: write \[ for a literal bracket`),
			p(7, "policy.rules[0].match.arguments[0].pointer", `"path" is not a JSON pointer: write /name, or /name/0/field for nested values`),
			p(8, "policy.rules[0].match.arguments[1].matches", "not a regular expression (RE2 syntax): error parsing regexp: missing closing ): `(`"),
			p(9, "policy.rules[0].match.arguments[2]", "needs equals: (a value) or matches: (a regular expression)"),
		}},
		{"path matchers", "policy:\n  rules:\n    - effect: deny\n      match:\n        arguments:\n          - {pointer: /a, root: /srv, matches: x}\n          - {pointer: /b, path: true, root: srv, matches: x}\n          - {pointer: /c, path: yes, matches: x}\nupstreams: []\n", []config.Problem{
			p(6, "policy.rules[0].match.arguments[0].root", "only with path: true (the root a relative path is taken from): add path: true, or remove root"),
			p(7, "policy.rules[0].match.arguments[1].root", `"srv" is not an absolute path: write the directory a relative path is taken from, like /srv/data`),
			p(8, "policy.rules[0].match.arguments[2].path", "want true or false, got \"yes\""),
		}},
		{"path matchers' roots", "policy:\n  rules:\n    - effect: deny\n      match:\n        arguments:\n          - {pointer: /a, path: true, root: /srv/data/, matches: x}\n          - {pointer: /b, path: true, root: /srv/data, matches: x}\n          - {pointer: /c, path: true, matches: x}\n          - {pointer: /d, path: true, root: /tmp, matches: x}\n    - effect: allow\n      match:\n        arguments:\n          - {pointer: /a, path: true, equals: docs/x}\n          - {pointer: /b, path: true, equals: \"\"}\nupstreams: []\n", []config.Problem{
			p(8, "policy.rules[0].match.arguments[2].root", `none, while arguments[0] of this rule has root "/srv/data/": give every path matcher of a rule the same root, the directory the upstream resolves relative paths from`),
			p(9, "policy.rules[0].match.arguments[3].root", `"/tmp", while arguments[0] of this rule has root "/srv/data/": give every path matcher of a rule the same root, the directory the upstream resolves relative paths from`),
			p(13, "policy.rules[1].match.arguments[0].equals", `"docs/x" is a relative path, and the matcher has no root: write the absolute path, or set root (the directory the upstream resolves relative paths from)`),
			p(14, "policy.rules[1].match.arguments[1].equals", `"" is a relative path, and the matcher has no root: write the absolute path, or set root (the directory the upstream resolves relative paths from)`),
		}},
		{"limits", "policy:\n  rate_limits:\n    - {key: user, rate: 10/d, burst: 0}\n    - {key: principal, burst: 1, shared: true}\nupstreams: []\n", []config.Problem{
			p(3, "policy.rate_limits[0].rate", `want a rate like 10/s, 600/m or 2/h (a positive number per s, m or h), got "10/d"`),
			p(3, "policy.rate_limits[0].key", `"user" is not a limit key: use principal, principal_upstream, principal_tool or upstream`),
			p(3, "policy.rate_limits[0].burst", "must be at least 1: how many requests may come at once"),
			p(4, "policy.rate_limits[1].rate", "required: how many requests, like 10/s, 600/m or 2/h"),
			p(4, "policy.rate_limits[1].shared", "a shared limit is counted in Redis: set session_store type: redis, or remove shared"),
		}},
		{"principal matchers of rules and limits alike", "policy:\n  rules:\n    - {effect: deny, match: {principal: {subjects: [\"[a-\"], teams: [x]}}}\n  rate_limits:\n    - {key: principal, rate: 1/s, burst: 1, principal: {api_keys: [\"[a-\"], teams: [x]}}\nupstreams: []\n", []config.Problem{
			p(3, "policy.rules[0].match.principal.teams", "unknown field (known: subjects, groups, roles, scopes, api_keys, anonymous)"),
			p(3, "policy.rules[0].match.principal.subjects[0]", `"[a-" has a [ without its closing ]: write \[ for a literal bracket`),
			p(5, "policy.rate_limits[0].principal.teams", "unknown field (known: subjects, groups, roles, scopes, api_keys, anonymous)"),
			p(5, "policy.rate_limits[0].principal.api_keys[0]", `"[a-" has a [ without its closing ]: write \[ for a literal bracket`),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.Parse("gw.yaml", []byte(tt.yaml), env(nil))
			checkProblems(t, "Parse", err, tt.want)
		})
	}
}

// TestPolicyWarnsOfPathRegexpsWithoutPathForm: a matcher whose regular expression reads an
// absolute path (^/) but does not clean it is warned about, at its line; one with path: true,
// or a regular expression that does not start at the root, is not.
func TestPolicyWarnsOfPathRegexpsWithoutPathForm(t *testing.T) {
	c, err := config.Parse("gw.yaml", []byte(`policy:
  rules:
    - name: no-system-paths
      effect: deny
      match:
        arguments:
          - {pointer: /path, matches: "^/etc/"}
          - {pointer: /path, path: true, matches: "^/etc(/|$)"}
          - {pointer: /mode, matches: "^w"}
upstreams: []
`), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	got := config.PolicyWarnings(c)
	if len(got) != 1 || !strings.HasPrefix(got[0], "gw.yaml:7: policy.rules[0].match.arguments[0].matches: ") || !strings.Contains(got[0], "path: true") {
		t.Errorf("PolicyWarnings = %q, want one, at line 7, saying to add path: true", got)
	}
}

// TestPolicyWarnsOfPathEqualsWithoutPathForm: an argument matcher that compares the value
// with an absolute path (equals: "/…") without path: true is warned about, as a regular
// expression on one is (/srv/./x and //srv/x are not "/srv/x"); and a path matcher that reads
// one element of a list by its index, where /list/* would read every element.
func TestPolicyWarnsOfPathEqualsWithoutPathForm(t *testing.T) {
	c, err := config.Parse("gw.yaml", []byte(`policy:
  rules:
    - name: readme-only
      effect: allow
      match:
        arguments:
          - {pointer: /path, equals: /srv/readme}
          - {pointer: /path, path: true, equals: /srv/readme}
          - {pointer: /mode, equals: read}
    - name: no-etc
      effect: deny
      match:
        arguments:
          - {pointer: /paths/0, path: true, matches: "^/etc(/|$)"}
          - {pointer: /paths/*, path: true, matches: "^/etc(/|$)"}
          - {pointer: /files/2/path, path: true, matches: "^/etc(/|$)"}
upstreams: []
`), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	got := config.PolicyWarnings(c)
	if len(got) != 3 ||
		!strings.HasPrefix(got[0], "gw.yaml:7: policy.rules[0].match.arguments[0].equals: ") || !strings.Contains(got[0], "path: true") ||
		!strings.HasPrefix(got[1], "gw.yaml:14: policy.rules[1].match.arguments[0].pointer: ") || !strings.Contains(got[1], "/paths/*") ||
		!strings.HasPrefix(got[2], "gw.yaml:16: policy.rules[1].match.arguments[2].pointer: ") || !strings.Contains(got[2], "/files/*/path") {
		t.Errorf("PolicyWarnings = %q\nwant three: equals at line 7 saying to add path: true; /paths/0 at line 14 and /files/2/path at line 16, saying * reads every element", got)
	}
}

// TestPolicyWarnsOnlyOfPlausibleListIndexes: a path matcher's pointer token of digits is
// taken for a list position (and warned of, suggesting *) only where it plausibly is one: not
// the first token (the arguments are an object, so it names a member), an RFC 6901 index (no
// leading zero) of at most three digits; /2024/path and /years/2024/path read members.
func TestPolicyWarnsOnlyOfPlausibleListIndexes(t *testing.T) {
	c, err := config.Parse("gw.yaml", []byte(`policy:
  rules:
    - name: no-etc
      effect: deny
      match:
        arguments:
          - {pointer: /2024/path, path: true, matches: "^/etc(/|$)"}
          - {pointer: /years/2024/path, path: true, matches: "^/etc(/|$)"}
          - {pointer: /files/007/path, path: true, matches: "^/etc(/|$)"}
          - {pointer: /files/12/path, path: true, matches: "^/etc(/|$)"}
          - {pointer: /0, path: true, matches: "^/etc(/|$)"}
upstreams: []
`), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	got := config.PolicyWarnings(c)
	if len(got) != 1 || !strings.HasPrefix(got[0], "gw.yaml:10: policy.rules[0].match.arguments[3].pointer: ") || !strings.Contains(got[0], `"/files/*/path"`) ||
		!strings.Contains(got[0], "up to three digits") {
		t.Errorf("PolicyWarnings = %q\nwant one, of /files/12/path at line 10, saying /files/*/path and which tokens are taken for list positions", got)
	}
}

// TestPolicyWarnsOfRulesReadingOnePathFromDifferentRoots: path matchers of different rules
// that read the same pointer of the same upstreams and tools with different roots are warned
// of: the upstream resolves a relative path from one directory, so one rule reads it where
// the upstream does not. Other tools, other pointers, a matcher without root and the same
// root written otherwise are not.
func TestPolicyWarnsOfRulesReadingOnePathFromDifferentRoots(t *testing.T) {
	c, err := config.Parse("gw.yaml", []byte(`policy:
  rules:
    - name: no-secret
      effect: deny
      match: {tools: [read_file, stat], arguments: [{pointer: /path, path: true, root: /, matches: "^/secret(/|$)"}]}
    - name: data
      effect: allow
      match: {tools: [stat, read_file], arguments: [{pointer: /path, path: true, root: /srv/data, matches: "^/srv/data/"}]}
    - name: data-again
      effect: allow
      match: {tools: [read_file, stat], arguments: [{pointer: /path, path: true, root: /srv/data/, matches: "^/srv/"}]}
    - name: other-tool
      effect: allow
      match: {tools: [read_file], arguments: [{pointer: /path, path: true, root: /tmp, matches: "^/tmp/"}]}
    - name: other-pointer
      effect: allow
      match: {tools: [read_file, stat], arguments: [{pointer: /dest, path: true, root: /tmp, matches: "^/tmp/"}]}
    - name: no-root
      effect: deny
      match: {tools: [read_file, stat], arguments: [{pointer: /path, path: true, matches: "^/etc(/|$)"}]}
    - name: other-upstream
      effect: allow
      match: {upstreams: [fs2], tools: [read_file, stat], arguments: [{pointer: /path, path: true, root: /home, matches: "^/home/"}]}
    - {name: writes, effect: deny, match: {tools: [write_file], arguments: [{pointer: /path, path: true, root: /srv, matches: "^/srv/etc/"}]}}
    - {name: writes-again, effect: allow, match: {tools: [write_file], arguments: [{pointer: /path, path: true, root: /srv/, matches: "^/srv/"}]}}
upstreams: []
`), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	got := config.PolicyWarnings(c)
	if len(got) != 2 ||
		!strings.HasPrefix(got[0], "gw.yaml:8: policy.rules[1].match.arguments[0].root: ") || !strings.Contains(got[0], `"/srv/data"`) || !strings.Contains(got[0], "policy.rules[0].match.arguments[0] (line 5)") ||
		!strings.HasPrefix(got[1], "gw.yaml:11: policy.rules[2].match.arguments[0].root: ") || !strings.Contains(got[1], `"/srv/data/"`) {
		t.Errorf("PolicyWarnings = %q\nwant two: the roots of data (line 8) and data-again (line 11), each naming no-secret's root at line 5", got)
	}
}
