package policy

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/pipeline"
	"github.com/manifold-mcp/manifold/internal/policy/principal"
	"github.com/manifold-mcp/manifold/internal/session"
)

// Step is one rule's part in a decision, as Explain tells it.
type Step struct {
	// Rule is the rule's name, Line its line in the config file (0 if unknown).
	Rule string
	Line int
	// Matched reports whether the rule matched; Why says, when not, which matcher failed,
	// like `upstreams: "github" matches none of ["fs*"]`.
	Matched bool
	Why     string
}

// Explain returns the decision for in, as Decide does, and how it came about: a Step for
// each rule in order, up to and including the deciding one (every rule when the default
// decided). Used by `gateway explain`; it allocates, and is not for the hot path.
func (r *Rules) Explain(in Input) ([]Step, Decision) {
	if r == nil {
		return nil, r.Decide(in)
	}
	st := state{r: r}
	steps := make([]Step, 0, len(r.rules))
	for i := range r.rules {
		c := &r.rules[i]
		f := c.check(&in, &st)
		step := Step{Rule: c.decision.Rule, Line: c.cfg.Line, Matched: f.ok()}
		if !f.ok() {
			step.Why = c.explain(f, &in)
		}
		steps = append(steps, step)
		switch {
		case f.ok():
			return steps, c.decided(&in)
		case f.refuse:
			return steps, c.refusal(f, in.Arguments)
		}
	}
	return steps, r.def
}

// explain says in words why the rule did not match in, f being the failure check found.
func (c *rule) explain(f failure, in *Input) string {
	m := &c.cfg.Match
	p := &in.Principal
	switch f.field {
	case fUpstreams:
		return fmt.Sprintf("upstreams: %q matches none of %q", in.Upstream, m.Upstreams)
	case fKind:
		var set []string
		for _, k := range []struct {
			key string
			on  bool
		}{{"tools", c.hasTools}, {"prompts", c.hasPrompts}, {"resources", c.hasResources}} {
			if k.on {
				set = append(set, k.key)
			}
		}
		return fmt.Sprintf("%s: the request is for %s", strings.Join(set, ", "), article(in.Kind))
	case fName:
		switch in.Kind {
		case pipeline.Tool:
			return fmt.Sprintf("tools: %q matches none of %q", in.Name, m.Tools)
		case pipeline.Prompt:
			return fmt.Sprintf("prompts: %q matches none of %q", in.Name, m.Prompts)
		}
		return fmt.Sprintf("resources: %q matches none of %q", in.Name, m.Resources)
	case fPrincipal:
		return explainPrincipal(f.who, &m.Principal, p)
	case fAnnotations:
		return c.explainAnnotations(f.why, in)
	case fArguments:
		return c.explainArgument(f, in.Arguments)
	}
	return ""
}

// explainPrincipal says why p fails the principal matcher f of m.
func explainPrincipal(f principal.Field, m *config.PrincipalMatch, p *session.Principal) string {
	switch f {
	case principal.Anonymous:
		if *m.Anonymous {
			return "anonymous: the principal is not anonymous"
		}
		return "anonymous: the principal is anonymous"
	case principal.Subjects:
		if p.Anonymous() {
			return "subjects: the principal is anonymous"
		}
		return fmt.Sprintf("subjects: %q matches none of %q", p.Subject, m.Subjects)
	case principal.APIKeys:
		if p.Issuer != session.APIKeyIssuer {
			return "api_keys: the principal is not an API key"
		}
		return fmt.Sprintf("api_keys: %q matches none of %q", p.Subject, m.APIKeys)
	case principal.Groups:
		return fmt.Sprintf("groups: the principal holds none of %q (it holds %q)", m.Groups, nonNil(p.Groups))
	case principal.Roles:
		return fmt.Sprintf("roles: the principal holds none of %q (it holds %q)", m.Roles, nonNil(p.Roles))
	case principal.Scopes:
		return fmt.Sprintf("scopes: the principal holds none of %q (it holds %q)", m.Scopes, nonNil(p.Scopes))
	}
	return ""
}

func (c *rule) explainAnnotations(w why, in *Input) string {
	readOnly, destructive, openWorld, declared := hints(in.Annotations)
	hint := func(name string, want tri, got, declared bool) string {
		s := fmt.Sprintf("annotations: %s is %t", name, got)
		if !declared {
			s += " (not declared: the default)"
		}
		return s + fmt.Sprintf(", not %s", want)
	}
	switch w {
	case wNotTrusted:
		return fmt.Sprintf("annotations of %s are not trusted", in.Upstream)
	case wNotTool:
		return fmt.Sprintf("annotations: the request is for %s, which has none", article(in.Kind))
	case wReadOnly:
		return hint("readOnlyHint", c.readOnly, readOnly, declared[0])
	case wDestructive:
		return hint("destructiveHint", c.destructive, destructive, declared[1])
	case wOpenWorld:
		return hint("openWorldHint", c.openWorld, openWorld, declared[2])
	}
	return ""
}

func (c *rule) explainArgument(f failure, args []byte) string {
	a := &c.args[f.arg]
	ptr := pointerName(a.ptr.text)
	switch f.why {
	case wInvalidArgs:
		return "arguments: the request's arguments are not valid JSON"
	case wMissing:
		if len(args) == 0 {
			return fmt.Sprintf("arguments: %s is missing (the request has no arguments)", ptr)
		}
		return fmt.Sprintf("arguments: %s is missing", ptr)
	case wEmpty:
		return fmt.Sprintf("arguments: %s reaches no value (an array without elements)", ptr)
	case wRepeated:
		return fmt.Sprintf("arguments: %s is given more than once: the request is refused", pointerName(a.ptr.prefix(f.at)))
	case wCaseVariant:
		return fmt.Sprintf("arguments: %s is given more than once, in names that differ only in case: the request is refused", pointerName(a.ptr.prefix(f.at)))
	}
	refused := ""
	if f.refuse {
		refused = ": the request is refused"
	}
	if f.why == wCaseOnly {
		return fmt.Sprintf("arguments: %s is given in a name that differs only in case%s", pointerName(a.ptr.prefix(f.at)), refused)
	}
	v := args[f.start:f.end]
	shown := shorten(v)
	switch f.why {
	case wNotArray:
		return fmt.Sprintf("arguments: %s meets %s, not an array%s", ptr, shown, refused)
	case wRelative:
		return fmt.Sprintf("arguments: %s is %s, a relative path, and the matcher has no root%s", ptr, shown, refused)
	case wNotPath:
		return fmt.Sprintf("arguments: %s is %s, not a string (a file path)%s", ptr, shown, refused)
	case wNotString:
		return fmt.Sprintf("arguments: %s is %s, not a string (matches %q)", ptr, shown, a.re.String())
	case wContainer:
		if a.re != nil {
			return fmt.Sprintf("arguments: %s is %s, not a string (matches %q)%s", ptr, shown, a.re.String(), refused)
		}
		return fmt.Sprintf("arguments: %s is %s, not one value (equals %q)%s", ptr, shown, *a.equals, refused)
	}
	if a.path {
		if s, ok := decodeString(v[1 : len(v)-1]); ok {
			if cleaned := cleanPath(s, a.root); cleaned != s {
				shown += fmt.Sprintf(" (as a path, %q)", cleaned)
			}
		}
	}
	switch f.why {
	case wNoMatch:
		return fmt.Sprintf("arguments: %s is %s, which does not match %q", ptr, shown, a.re.String())
	case wNotEqual:
		return fmt.Sprintf("arguments: %s is %s, not %q", ptr, shown, *a.equals)
	}
	return ""
}

// shorten returns a raw JSON value for a message, cut if long.
func shorten(v []byte) string {
	const max = 80
	if len(v) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(v[cut]) {
			cut--
		}
		return string(v[:cut]) + "…"
	}
	return string(v)
}

// article names a kind with its article: "a tool", "a resource".
func article(k pipeline.Kind) string {
	s := k.String()
	if strings.ContainsRune("aeiou", rune(s[0])) {
		return "an " + s
	}
	return "a " + s
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
