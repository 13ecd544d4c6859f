package principal_test

import (
	"testing"

	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/policy/principal"
	"github.com/manifold-mcp/manifold/internal/session"
)

func TestCheck(t *testing.T) {
	no := false
	alice := session.Principal{Issuer: "https://idp", Subject: "alice", Groups: []string{"eng"}, Roles: []string{"admin"}, Scopes: []string{"tools:call"}}
	ci := session.Principal{Issuer: session.APIKeyIssuer, Subject: "ci-deploy"}
	anon := session.Principal{}
	tests := []struct {
		name string
		m    config.PrincipalMatch
		who  session.Principal
		want principal.Field
	}{
		{"unset matches anyone", config.PrincipalMatch{}, anon, principal.None},
		{"subjects glob", config.PrincipalMatch{Subjects: []string{"ali*"}}, alice, principal.None},
		{"subjects never match anonymous", config.PrincipalMatch{Subjects: []string{"*"}}, anon, principal.Subjects},
		{"api keys only match keys", config.PrincipalMatch{APIKeys: []string{"*"}}, alice, principal.APIKeys},
		{"api key by name", config.PrincipalMatch{APIKeys: []string{"ci-*"}}, ci, principal.None},
		{"groups literal", config.PrincipalMatch{Groups: []string{"e*"}}, alice, principal.Groups},
		{"empty list matches nothing", config.PrincipalMatch{Roles: []string{}}, alice, principal.Roles},
		{"scopes", config.PrincipalMatch{Scopes: []string{"tools:call"}}, alice, principal.None},
		{"anonymous false", config.PrincipalMatch{Anonymous: &no}, anon, principal.Anonymous},
		{"the first failing in order", config.PrincipalMatch{Anonymous: &no, Groups: []string{"x"}}, anon, principal.Anonymous},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := principal.Compile(&tt.m)
			if err != nil {
				t.Fatal(err)
			}
			if got := m.Check(&tt.who); got != tt.want {
				t.Errorf("Check = %v, want %v", got, tt.want)
			}
			if m.Match(&tt.who) != (tt.want == principal.None) {
				t.Errorf("Match disagrees with Check")
			}
		})
	}
	if m, err := principal.Compile(&config.PrincipalMatch{}); m != nil || err != nil {
		t.Errorf("Compile of no matcher = %v, %v; want nil, nil", m, err)
	}
	if _, err := principal.Compile(&config.PrincipalMatch{APIKeys: []string{"[a-"}}); err == nil {
		t.Error("a glob that does not compile: no error")
	}
}
