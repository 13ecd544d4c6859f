package policy

import (
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/glob"
	"github.com/manifold-mcp/manifold/internal/pipeline"
	"github.com/manifold-mcp/manifold/internal/policy/principal"
	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/internal/session"
)

// The reasons a refusal gives when its rule (or the default) has none.
const (
	defaultDenyReason    = "the gateway's policy does not allow this request; ask the gateway's operator for access"
	defaultHideReason    = "hidden from this principal by the gateway's policy"
	defaultApproveReason = "this request needs an approval, which the gateway cannot obtain yet; ask the gateway's operator"
)

// DefaultRule is Decision.Rule when no rule matched and the policy's default decided.
const DefaultRule = "default"

// Rules is a compiled rule set: `policy.rules` of the config, in order, and the default.
// Safe for concurrent use; immutable. The nil *Rules allows everything, as an absent policy
// does.
type Rules struct {
	rules []rule
	// def is the decision when no rule matches.
	def Decision
	// dryRun: decisions are made and reported, not enforced (Decision.DryRun).
	dryRun bool
	// trusted reports whether an upstream's annotations are trusted; never nil.
	trusted func(upstream string) bool
	// visible are the rules as Visible reads them, for list entries, which have no
	// arguments: a hide rule with argument matchers is left out (it cannot hide an entry), and
	// another such rule is kept without them (an entry it might allow stays listed; the call
	// is decided with its arguments).
	visible []rule
	// view are the indexes in visible of the rules whose principal matchers ViewKey
	// evaluates.
	view []int
}

// rule is one compiled config.Rule. A nil matcher field is unset and matches anything; a
// set one that is empty (like `groups: []`) matches nothing.
type rule struct {
	cfg      *config.Rule
	decision Decision

	who                    *principal.Matcher // nil: any principal
	upstreams              glob.Set
	items                  bool // any of tools, prompts, resources is set
	tools, prompts, resrcs glob.Set
	hasTools               bool
	hasPrompts             bool
	hasResources           bool
	args                   []argMatcher
	paths                  bool // an argument matcher reads a path
	// restrictive: the rule refuses or holds what it matches (deny, hide, approve). Its
	// argument matchers match when any value a * pointer reaches does, and they refuse a
	// value they cannot read (see why.unreadable) rather than let it past.
	restrictive bool
	// rewrites: the rule lets what it matches go on (allow, approve) and has path
	// matchers; its decision hands on the paths they read, cleaned.
	rewrites    bool
	readOnly    tri
	destructive tri
	openWorld   tri
}

// tri is an optional bool.
type tri uint8

const (
	unset tri = iota
	isTrue
	isFalse
)

func triOf(b *bool) tri {
	switch {
	case b == nil:
		return unset
	case *b:
		return isTrue
	}
	return isFalse
}

func (t tri) String() string { return strconv.FormatBool(t == isTrue) }

// argMatcher is one compiled config.ArgumentMatch.
type argMatcher struct {
	ptr    pointer
	equals *string
	re     *regexp.Regexp
	// path: the value is a file path, matched as a cleaned copy (a relative one joined to
	// root); equals is cleaned.
	path bool
	// root is the directory a relative path is taken from, clean; "" when none is set, and
	// a relative path cannot be read.
	root string
	// names says how the pointer's tokens match member names: foldNames with fold_case;
	// otherwise strictNames in a restrictive rule (a lone case variant of a member is
	// ambiguous), exactNames in an allowing one.
	names names
	// container: equals is a JSON array or object (without path), and compares with an
	// array or object value; any other equals compares with one value (a string, number,
	// boolean or null) and cannot read an array or object.
	container bool
	// every: every value a * pointer reaches must match, and there must be one (the rule
	// allows); otherwise one is enough.
	every bool
}

// Compile compiles p; nil p allows everything. trusted reports whether an upstream's
// annotations are trusted (its trust_annotations): for the others, annotation matchers never
// match. If trusted is nil, no upstream's are. trusted is called during decisions (at most
// once per decision, only when a rule with annotation matchers is reached), so it must be
// safe for concurrent use and cheap. Compile keeps p's rules (read-only) for
// Explain: p must not be modified afterwards.
//
// The config package validates a policy before it gets here, so the errors Compile returns
// (an unknown effect, a glob, regular expression or JSON pointer that does not compile) name
// the rule but are not worded for users.
func Compile(p *config.Policy, trusted func(upstream string) bool) (*Rules, error) {
	if trusted == nil {
		trusted = func(string) bool { return false }
	}
	if p == nil {
		p = &config.Policy{}
	}
	def := p.Default
	if def == "" {
		def = config.EffectAllow
	}
	if !validEffect(def) {
		return nil, fmt.Errorf("policy default: unknown effect %q", def)
	}
	r := &Rules{
		rules:   make([]rule, len(p.Rules)),
		def:     decision(def, DefaultRule, "", p.DryRun),
		dryRun:  p.DryRun,
		trusted: trusted,
	}
	for i := range p.Rules {
		c := &p.Rules[i]
		name := c.Name
		if name == "" {
			name = fmt.Sprintf("rule %d", i+1)
		}
		if err := r.rules[i].compile(c, name, p.DryRun); err != nil {
			return nil, fmt.Errorf("policy rule %q: %w", name, err)
		}
	}
	for _, c := range r.rules {
		if c.args != nil {
			if c.decision.Effect == config.EffectHide {
				continue
			}
			c.args, c.paths = nil, false
		}
		r.visible = append(r.visible, c)
	}
	r.view = viewRules(r.visible, def)
	return r, nil
}

func validEffect(e string) bool {
	switch e {
	case config.EffectAllow, config.EffectDeny, config.EffectHide, config.EffectApprove:
		return true
	}
	return false
}

// decision returns the decision of effect by rule, with reason or a default one.
func decision(effect, rule, reason string, dryRun bool) Decision {
	if reason == "" {
		switch effect {
		case config.EffectDeny:
			reason = defaultDenyReason
		case config.EffectHide:
			reason = defaultHideReason
		case config.EffectApprove:
			reason = defaultApproveReason
		}
	}
	return Decision{Effect: effect, Rule: rule, Reason: reason, DryRun: dryRun}
}

func (r *rule) compile(c *config.Rule, name string, dryRun bool) error {
	if !validEffect(c.Effect) {
		return fmt.Errorf("unknown effect %q", c.Effect)
	}
	r.cfg = c
	r.decision = decision(c.Effect, name, c.Reason, dryRun)
	m := &c.Match
	var err error
	globs := []struct {
		key  string
		dst  *glob.Set
		list []string
	}{
		{"upstreams", &r.upstreams, m.Upstreams},
		{"tools", &r.tools, m.Tools},
		{"prompts", &r.prompts, m.Prompts},
		{"resources", &r.resrcs, m.Resources},
	}
	for _, g := range globs {
		if *g.dst, err = glob.CompileSet(g.list); err != nil {
			return fmt.Errorf("%s: %w", g.key, err)
		}
	}
	if r.who, err = principal.Compile(&m.Principal); err != nil {
		return fmt.Errorf("principal: %w", err)
	}
	r.hasTools, r.hasPrompts, r.hasResources = m.Tools != nil, m.Prompts != nil, m.Resources != nil
	r.items = r.hasTools || r.hasPrompts || r.hasResources
	r.readOnly, r.destructive, r.openWorld = triOf(m.ReadOnlyHint), triOf(m.DestructiveHint), triOf(m.OpenWorldHint)
	r.restrictive = c.Effect != config.EffectAllow
	root := ""
	for i, a := range m.Arguments {
		am := argMatcher{equals: a.Equals, path: a.Path, every: !r.restrictive}
		switch {
		case a.FoldCase:
			am.names = foldNames
		case r.restrictive:
			am.names = strictNames
		}
		if a.Equals != nil && !a.Path {
			am.container = isContainer(*a.Equals)
		}
		if am.ptr, err = compilePointer(a.Pointer); err != nil {
			return fmt.Errorf("arguments[%d]: pointer %q: %w", i, a.Pointer, err)
		}
		if a.Path {
			if a.Root != "" {
				if !strings.HasPrefix(a.Root, "/") {
					return fmt.Errorf("arguments[%d]: root %q is not an absolute path", i, a.Root)
				}
				am.root = path.Clean(a.Root)
			}
			if r.paths && am.root != root {
				return fmt.Errorf("arguments[%d]: root %q differs from the root of the rule's other path matchers, %q", i, a.Root, root)
			}
			root = am.root
			if a.Equals != nil {
				if !strings.HasPrefix(*a.Equals, "/") && am.root == "" {
					return fmt.Errorf("arguments[%d]: equals %q is a relative path, and there is no root", i, *a.Equals)
				}
				cleaned := cleanPath(*a.Equals, am.root)
				am.equals = &cleaned
			}
			r.paths = true
		} else if a.Root != "" {
			return fmt.Errorf("arguments[%d]: root without path", i)
		}
		switch {
		case a.Equals != nil && a.Matches != "":
			return fmt.Errorf("arguments[%d]: both equals and matches are set", i)
		case a.Equals == nil && a.Matches == "":
			return fmt.Errorf("arguments[%d]: neither equals nor matches is set", i)
		case a.Matches != "":
			if am.re, err = regexp.Compile(a.Matches); err != nil {
				return fmt.Errorf("arguments[%d]: matches: %w", i, err)
			}
		}
		r.args = append(r.args, am)
	}
	r.rewrites = r.paths && (c.Effect == config.EffectAllow || c.Effect == config.EffectApprove)
	return nil
}

// isContainer reports whether s is a JSON array or object.
func isContainer(s string) bool {
	return s != "" && (s[0] == '[' || s[0] == '{') && json.Valid([]byte(s))
}

// Input is the subject of a decision: who asks for what.
type Input struct {
	Principal session.Principal
	// Upstream is the name of the upstream that serves the item.
	Upstream string
	// Kind is what is addressed: Tool, Prompt or Resource (a resource URI, or for a
	// completion a resource template). A completion's caller passes Prompt or Resource, for
	// what is completed; other kinds match no rule with tools, prompts or resources set.
	Kind pipeline.Kind
	// Name is the upstream's OWN tool or prompt name or resource URI (renames are
	// presentation).
	Name string
	// Arguments are the tools/call or prompts/get arguments, raw JSON; nil when none.
	// Arguments that are not valid JSON match no argument matcher.
	Arguments json.RawMessage
	// Annotations are the tool's annotation hints as the upstream declared them; nil when
	// unknown, which is read as declaring none (the MCP defaults apply).
	Annotations *Annotations
}

// Annotations are a tool's annotation hints (MCP 2025-11-25, ToolAnnotations); nil is a hint
// not declared.
type Annotations struct{ ReadOnly, Destructive, OpenWorld *bool }

// ParseAnnotations reads a tool's annotations object (raw JSON, as the tool is listed) into
// the hints rules match; nil when raw is empty or not an object of hints.
func ParseAnnotations(raw json.RawMessage) (*Annotations, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var a struct {
		ReadOnly    *bool `json:"readOnlyHint"`
		Destructive *bool `json:"destructiveHint"`
		OpenWorld   *bool `json:"openWorldHint"`
	}
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, fmt.Errorf("annotations: %w", err)
	}
	return &Annotations{ReadOnly: a.ReadOnly, Destructive: a.Destructive, OpenWorld: a.OpenWorld}, nil
}

// Decision is what the rules decided for one Input.
type Decision struct {
	// Effect is config.EffectAllow, EffectDeny, EffectHide or EffectApprove. Approve marks a
	// tools/call for a person's decision (the chain's approval link); on other methods the
	// gateway refuses it as deny.
	Effect string
	// Rule is the deciding rule's name; DefaultRule when none matched.
	Rule string
	// Reason is the rule's reason, or for deny, hide and approve without one a default
	// sentence; for a refusal of arguments a rule could not read (see Decide), what was
	// wrong with them. A hide's reason is for explanations, never for the caller, who is
	// refused as for a missing item.
	Reason string
	// DryRun is set when the rule set is in dry run: the effect was decided but is not to be
	// enforced (it is for the audit trail).
	DryRun bool
	// Arguments are Input.Arguments with the paths the deciding rule's path matchers read
	// cleaned, as they matched them, when that rule lets the call go on (allow, approve):
	// what the upstream is to get instead, so that what the rule checked is what is used
	// (unless DryRun). Nil when the deciding rule has no path matcher, refuses, or changed
	// nothing.
	Arguments json.RawMessage
	// Rewrites names the deciding rule when it set Arguments; nil otherwise.
	Rewrites []string
}

// Decide returns the decision for in: the effect of the first rule that matches it, or the
// default.
//
// A rule's argument matchers read the arguments as a decoder that matches member names
// case-insensitively (Go's encoding/json) might: arguments that give a member on the way to
// what a matcher reads more than once, under the same name or in names that differ only in
// case, are refused by the first rule reached whose matchers of the upstream, item,
// principal and annotations hold, whether the matcher has fold_case or not. Decide does not
// look at members elsewhere: params that repeat any member (the tool's name, say) must be
// refused by the caller before Decide, as the gateway does (protocol.DuplicateMember,
// TestMembersGivenTwiceAreRefused in package gateway).
//
// A path matcher matches a cleaned copy of its value (Decision.Arguments says what the
// upstream gets). In a rule that refuses or holds calls (deny, hide, approve), a matcher that
// cannot read its value refuses the call when the rule's other matchers hold, rather than let
// it past: a path matcher's value that is not a string or is relative without root; a
// matches or equals matcher's value that is an array or object where it reads one value (an
// equals that is itself an array or object compares as before); a value under a * token that
// is not an array; a member the matcher reads given only in a name that differs in case,
// without fold_case. In an allowing rule, such a value does not match.
//
// A refusal is by the rule, with the rule's effect when it hides (the caller learns no more
// than of a missing item) and deny otherwise, and a reason that says what is wrong with the
// arguments.
//
// It is on the hot path of every request: it does not allocate unless a rule's argument
// matcher meets an escaped string or a path to clean, or refuses arguments.
func (r *Rules) Decide(in Input) Decision {
	if r == nil {
		return Decision{Effect: config.EffectAllow, Rule: DefaultRule}
	}
	st := state{r: r}
	for i := range r.rules {
		c := &r.rules[i]
		switch f := c.check(&in, &st); {
		case f.ok():
			return c.decided(&in)
		case f.refuse:
			return c.refusal(f, in.Arguments)
		}
	}
	return r.def
}

// refusal is the decision of rule c whose argument matcher f.arg could not read the
// arguments (f.refuse), saying what is wrong with them: hide when c hides (a refusal that
// said more would tell the caller that the item exists), deny otherwise.
func (c *rule) refusal(f failure, args []byte) Decision {
	a := &c.args[f.arg]
	var reason string
	switch f.why {
	case wRepeated:
		reason = fmt.Sprintf("the arguments give %s more than once: send it once", pointerName(a.ptr.prefix(f.at)))
	case wCaseVariant:
		reason = fmt.Sprintf("the arguments give %s more than once, in names that differ only in case (an upstream may read either): send it once, in one spelling", pointerName(a.ptr.prefix(f.at)))
	case wCaseOnly:
		reason = fmt.Sprintf("the arguments give %s in a name that differs only in case (an upstream may read it as that member): send it in its exact name", pointerName(a.ptr.prefix(f.at)))
	case wNotPath:
		reason = fmt.Sprintf("the argument %s must be a file path, a string, not %s", pointerName(a.ptr.text), kindOf(args[f.start:f.end]))
	case wContainer:
		if a.re != nil {
			reason = fmt.Sprintf("the argument %s must be a string, not %s", pointerName(a.ptr.text), kindOf(args[f.start:f.end]))
		} else {
			reason = fmt.Sprintf("the argument %s must be one value (a string, a number, a boolean or null), not %s", pointerName(a.ptr.text), kindOf(args[f.start:f.end]))
		}
	case wNotArray:
		// The value where the * token (f.at) was to read an array.
		if a.path {
			reason = fmt.Sprintf("the argument %s must be an array of file paths, not %s", pointerName(a.ptr.prefix(f.at-1)), kindOf(args[f.start:f.end]))
		} else {
			reason = fmt.Sprintf("the argument %s must be an array, not %s", pointerName(a.ptr.prefix(f.at-1)), kindOf(args[f.start:f.end]))
		}
	case wRelative:
		reason = fmt.Sprintf("the argument %s must be an absolute path (starting with /): the gateway's policy cannot tell where a relative one leads", pointerName(a.ptr.text))
	}
	effect := config.EffectDeny
	if c.decision.Effect == config.EffectHide {
		effect = config.EffectHide
	}
	return Decision{Effect: effect, Rule: c.decision.Rule, DryRun: c.decision.DryRun, Reason: reason}
}

// pointerName names an argument by its pointer, for messages.
func pointerName(ptr string) string {
	if ptr == "" {
		return `"" (the whole arguments)`
	}
	return ptr
}

// kindOf names the kind of a raw JSON value: "an array", "a number".
func kindOf(v []byte) string {
	switch v[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// decided returns the decision of rule c, which matched in: with the paths its path matchers
// read cleaned, when it lets the call go on.
func (c *rule) decided(in *Input) Decision {
	d := c.decision
	if !c.rewrites {
		return d
	}
	args, changed := []byte(in.Arguments), false
	for i := range c.args {
		if a := &c.args[i]; a.path {
			if next := a.clean(args); next != nil {
				args, changed = next, true
			}
		}
	}
	if changed {
		d.Arguments, d.Rewrites = args, []string{d.Rule}
	}
	return d
}

// clean returns doc, valid JSON, with every path a reads replaced by its cleaned form; nil
// when none changes. A value a cannot read is left as it is (the rule did not match, or
// refused, if there was one).
func (a *argMatcher) clean(doc []byte) []byte {
	type replacement struct {
		start, end int
		path       string
	}
	var repl []replacement
	a.ptr.walk(doc, a.names, func(start, end int, f found, _ int) {
		if f != present || doc[start] != '"' {
			return
		}
		inside := doc[start+1 : end-1]
		if plain(inside) && isCleanPath(inside) {
			return
		}
		s, ok := decodeString(inside)
		if !ok || !strings.HasPrefix(s, "/") && a.root == "" {
			return
		}
		if cleaned := cleanPath(s, a.root); cleaned != s {
			repl = append(repl, replacement{start, end, cleaned})
		}
	})
	if repl == nil {
		return nil
	}
	out := make([]byte, 0, len(doc)+16*len(repl))
	last := 0
	for _, r := range repl {
		out = append(out, doc[last:r.start]...)
		out = protocol.AppendString(out, r.path)
		last = r.end
	}
	return append(out, doc[last:]...)
}

// Visible reports whether an item may be listed for in.Principal: false when the decision
// for it is hide. Deny and approve still list the item: the client sees it and is refused on
// use. A list entry has no arguments (in.Arguments is ignored): a hide rule with argument
// matchers is skipped, and any other such rule is read without them, so that an item it
// might allow stays listed. In dry run, every item is visible.
func (r *Rules) Visible(in Input) bool {
	if r == nil || r.dryRun {
		return true
	}
	st := state{r: r}
	for i := range r.visible {
		if c := &r.visible[i]; c.check(&in, &st).ok() {
			return c.decision.Effect != config.EffectHide
		}
	}
	return r.def.Effect != config.EffectHide
}

// ViewKey returns a string identifying what p may see: two principals with the same key get
// the same Visible answer for every item. A catalog filtered by Visible can thus be cached
// per key rather than per session. Keys compare only among those of the same *Rules.
//
// Whether a principal sees an item depends on it only through which rules' principal
// matchers it satisfies, and only for the rules that Visible reads and that can change an
// outcome: hide rules, and the other rules that come before a hide (a later hide rule or a
// hide default), which they may shadow. Rules without principal matchers match every
// principal alike. The key is the indexes, among those rules, of the ones whose principal
// matchers p satisfies, joined by commas; in dry run, and for a rule set without such rules,
// it is "" for everyone.
func (r *Rules) ViewKey(p session.Principal) string {
	if r == nil || r.dryRun || len(r.view) == 0 {
		return ""
	}
	var buf []byte
	for _, i := range r.view {
		if r.visible[i].who.Match(&p) {
			if buf != nil {
				buf = append(buf, ',')
			} else {
				buf = make([]byte, 0, 32)
			}
			buf = strconv.AppendInt(buf, int64(i), 10)
		}
	}
	return string(buf)
}

// viewRules returns the indexes of the rules ViewKey reads (see there).
func viewRules(rules []rule, def string) []int {
	var view []int
	hideFollows := def == config.EffectHide
	for i := len(rules) - 1; i >= 0; i-- {
		c := &rules[i]
		if c.args != nil {
			continue // never read by Visible
		}
		hide := c.decision.Effect == config.EffectHide
		if c.who != nil && (hide || hideFollows) {
			view = append(view, i)
		}
		hideFollows = hideFollows || hide
	}
	for i, j := 0, len(view)-1; i < j; i, j = i+1, j-1 {
		view[i], view[j] = view[j], view[i]
	}
	return view
}

// state is what one evaluation learns once and reuses across rules.
type state struct {
	r *Rules
	// trust is whether the input's upstream's annotations are trusted; unset until read.
	trust tri
	// args is whether the input's arguments are valid JSON; unset until read.
	args tri
}

// cleanPath returns p as the path it names: joined to root when relative, then cleaned as
// path.Clean does (repeated slashes, `.` and `..` resolved; `..` at the root stays there).
func cleanPath(p, root string) string {
	if !strings.HasPrefix(p, "/") {
		p = root + "/" + p
	}
	return path.Clean(p)
}

// isCleanPath reports whether p is an absolute path that cleanPath leaves as it is: no empty,
// `.` or `..` element, and no slash at the end (but for the root itself).
func isCleanPath(p []byte) bool {
	if len(p) == 0 || p[0] != '/' {
		return false
	}
	if len(p) == 1 {
		return true
	}
	if p[len(p)-1] == '/' {
		return false
	}
	for i := 0; i < len(p); {
		// p[i] is a slash; the element runs to the next one.
		j := i + 1
		for j < len(p) && p[j] != '/' {
			j++
		}
		switch e := p[i+1 : j]; {
		case len(e) == 0, len(e) == 1 && e[0] == '.', len(e) == 2 && e[0] == '.' && e[1] == '.':
			return false
		}
		i = j
	}
	return true
}

func (st *state) trusted(upstream string) bool {
	if st.trust == unset {
		st.trust = isFalse
		if st.r.trusted(upstream) {
			st.trust = isTrue
		}
	}
	return st.trust == isTrue
}

func (st *state) validArgs(args []byte) bool {
	if st.args == unset {
		st.args = isFalse
		if len(args) > 0 && json.Valid(args) {
			st.args = isTrue
		}
	}
	return st.args == isTrue
}

// field names the matcher that failed.
type field uint8

const (
	matched field = iota
	fUpstreams
	fKind // tools, prompts, resources are set, but not for the input's kind
	fName
	fPrincipal
	fAnnotations
	fArguments
)

// failure says why a rule did not match: which matcher failed, and for some, what exactly.
type failure struct {
	field field
	// arg is the index of the failing argument matcher (fArguments).
	arg int
	// who is the failing principal matcher (fPrincipal).
	who principal.Field
	// why is a detail of the failure: argument and annotation failures.
	why why
	// refuse: the rule refuses the request for its arguments (Decide), rather than not
	// match.
	refuse bool
	// start, end are the span, in the arguments, of the value an argument failure is about;
	// at is the index of the pointer's token where a member is given more than once (or
	// only in a name that differs in case), or where the pointer cannot go on (a * token
	// meets what is not an array).
	start, end, at int
}

type why uint8

const (
	_ why = iota
	wNotTrusted
	wNotTool
	wReadOnly
	wDestructive
	wOpenWorld
	wInvalidArgs
	wMissing
	wNotEqual
	// wNotString: a matches matcher (not a path one) met a number, a boolean or null, which
	// no regular expression matches.
	wNotString
	// wNotPath: a path matcher met a value that is not a string.
	wNotPath
	// wContainer: a matches or equals matcher (not a path one) met an array or an object
	// where it reads one value.
	wContainer
	wNoMatch
	// wEmpty: a * token met an array without elements.
	wEmpty
	// wNotArray: a * token met a value that is not an array.
	wNotArray
	// wRelative: a path matcher without root met a relative path.
	wRelative
	// wRepeated: an object on the way gives the member twice, under the same name.
	wRepeated
	// wCaseVariant: an object on the way gives the member in names that differ in case.
	wCaseVariant
	// wCaseOnly: an object on the way gives the member only in a name that differs in case
	// (strictNames).
	wCaseOnly
)

// unreadable reports whether w says that a matcher could not read its value: a rule that
// refuses or holds calls refuses it (when its other matchers hold).
func (w why) unreadable() bool {
	switch w {
	case wNotPath, wContainer, wNotArray, wRelative, wCaseOnly:
		return true
	}
	return false
}

func (f failure) ok() bool { return f.field == matched }

// check matches in against the rule, every matcher in a fixed order (cheap ones first), and
// returns the first that fails. The argument matchers are all read: a member given more than
// once where any of them reads refuses the request, and so, in a rule that refuses or holds
// calls, does a value one cannot read, when the others match.
func (c *rule) check(in *Input, st *state) failure {
	if c.upstreams != nil && !c.upstreams.Match(in.Upstream) {
		return failure{field: fUpstreams}
	}
	if c.items {
		var set glob.Set
		switch {
		case in.Kind == pipeline.Tool && c.hasTools:
			set = c.tools
		case in.Kind == pipeline.Prompt && c.hasPrompts:
			set = c.prompts
		case in.Kind == pipeline.Resource && c.hasResources:
			set = c.resrcs
		default:
			return failure{field: fKind}
		}
		if !set.Match(in.Name) {
			return failure{field: fName}
		}
	}
	if c.who != nil {
		if f := c.who.Check(&in.Principal); f != principal.None {
			return failure{field: fPrincipal, who: f}
		}
	}
	if c.readOnly != unset || c.destructive != unset || c.openWorld != unset {
		if w := c.checkAnnotations(in, st); w != 0 {
			return failure{field: fAnnotations, why: w}
		}
	}
	var fail, refuse failure
	for i := range c.args {
		a := &c.args[i]
		f := a.check(in.Arguments, st)
		if f.why == 0 {
			continue
		}
		f.field, f.arg = fArguments, i
		switch {
		case f.why == wRepeated || f.why == wCaseVariant:
			f.refuse = true
			return f
		case c.restrictive && f.why.unreadable():
			if !refuse.refuse {
				f.refuse = true
				refuse = f
			}
		case fail.field == matched:
			fail = f
		}
	}
	if fail.field != matched {
		return fail
	}
	return refuse
}

// hints returns the tool's hints, each declared or the MCP default (readOnlyHint false,
// destructiveHint true, openWorldHint true), and whether each was declared.
func hints(a *Annotations) (readOnly, destructive, openWorld bool, declared [3]bool) {
	readOnly, destructive, openWorld = false, true, true
	if a == nil {
		return
	}
	if a.ReadOnly != nil {
		readOnly, declared[0] = *a.ReadOnly, true
	}
	if a.Destructive != nil {
		destructive, declared[1] = *a.Destructive, true
	}
	if a.OpenWorld != nil {
		openWorld, declared[2] = *a.OpenWorld, true
	}
	return
}

// checkAnnotations matches the tool's annotations against the rule's; 0 when they match.
// Only tools have annotations, and only a trusted upstream's count.
func (c *rule) checkAnnotations(in *Input, st *state) why {
	if in.Kind != pipeline.Tool {
		return wNotTool
	}
	if !st.trusted(in.Upstream) {
		return wNotTrusted
	}
	readOnly, destructive, openWorld, _ := hints(in.Annotations)
	switch {
	case c.readOnly != unset && (c.readOnly == isTrue) != readOnly:
		return wReadOnly
	case c.destructive != unset && (c.destructive == isTrue) != destructive:
		return wDestructive
	case c.openWorld != unset && (c.openWorld == isTrue) != openWorld:
		return wOpenWorld
	}
	return 0
}

// check matches the arguments: a failure with why 0 when they match, or why not and about
// which value (its field and arg are left for the caller). A path matcher matches a cleaned
// copy of each value. Under a * token, every value must match when a.every, and one is
// enough otherwise; but a value the matcher cannot read is reported first then (the rule
// refuses it).
func (a *argMatcher) check(args []byte, st *state) failure {
	if !st.validArgs(args) {
		if len(args) == 0 {
			return failure{why: wMissing}
		}
		return failure{why: wInvalidArgs}
	}
	values, matches := 0, 0
	var first, unreadable failure // the first value that does not match, and that the matcher cannot read
	f, at := a.ptr.walk(args, a.names, func(start, end int, f found, at int) {
		values++
		w := a.value(args[start:end], f)
		switch {
		case w == 0:
			matches++
			return
		case w.unreadable() && unreadable.why == 0:
			unreadable = failure{why: w, start: start, end: end, at: at}
		}
		if first.why == 0 {
			first = failure{why: w, start: start, end: end, at: at}
		}
	})
	switch f {
	case repeated:
		return failure{why: wRepeated, at: at}
	case caseVariant:
		return failure{why: wCaseVariant, at: at}
	case caseOnly:
		return failure{why: wCaseOnly, at: at}
	}
	switch {
	case values == 0:
		return failure{why: wEmpty}
	case a.every:
		return first
	case unreadable.why != 0:
		return unreadable
	case matches > 0:
		return failure{}
	}
	return first
}

// value matches one value the pointer reached (f present), or says why there is none; 0 when
// it matches.
func (a *argMatcher) value(v []byte, f found) why {
	switch f {
	case missing:
		return wMissing
	case notArray:
		return wNotArray
	}
	if a.path {
		return a.pathValue(v)
	}
	if (v[0] == '[' || v[0] == '{') && !a.container {
		return wContainer
	}
	if a.re != nil {
		if v[0] != '"' {
			return wNotString
		}
		if matchString(a.re, v[1:len(v)-1]) {
			return 0
		}
		return wNoMatch
	}
	if v[0] == '"' {
		if stringEquals(v[1:len(v)-1], *a.equals) {
			return 0
		}
		return wNotEqual
	}
	if compactEquals(v, *a.equals) {
		return 0
	}
	return wNotEqual
}

// pathValue matches v, a raw JSON value, as a path: a string, cleaned (joined to the root
// when relative). It allocates only for a path to clean or one with escapes.
func (a *argMatcher) pathValue(v []byte) why {
	if v[0] != '"' {
		return wNotPath
	}
	inside := v[1 : len(v)-1]
	if plain(inside) && isCleanPath(inside) {
		if a.re != nil {
			return whyNot(a.re.Match(inside), wNoMatch)
		}
		return whyNot(string(inside) == *a.equals, wNotEqual)
	}
	s, ok := decodeString(inside)
	if !ok {
		return wNotPath
	}
	if !strings.HasPrefix(s, "/") && a.root == "" {
		return wRelative
	}
	s = cleanPath(s, a.root)
	if a.re != nil {
		return whyNot(a.re.MatchString(s), wNoMatch)
	}
	return whyNot(s == *a.equals, wNotEqual)
}

// whyNot is 0 when ok, else w.
func whyNot(ok bool, w why) why {
	if ok {
		return 0
	}
	return w
}

// matchString reports whether re matches the decoded JSON string whose inside is given.
func matchString(re *regexp.Regexp, inside []byte) bool {
	if plain(inside) {
		return re.Match(inside)
	}
	s, ok := decodeString(inside)
	return ok && re.MatchString(s)
}

// stringEquals reports whether the JSON string whose inside is given decodes to want.
func stringEquals(inside []byte, want string) bool {
	if plain(inside) {
		return string(inside) == want
	}
	s, ok := decodeString(inside)
	return ok && s == want
}

// plain reports whether the inside of a JSON string is its text as is: no escapes, valid
// UTF-8 (a decoder replaces invalid bytes with U+FFFD).
func plain(b []byte) bool {
	for _, c := range b {
		if c == '\\' {
			return false
		}
	}
	return utf8.Valid(b)
}
