package config

import (
	"fmt"
	"math"
	posixpath "path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/manifold-mcp/manifold/internal/glob"
)

// This file holds the top-level `policy`: who may see and call what, and how often.

// Effects of a policy rule (Rule.Effect) and defaults (Policy.Default).
const (
	EffectAllow   = "allow"
	EffectDeny    = "deny"
	EffectHide    = "hide"
	EffectApprove = "approve"
)

// Keys of a rate limit (RateLimit.Key).
const (
	LimitPrincipal         = "principal"
	LimitPrincipalUpstream = "principal_upstream"
	LimitPrincipalTool     = "principal_tool"
	LimitUpstream          = "upstream"
)

// What a shared rate limit does when Redis cannot be reached (Policy.SharedLimitFailure).
const (
	FailOpen   = "open"
	FailClosed = "closed"
)

// Policy is the gateway's policy (key `policy`): rules evaluated in order, first match wins,
// and rate limits. Absent: everything is allowed, without limits.
type Policy struct {
	// Default is the effect when no rule matches (key `default`): allow, deny or hide.
	// Defaults to allow.
	Default string

	// DryRun evaluates and audits every decision without enforcing it (key `dry_run`).
	DryRun bool

	// Rules are evaluated in order; the first that matches decides (key `rules`).
	Rules []Rule

	// RateLimits are checked for every tools/call and other targeted request (key
	// `rate_limits`), all that apply; the first exhausted refuses. The methods the gateway
	// answers itself (lists, ping, logging/setLevel, tasks/list) count against principal
	// limits not scoped to upstreams or tools.
	RateLimits []RateLimit

	// Approval configures how calls an approve rule matches are held for a person's decision
	// (key `approval`).
	Approval Approval

	// SharedLimitFailure is what a shared rate limit does while Redis cannot be reached (key
	// `shared_limit_failure`): open (allow) or closed (refuse). Defaults to open.
	SharedLimitFailure string

	// File and Line say where the `policy` key is, for messages at run time.
	File string
	Line int
}

// Approval configures the approval of held calls.
type Approval struct {
	// Timeout is how long a held call waits for the decision (key `timeout`); greater than 0.
	// Defaults to 2 minutes.
	Timeout time.Duration
	// Remember keeps an approval for this long (key `remember`), for the same principal, tool
	// and arguments; 0, the default, asks every time.
	Remember time.Duration
	// RememberAnyArguments lets a remembered approval hold for any arguments of the same
	// tool and principal (key `remember_any_arguments`); off by default, an approval holds
	// for the exact arguments approved only.
	RememberAnyArguments bool
	// By says who decides (key `by`): auto (the default) asks the calling client's user when
	// the client declared form elicitation, and an operator on the admin API otherwise;
	// operator always waits for an operator.
	By string
	// AllowSelfApproval lets an operator approve, on the admin API, a call they made
	// themselves (key `allow_self_approval`): the operator's principal is the caller's (the
	// same issuer and subject, or the same API key name). Off by default, separation of
	// duties: another operator must approve it. Safe only where every operator is trusted
	// to act alone; the gateway warns at startup when it is on.
	AllowSelfApproval bool
}

// Rule is one policy rule: an effect for the requests its match admits.
type Rule struct {
	// Name names the rule in audit records and explanations (key `name`). Defaults to
	// "rule N" (1-based).
	Name string
	// Effect is allow, deny, hide or approve (key `effect`). Approve holds the call until a
	// person approves it: the client's user, asked through elicitation, or an operator.
	Effect string
	// Reason is told to a client refused by the rule (key `reason`).
	Reason string
	// Match says which requests the rule applies to (key `match`); empty matches all.
	Match Match
	// Line is the rule's line in File, for messages.
	Line int
}

// Match selects requests. Every field set must match; an unset field matches anything.
type Match struct {
	// Principal selects who makes the request (key `principal`).
	Principal PrincipalMatch
	// Upstreams are globs over upstream names (key `upstreams`).
	Upstreams []string
	// Tools, Prompts and Resources are globs over the upstream's own tool and prompt names and
	// resource URIs (keys `tools`, `prompts`, `resources`). When one of them is set, a request
	// for another kind of item does not match.
	Tools, Prompts, Resources []string
	// Arguments match argument values by JSON pointer (key `arguments`).
	Arguments []ArgumentMatch
	// Annotations match a tool's annotation hints (key `annotations`, a mapping of
	// readOnlyHint, destructiveHint, openWorldHint to true or false); they count only for
	// upstreams with trust_annotations.
	ReadOnlyHint, DestructiveHint, OpenWorldHint *bool
}

// PrincipalMatch selects principals (key `principal`, of a rule's match and of a rate limit,
// with the same meaning in both). Every field set must match; an unset (nil) field matches
// any principal, and a set but empty one (like `groups: []`) none.
type PrincipalMatch struct {
	// Subjects are globs over the principal's subject (key `subjects`): an OIDC subject, or an
	// API key's name; never the anonymous principal.
	Subjects []string
	// Groups, Roles and Scopes are literal values (keys `groups`, `roles`, `scopes`): the
	// principal must hold one of those listed.
	Groups, Roles, Scopes []string
	// APIKeys are globs over API key names (key `api_keys`): only API key principals match.
	APIKeys []string
	// Anonymous, when set, matches only requests without (true) or with (false) a principal
	// (key `anonymous`).
	Anonymous *bool
}

// IsSet reports whether any principal matcher is set.
func (m *PrincipalMatch) IsSet() bool {
	return m.Subjects != nil || m.Groups != nil || m.Roles != nil || m.Scopes != nil || m.APIKeys != nil || m.Anonymous != nil
}

// ArgumentMatch matches one argument value.
type ArgumentMatch struct {
	// Pointer is a JSON pointer into the arguments, like /path (key `pointer`). A token *
	// reads every element of an array (/paths/*, /edits/*/path): a rule that allows matches
	// when every element does (and there is one), any other rule when one does; in a deny,
	// hide or approve rule, a value under * that is not an array refuses the call (when the
	// rule's other matchers hold). Members given more than once on the way, under the same
	// name or in names that differ only in case, refuse the request.
	Pointer string
	// Equals matches a value equal to it (key `equals`; strings compare as text, others as
	// their JSON, compacted); Matches (key `matches`) matches a string value against a regular expression (RE2), whole or
	// in part, and never a number, boolean or null. Exactly one is set. An array or object
	// where the matcher reads one value (any Matches, an Equals that is not itself a JSON
	// array or object) refuses the call in a deny, hide or approve rule whose other matchers
	// hold, and does not match in an allow rule.
	Equals  *string
	Matches string
	// Path reads the value as a file path (key `path`): the matcher matches a copy cleaned
	// as Go's path.Clean does (repeated slashes, `.` and `..` resolved), a relative one first
	// joined to Root. Equals is cleaned alike. When the rule that decides a call allows it or
	// holds it for approval, the upstream gets the paths its matchers read as they cleaned
	// them; a rule that does not decide changes nothing. A value that cannot be read as a
	// path (not a string, or relative without Root) refuses the call in a deny, hide or
	// approve rule whose other matchers hold, and does not match in an allow rule.
	Path bool
	// Root is the directory the upstream resolves a relative path from (key `root`),
	// absolute; only with Path. If empty, there is none, and a relative path cannot be read.
	// All path matchers of one rule have the same root.
	Root string
	// FoldCase matches the pointer's member names case-insensitively (key `fold_case`), for
	// upstreams that decode names so (Go's encoding/json takes `Path` for `path`). Without it,
	// names match exactly, but a deny, hide or approve rule refuses a member it reads given
	// only in a name that differs in case (`Path` for /path; when its other matchers hold);
	// either way, members whose names differ in case only, where the matcher looks, refuse
	// the request.
	FoldCase bool
	// Line is the matcher's line in File.
	Line int
}

// RateLimit is one rate limit.
type RateLimit struct {
	// Key is what is counted separately (key `key`): principal, principal_upstream,
	// principal_tool or upstream. All anonymous callers are one principal, so a
	// principal-keyed limit counts them in one bucket; there is no per-address key.
	Key string
	// Rate is how many requests per second are allowed on average (key `rate`, like "10/s",
	// "600/m" or "2/h"); Burst is how many may come at once (key `burst`); at least 1.
	Rate  float64
	Burst int
	// Per is the period Rate was written over, kept for messages.
	Per time.Duration
	// Shared counts in Redis, for all replicas together (key `shared`); needs session_store
	// type redis.
	Shared bool
	// Upstreams and Tools restrict the limit to some upstreams and tools (globs, keys
	// `upstreams`, `tools`); unset: all.
	Upstreams, Tools []string
	// Principal restricts the limit to the principals it matches (key `principal`, as in a
	// rule's match); unset: all. The limit still counts per Key: a principal limit with
	// `principal: {groups: [contractors]}` counts each contractor apart.
	Principal PrincipalMatch
	// Line is the limit's line in File.
	Line int
}

// Defaults of the policy.
const (
	defaultSharedLimitFailure = FailOpen
	defaultApprovalTimeout    = 2 * time.Minute
)

// policySettings decodes the top-level `policy` mapping.
func policySettings(p *Policy) decodeFunc {
	return func(d *decoder, n *yaml.Node, path string) bool {
		p.File, p.Line = d.file, n.Line
		return d.mapping(n, path, "a mapping with rules:, default: and/or rate_limits:", []field{
			{key: "default", decode: str(&p.Default)},
			{key: "dry_run", decode: boolean(&p.DryRun)},
			{key: "rules", decode: listOf(&p.Rules, "a list of rules (lines starting with `- effect:`)", rule)},
			{key: "rate_limits", decode: listOf(&p.RateLimits, "a list of rate limits (lines starting with `- key:`)", rateLimit)},
			{key: "shared_limit_failure", decode: str(&p.SharedLimitFailure)},
			{key: "approval", decode: func(d *decoder, n *yaml.Node, path string) bool {
				return d.mapping(n, path, "a mapping with timeout:, remember:, remember_any_arguments:, by: and/or allow_self_approval:", []field{
					{key: "timeout", decode: duration(&p.Approval.Timeout)},
					{key: "remember", decode: duration(&p.Approval.Remember)},
					{key: "remember_any_arguments", decode: boolean(&p.Approval.RememberAnyArguments)},
					{key: "by", decode: str(&p.Approval.By)},
					{key: "allow_self_approval", decode: boolean(&p.Approval.AllowSelfApproval)},
				})
			}},
		})
	}
}

func rule(r *Rule) decodeFunc {
	return func(d *decoder, n *yaml.Node, path string) bool {
		r.Line = n.Line
		return d.mapping(n, path, "a mapping with `effect:` and `match:`", []field{
			{key: "name", decode: str(&r.Name)},
			{key: "effect", decode: str(&r.Effect)},
			{key: "reason", decode: str(&r.Reason)},
			{key: "match", decode: match(&r.Match)},
		})
	}
}

func match(m *Match) decodeFunc {
	return func(d *decoder, n *yaml.Node, path string) bool {
		return d.mapping(n, path, "a mapping of principal:, upstreams:, tools:, prompts:, resources:, arguments:, annotations:", []field{
			{key: "principal", decode: principalMatch(&m.Principal)},
			{key: "upstreams", decode: strList(&m.Upstreams)},
			{key: "tools", decode: strList(&m.Tools)},
			{key: "prompts", decode: strList(&m.Prompts)},
			{key: "resources", decode: strList(&m.Resources)},
			{key: "arguments", decode: listOf(&m.Arguments, "a list of {pointer, equals} or {pointer, matches}", func(a *ArgumentMatch) decodeFunc {
				return func(d *decoder, n *yaml.Node, path string) bool {
					a.Line = n.Line
					return d.mapping(n, path, "a mapping with `pointer:` (like /path) and `equals:` or `matches:`", []field{
						{key: "pointer", decode: str(&a.Pointer)},
						{key: "equals", decode: func(d *decoder, n *yaml.Node, path string) bool {
							var s string
							if !str(&s)(d, n, path) {
								return false
							}
							a.Equals = &s
							return true
						}},
						{key: "matches", decode: str(&a.Matches)},
						{key: "path", decode: boolean(&a.Path)},
						{key: "root", decode: str(&a.Root)},
						{key: "fold_case", decode: boolean(&a.FoldCase)},
					})
				}
			})},
			{key: "annotations", decode: func(d *decoder, n *yaml.Node, path string) bool {
				return d.mapping(n, path, "a mapping of readOnlyHint, destructiveHint, openWorldHint to true or false", []field{
					{key: "readOnlyHint", decode: optionalBool(&m.ReadOnlyHint)},
					{key: "destructiveHint", decode: optionalBool(&m.DestructiveHint)},
					{key: "openWorldHint", decode: optionalBool(&m.OpenWorldHint)},
				})
			}},
		})
	}
}

// principalMatch decodes a `principal` mapping, of a rule's match or of a rate limit.
func principalMatch(m *PrincipalMatch) decodeFunc {
	return func(d *decoder, n *yaml.Node, path string) bool {
		return d.mapping(n, path, "a mapping of subjects:, groups:, roles:, scopes:, api_keys: (lists) and/or anonymous: (true or false)", []field{
			{key: "subjects", decode: strList(&m.Subjects)},
			{key: "groups", decode: strList(&m.Groups)},
			{key: "roles", decode: strList(&m.Roles)},
			{key: "scopes", decode: strList(&m.Scopes)},
			{key: "api_keys", decode: strList(&m.APIKeys)},
			{key: "anonymous", decode: optionalBool(&m.Anonymous)},
		})
	}
}

func rateLimit(l *RateLimit) decodeFunc {
	return func(d *decoder, n *yaml.Node, path string) bool {
		l.Line = n.Line
		return d.mapping(n, path, "a mapping with `key:`, `rate:` (like 10/s) and `burst:`", []field{
			{key: "key", decode: str(&l.Key)},
			{key: "rate", decode: func(d *decoder, n *yaml.Node, path string) bool {
				s, ok := d.scalar(n, path, "a rate like 10/s, 600/m or 2/h")
				if !ok {
					return false
				}
				rate, per, err := parseRate(s)
				if err != nil {
					d.problemf(n.Line, path, "%s", err.Error())
					return false
				}
				l.Rate, l.Per = rate, per
				return true
			}},
			{key: "burst", decode: integer(&l.Burst)},
			{key: "shared", decode: boolean(&l.Shared)},
			{key: "upstreams", decode: strList(&l.Upstreams)},
			{key: "tools", decode: strList(&l.Tools)},
			{key: "principal", decode: principalMatch(&l.Principal)},
		})
	}
}

// optionalBool decodes true or false into a *bool that is nil when the key is absent.
func optionalBool(dst **bool) decodeFunc {
	return func(d *decoder, n *yaml.Node, path string) bool {
		var b bool
		if !boolean(&b)(d, n, path) {
			return false
		}
		*dst = &b
		return true
	}
}

// parseRate reads "N/s", "N/m" or "N/h" (N a positive number) as requests per second.
func parseRate(s string) (perSecond float64, per time.Duration, err error) {
	num, unit, ok := strings.Cut(strings.TrimSpace(s), "/")
	periods := map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour}
	per, known := periods[strings.TrimSpace(unit)]
	n, nerr := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if !ok || !known || nerr != nil || n <= 0 || math.IsInf(n, 0) {
		return 0, 0, fmt.Errorf("want a rate like 10/s, 600/m or 2/h (a positive number per s, m or h), got %s", quote(s))
	}
	return n / per.Seconds(), per, nil
}

// applyPolicyDefaults fills the policy settings the file leaves out.
func applyPolicyDefaults(p *Policy, ix *index) {
	if !ix.has("policy.default") {
		p.Default = EffectAllow
	}
	if !ix.has("policy.shared_limit_failure") {
		p.SharedLimitFailure = defaultSharedLimitFailure
	}
	if !ix.has("policy.approval.timeout") {
		p.Approval.Timeout = defaultApprovalTimeout
	}
	if !ix.has("policy.approval.by") {
		p.Approval.By = ApprovalByAuto
	}
	for i := range p.Rules {
		if !ix.has(fmt.Sprintf("policy.rules[%d].name", i)) {
			p.Rules[i].Name = fmt.Sprintf("rule %d", i+1)
		}
	}
}

// policy checks the policy: effects, patterns, pointers, regular expressions and limits, each
// reported at its line.
func (v *validator) policy(c *Config, w where) {
	p := &c.Policy
	switch p.Default {
	case EffectAllow, EffectDeny, EffectHide:
	default:
		v.check(w, "policy.default", fmt.Sprintf("%s is not a default effect: use allow, deny or hide", quote(p.Default)))
	}
	switch p.SharedLimitFailure {
	case FailOpen, FailClosed:
	default:
		v.check(w, "policy.shared_limit_failure", fmt.Sprintf("%s: use open (allow while Redis is unreachable) or closed (refuse)", quote(p.SharedLimitFailure)))
	}
	if p.Approval.Timeout <= 0 {
		v.check(w, "policy.approval.timeout", "must be greater than 0, like 2m: how long a held call waits for a person's decision")
	}
	switch p.Approval.By {
	case ApprovalByAuto, ApprovalByOperator:
	default:
		v.check(w, "policy.approval.by", fmt.Sprintf("%s: use auto (the client's user when it can be asked, else an operator) or operator", quote(p.Approval.By)))
	}
	if p.Approval.Remember < 0 {
		v.check(w, "policy.approval.remember", "must be 0 (ask every time) or more, like 10m")
	}
	names := map[string]int{}
	for i := range p.Rules {
		r, rp := &p.Rules[i], fmt.Sprintf("policy.rules[%d]", i)
		switch r.Effect {
		case EffectAllow, EffectDeny, EffectHide, EffectApprove:
		case "":
			v.check(w, rp+".effect", "required: allow, deny, hide or approve")
		default:
			v.check(w, rp+".effect", fmt.Sprintf("%s is not an effect: use allow, deny, hide or approve", quote(r.Effect)))
		}
		if j, dup := names[r.Name]; dup {
			v.check(w, rp+".name", fmt.Sprintf("%s also names rule %d: names must be unique (audit records name the deciding rule)", quote(r.Name), j+1))
		}
		names[r.Name] = i
		m, mp := &r.Match, rp+".match"
		v.principalMatch(w, mp+".principal", &m.Principal)
		for _, list := range []struct {
			key      string
			patterns []string
		}{{"upstreams", m.Upstreams}, {"tools", m.Tools}, {"prompts", m.Prompts}, {"resources", m.Resources}} {
			for j, pat := range list.patterns {
				if _, err := glob.Compile(pat); err != nil {
					v.check(w, fmt.Sprintf("%s.%s[%d]", mp, list.key, j), err.Error())
				}
			}
		}
		firstPath := -1 // the rule's first path matcher: the others take its root
		for j, a := range m.Arguments {
			ap := fmt.Sprintf("%s.arguments[%d]", mp, j)
			if msg := checkPointer(a.Pointer); msg != "" {
				v.check(w, ap+".pointer", msg)
			}
			switch {
			case a.Equals == nil && a.Matches == "":
				v.check(w, ap, "needs equals: (a value) or matches: (a regular expression)")
			case a.Equals != nil && a.Matches != "":
				v.check(w, ap, "equals and matches are alternatives: keep one")
			case a.Matches != "":
				if _, err := regexp.Compile(a.Matches); err != nil {
					v.check(w, ap+".matches", "not a regular expression (RE2 syntax): "+err.Error())
				}
			}
			switch {
			case w.ix.present(ap+".root") && !a.Path:
				v.check(w, ap+".root", "only with path: true (the root a relative path is taken from): add path: true, or remove root")
			case w.ix.present(ap+".root") && !strings.HasPrefix(a.Root, "/"):
				v.check(w, ap+".root", fmt.Sprintf("%s is not an absolute path: write the directory a relative path is taken from, like /srv/data", quote(a.Root)))
			case a.Path && firstPath < 0:
				firstPath = j
			case a.Path && cleanRoot(a.Root) != cleanRoot(m.Arguments[firstPath].Root):
				// One rule's paths go to one upstream, which resolves them all from one
				// directory; and the paths the rule hands on are cleaned from one root.
				root, first := "none", m.Arguments[firstPath].Root
				if a.Root != "" {
					root = quote(a.Root)
				}
				if first == "" {
					v.check(w, ap+".root", fmt.Sprintf("%s, while arguments[%d] of this rule has none: give every path matcher of a rule the same root, the directory the upstream resolves relative paths from", root, firstPath))
				} else {
					v.check(w, ap+".root", fmt.Sprintf("%s, while arguments[%d] of this rule has root %s: give every path matcher of a rule the same root, the directory the upstream resolves relative paths from", root, firstPath, quote(first)))
				}
			}
			if a.Path && a.Root == "" && a.Equals != nil && !strings.HasPrefix(*a.Equals, "/") {
				v.check(w, ap+".equals", fmt.Sprintf("%s is a relative path, and the matcher has no root: write the absolute path, or set root (the directory the upstream resolves relative paths from)", quote(*a.Equals)))
			}
		}
	}
	for i := range p.RateLimits {
		l, lp := &p.RateLimits[i], fmt.Sprintf("policy.rate_limits[%d]", i)
		switch l.Key {
		case LimitPrincipal, LimitPrincipalUpstream, LimitPrincipalTool, LimitUpstream:
		default:
			v.check(w, lp+".key", fmt.Sprintf("%s is not a limit key: use principal, principal_upstream, principal_tool or upstream", quote(l.Key)))
		}
		if !w.ix.present(lp + ".rate") {
			v.check(w, lp+".rate", "required: how many requests, like 10/s, 600/m or 2/h")
		}
		if l.Burst < 1 {
			v.check(w, lp+".burst", "must be at least 1: how many requests may come at once")
		}
		if l.Shared && c.SessionStore.Type != StoreRedis {
			v.check(w, lp+".shared", "a shared limit is counted in Redis: set session_store type: redis, or remove shared")
		}
		v.principalMatch(w, lp+".principal", &l.Principal)
		for _, list := range []struct {
			key      string
			patterns []string
		}{{"upstreams", l.Upstreams}, {"tools", l.Tools}} {
			for j, pat := range list.patterns {
				if _, err := glob.Compile(pat); err != nil {
					v.check(w, fmt.Sprintf("%s.%s[%d]", lp, list.key, j), err.Error())
				}
			}
		}
	}
}

// cleanRoot is a path matcher's root as it is compared: clean, or "" when none is set.
func cleanRoot(root string) string {
	if root == "" {
		return ""
	}
	return posixpath.Clean(root)
}

// principalMatch checks the principal matchers at path, of a rule's match or a rate limit:
// the globs of subjects and api_keys.
func (v *validator) principalMatch(w where, path string, m *PrincipalMatch) {
	for _, list := range []struct {
		key      string
		patterns []string
	}{{"subjects", m.Subjects}, {"api_keys", m.APIKeys}} {
		for j, pat := range list.patterns {
			if _, err := glob.Compile(pat); err != nil {
				v.check(w, fmt.Sprintf("%s.%s[%d]", path, list.key, j), err.Error())
			}
		}
	}
}

// PolicyWarnings returns what `gateway validate` warns about in c's policy, each starting
// with FILE:LINE: an argument matcher that reads the value as an absolute path without
// path: true (a regular expression starting with ^/, or equals with a value starting with /),
// which //etc, /./etc and /tmp/../etc get past; a path matcher whose pointer reads one
// element of a list by its index (/paths/0), where /paths/* reads every element; and path
// matchers of different rules that read the same pointer of the same upstreams and tools
// (the same lists, in any order) from different roots.
func PolicyWarnings(c *Config) []string {
	var out []string
	// roots holds, per scope and pointer, the first path matcher with a root.
	type rooted struct {
		rule, arg, line int
		root            string
	}
	roots := map[string]rooted{}
	for i := range c.Policy.Rules {
		m := &c.Policy.Rules[i].Match
		for j, a := range m.Arguments {
			at := fmt.Sprintf("%s:%d: policy.rules[%d].match.arguments[%d]", c.Policy.File, a.Line, i, j)
			switch {
			case a.Path:
				if each, ok := everyElement(a.Pointer); ok {
					out = append(out, fmt.Sprintf("%s.pointer: %s reads one element of a list, and a path in any other element goes unchecked: write %s to read every element (a rule that refuses applies when one does, a rule that allows when all do). A token of up to three digits without a leading zero, after the first, is taken for a list position: if it names a member, ignore this",
						at, quote(a.Pointer), quote(each)))
				}
				if a.Root == "" {
					break // reads no relative path, so none differently
				}
				key := scopeKey(m) + "\x00" + a.Pointer
				first, seen := roots[key]
				switch {
				case !seen:
					roots[key] = rooted{rule: i, arg: j, line: a.Line, root: a.Root}
				case cleanRoot(first.root) != cleanRoot(a.Root):
					out = append(out, fmt.Sprintf("%s.root: %s, while policy.rules[%d].match.arguments[%d] (line %d) reads %s of the same upstreams and tools from root %s: the upstream resolves a relative path from one directory, so one of these rules reads it where the upstream does not; give both the root the upstream uses",
						at, quote(a.Root), first.rule, first.arg, first.line, quote(a.Pointer), quote(first.root)))
				}
			case strings.HasPrefix(a.Matches, "^/"):
				out = append(out, fmt.Sprintf("%s.matches: %s reads the value as a path, but //etc/passwd, /./etc/passwd and /tmp/../etc/passwd are not what it expects: add path: true, so that the value is cleaned before it is matched",
					at, quote(a.Matches)))
			case a.Equals != nil && strings.HasPrefix(*a.Equals, "/"):
				out = append(out, fmt.Sprintf("%s.equals: %s reads the value as a path, but %s and %s are not equal to it: add path: true, so that the value is cleaned before it is compared",
					at, quote(*a.Equals), quote("/"+*a.Equals), quote(posixpath.Dir(*a.Equals)+"/./"+posixpath.Base(*a.Equals))))
			}
		}
	}
	return out
}

// everyElement returns pointer with each token that is plausibly an array index written *
// instead, and whether there was one. Plausibly: not the first token (the arguments are an
// object, so it names a member), an index as RFC 6901 writes one (0, or digits without a
// leading zero), and of at most three digits (a longer number, like a year, is more likely a
// member's name).
func everyElement(pointer string) (string, bool) {
	tokens := strings.Split(pointer, "/")
	found := false
	for i, t := range tokens {
		if i > 1 && t != "" && len(t) <= 3 && (t == "0" || t[0] != '0') && strings.Trim(t, "0123456789") == "" {
			tokens[i], found = "*", true
		}
	}
	return strings.Join(tokens, "/"), found
}

// scopeKey identifies the upstreams and tools (prompts, resources) a rule's match reads:
// equal for lists of the same globs in any order.
func scopeKey(m *Match) string {
	var b strings.Builder
	for _, list := range [][]string{m.Upstreams, m.Tools, m.Prompts, m.Resources} {
		if list == nil {
			b.WriteString("any\x00")
			continue
		}
		sorted := slices.Clone(list)
		slices.Sort(sorted)
		for _, g := range slices.Compact(sorted) {
			b.WriteString(strconv.Quote(g))
		}
		b.WriteByte(0)
	}
	return b.String()
}

// checkPointer checks a JSON pointer (RFC 6901) into arguments.
func checkPointer(p string) string {
	if p == "" || p[0] != '/' {
		return fmt.Sprintf("%s is not a JSON pointer: write /name, or /name/0/field for nested values", quote(p))
	}
	for i := 0; i < len(p); i++ {
		if p[i] == '~' && (i+1 == len(p) || (p[i+1] != '0' && p[i+1] != '1')) {
			return fmt.Sprintf("%s: ~ must be followed by 0 (for ~) or 1 (for /)", quote(p))
		}
	}
	return ""
}
