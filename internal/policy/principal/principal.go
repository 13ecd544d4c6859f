// Package principal matches principals against the principal matchers of the config
// (config.PrincipalMatch, the key `principal` of a policy rule's match and of a rate limit):
// one compiled form and one meaning for both, so that a rule and a limit written alike select
// the same principals.
//
//	m, err := principal.Compile(&rule.Match.Principal)
//	if err != nil { ... }
//	if m.Match(&who) { ... }
package principal

import (
	"fmt"

	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/glob"
	"github.com/manifold-mcp/manifold/internal/session"
)

// Field names a principal matcher, the key under `principal:`; None when all matched.
type Field uint8

const (
	None Field = iota
	Anonymous
	Subjects
	APIKeys
	Groups
	Roles
	Scopes
)

var fieldNames = [...]string{None: "", Anonymous: "anonymous", Subjects: "subjects", APIKeys: "api_keys", Groups: "groups", Roles: "roles", Scopes: "scopes"}

// String returns the field's config key, like "groups".
func (f Field) String() string { return fieldNames[f] }

// Matcher is a compiled config.PrincipalMatch. It is immutable and safe for concurrent use.
// The nil *Matcher, what Compile returns when no matcher is set, matches every principal.
type Matcher struct {
	// A nil field is unset and matches anything; a set one that is empty matches nothing.
	subjects, apiKeys     glob.Set
	groups, roles, scopes []string
	// anonymous is nil when unset.
	anonymous *bool
}

// Compile compiles m; nil when m sets no matcher. The config package validates the globs
// first, so an error here (a glob that does not compile) names the field but is not worded
// for users.
func Compile(m *config.PrincipalMatch) (*Matcher, error) {
	if !m.IsSet() {
		return nil, nil
	}
	c := &Matcher{groups: m.Groups, roles: m.Roles, scopes: m.Scopes}
	if m.Anonymous != nil {
		anonymous := *m.Anonymous
		c.anonymous = &anonymous
	}
	var err error
	if c.subjects, err = glob.CompileSet(m.Subjects); err != nil {
		return nil, fmt.Errorf("subjects: %w", err)
	}
	if c.apiKeys, err = glob.CompileSet(m.APIKeys); err != nil {
		return nil, fmt.Errorf("api_keys: %w", err)
	}
	return c, nil
}

// Match reports whether p satisfies every matcher set.
func (m *Matcher) Match(p *session.Principal) bool { return m.Check(p) == None }

// Check matches p against the matchers, in a fixed order, and returns the first that fails,
// or None. Subjects are globs over the subject of a principal that has one: never the
// anonymous principal, but an API key's (its name), as for any other; api_keys match API keys
// only. Groups, roles and scopes are literal: the principal must hold one of those listed.
// It does not allocate.
func (m *Matcher) Check(p *session.Principal) Field {
	if m == nil {
		return None
	}
	anonymous := p.Anonymous()
	switch {
	case m.anonymous != nil && *m.anonymous != anonymous:
		return Anonymous
	case m.subjects != nil && (anonymous || !m.subjects.Match(p.Subject)):
		return Subjects
	case m.apiKeys != nil && (p.Issuer != session.APIKeyIssuer || !m.apiKeys.Match(p.Subject)):
		return APIKeys
	case m.groups != nil && !holdsAny(p.Groups, m.groups):
		return Groups
	case m.roles != nil && !holdsAny(p.Roles, m.roles):
		return Roles
	case m.scopes != nil && !holdsAny(p.Scopes, m.scopes):
		return Scopes
	}
	return None
}

// holdsAny reports whether held and listed have a value in common.
func holdsAny(held, listed []string) bool {
	for _, h := range held {
		for _, l := range listed {
			if h == l {
				return true
			}
		}
	}
	return false
}
