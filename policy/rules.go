package policy

import (
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/manifold-mcp/manifold/config"
	"github.com/manifold-mcp/manifold/glob"
	"github.com/manifold-mcp/manifold/pipeline"
	"github.com/manifold-mcp/manifold/policy/principal"
	"github.com/manifold-mcp/manifold/protocol"
	"github.com/manifold-mcp/manifold/session"
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
	readOnly               tri
	destructive            tri
	openWorld              tri
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
	// path: the value is a file path, cleaned (a relative one joined to root, absolute and
	// clean) before it is matched; equals is cleaned.
	path bool
	root string
	// fold: the pointer's member names match case-insensitively.
	fold bool
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
	for i, a := range m.Arguments {
		am := argMatcher{equals: a.Equals, path: a.Path, fold: a.FoldCase}
		if am.ptr, err = compilePointer(a.Pointer); err != nil {
			return fmt.Errorf("arguments[%d]: pointer %q: %w", i, a.Pointer, err)
		}
		if a.Path {
			am.root = a.Root
			if am.root == "" {
				am.root = "/"
			}
			if !strings.HasPrefix(am.root, "/") {
				return fmt.Errorf("arguments[%d]: root %q is not an absolute path", i, a.Root)
			}
			am.root = path.Clean(am.root)
			if a.Equals != nil {
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
	return nil
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
	// Effect is config.EffectAllow, EffectDeny, EffectHide or EffectApprove. Approve is
	// reported as such; the gateway treats it as deny until approvals exist.
	Effect string
	// Rule is the deciding rule's name; DefaultRule when none matched.
	Rule string
	// Reason is the rule's reason, or for deny, hide and approve without one a default
	// sentence.
	Reason string
	// DryRun is set when the rule set is in dry run: the effect was decided but is not to be
	// enforced (it is for the audit trail).
	DryRun bool
	// Arguments are Input.Arguments as the rules' path matchers cleaned them: what the
	// upstream is to get instead, so that what the rules checked is what is used (unless
	// DryRun). Nil when no matcher changed them.
	Arguments json.RawMessage
	// Rewrites name the rules whose path matchers changed the arguments, in order; nil when
	// none did.
	Rewrites []string
}

// Decide returns the decision for in: the effect of the first rule that matches it, or the
// default. Each rule reached whose other matchers hold cleans the paths its path matchers
// read, and the rules after it see them cleaned (Decision.Arguments). A rule's fold_case
// matcher that finds its member twice, in names that differ in case only, refuses the
// request (deny, by that rule). It is on the hot path of every request: it does not allocate
// unless a rule's argument matcher meets an escaped string or a path to clean.
func (r *Rules) Decide(in Input) Decision {
	if r == nil {
		return Decision{Effect: config.EffectAllow, Rule: DefaultRule}
	}
	st := state{r: r}
	for i := range r.rules {
		c := &r.rules[i]
		switch f := c.check(&in, &st); {
		case f.ok():
			return st.decided(c.decision)
		case f.why == wAmbiguous:
			return st.decided(c.ambiguous(f))
		}
	}
	return st.decided(r.def)
}

// ambiguous is the decision of rule c whose argument matcher f.arg found its member twice.
func (c *rule) ambiguous(f failure) Decision {
	return Decision{Effect: config.EffectDeny, Rule: c.decision.Rule, DryRun: c.decision.DryRun,
		Reason: fmt.Sprintf("the arguments give %s more than once, in names that differ only in case: send it once", c.args[f.arg].ptr.text)}
}

// Visible reports whether an item may be listed for in.Principal: false when the decision
// for it is hide. Deny and approve still list the item: the client sees it and is refused on
// use. A list entry has no arguments, so the rules with argument matchers are skipped (and
// in.Arguments is ignored). In dry run, every item is visible.
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
	// doc are the arguments as the path matchers reached so far cleaned them; nil while
	// they are the input's.
	doc []byte
	// rewrites name the rules whose path matchers changed doc.
	rewrites []string
}

// arguments are the arguments as the rules reached so far see them.
func (st *state) arguments(in *Input) []byte {
	if st.doc != nil {
		return st.doc
	}
	return in.Arguments
}

// decided returns d with the arguments the path matchers cleaned, if they changed any.
func (st *state) decided(d Decision) Decision {
	if st.doc != nil {
		d.Arguments, d.Rewrites = st.doc, st.rewrites
	}
	return d
}

// cleanPaths replaces, in the arguments, each string value a path matcher of c reads by its
// cleaned form (a value that is missing, ambiguous or not a string is left for the matcher to
// refuse), and notes c as a rule that rewrote them.
func (st *state) cleanPaths(c *rule, in *Input) {
	doc := st.arguments(in)
	if !st.validArgs(doc) {
		return
	}
	changed := false
	for i := range c.args {
		a := &c.args[i]
		if !a.path {
			continue
		}
		start, end, f := a.ptr.span(doc, a.fold)
		if f != present || doc[start] != '"' {
			continue
		}
		inside := doc[start+1 : end-1]
		if plain(inside) && isCleanPath(inside) {
			continue
		}
		s, ok := decodeString(inside)
		if !ok {
			continue
		}
		cleaned := cleanPath(s, a.root)
		if cleaned == s {
			continue
		}
		next := make([]byte, 0, len(doc)-(end-start)+len(cleaned)+2)
		next = append(next, doc[:start]...)
		next = protocol.AppendString(next, cleaned)
		doc, changed = append(next, doc[end:]...), true
	}
	if changed {
		st.doc = doc
		st.rewrites = append(st.rewrites, c.decision.Rule)
	}
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
	wNotString
	wNoMatch
	// wAmbiguous: a fold_case matcher found its member twice, in names that differ in case.
	wAmbiguous
)

func (f failure) ok() bool { return f.field == matched }

// check matches in against the rule, every matcher in a fixed order (cheap ones first), and
// returns the first that fails.
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
	if c.paths {
		st.cleanPaths(c, in)
	}
	args := st.arguments(in)
	for i := range c.args {
		if w := c.args[i].check(args, st); w != 0 {
			return failure{field: fArguments, arg: i, why: w}
		}
	}
	return failure{}
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

// check matches the arguments; 0 when they match. A path matcher's value has been cleaned
// (state.cleanPaths) before.
func (a *argMatcher) check(args []byte, st *state) why {
	if !st.validArgs(args) {
		if len(args) == 0 {
			return wMissing
		}
		return wInvalidArgs
	}
	start, end, f := a.ptr.span(args, a.fold)
	switch f {
	case missing:
		return wMissing
	case ambiguous:
		return wAmbiguous
	}
	v := args[start:end]
	if a.path && v[0] != '"' {
		return wNotString
	}
	if a.re != nil {
		if v[0] != '"' {
			return wNotString
		}
		inside := v[1 : len(v)-1]
		if matchString(a.re, inside) {
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
