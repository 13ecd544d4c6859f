package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/manifold-mcp/manifold/auth"
	"github.com/manifold-mcp/manifold/gateway"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/pipeline"
	"github.com/manifold-mcp/manifold/internal/session"
	"github.com/manifold-mcp/manifold/policy"
)

// explain prints which policy rule decides a request, and why each rule before it did not
// match: a policy change can be tried before it bites. Names are the upstream's own (policy
// matches them; renames are presentation).
func explain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("explain", flag.ContinueOnError)
	fs.SetOutput(stderr)
	load := configFlags(fs)
	subject := fs.String("subject", "", "the principal's subject (sub); empty with -api-key or for anonymous")
	issuer := fs.String("issuer", "", "the principal's issuer (default: the config's first OIDC issuer)")
	apiKey := fs.String("api-key", "", "the principal is the API key of this `name` in auth.api_keys or auth.api_keys_file (its name, never the key), with its groups, roles and scopes")
	groups := fs.String("groups", "", "the principal's groups, comma-separated")
	roles := fs.String("roles", "", "the principal's roles, comma-separated")
	scopes := fs.String("scopes", "", "the principal's scopes, comma-separated")
	up := fs.String("upstream", "", "the upstream (required)")
	tool := fs.String("tool", "", "a tool, by the upstream's own name")
	prompt := fs.String("prompt", "", "a prompt, by the upstream's own name")
	resource := fs.String("resource", "", "a resource URI, as the upstream knows it")
	arguments := fs.String("args", "", "the call's arguments, a JSON object")
	annotations := fs.String("annotations", "", `the tool's annotations, a JSON object like {"readOnlyHint":true}`)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg, code := load(stderr)
	if cfg == nil {
		return code
	}
	in := policy.Input{Upstream: *up, Arguments: json.RawMessage(*arguments)}
	switch {
	case *tool != "":
		in.Kind, in.Name = pipeline.Tool, *tool
	case *prompt != "":
		in.Kind, in.Name = pipeline.Prompt, *prompt
	case *resource != "":
		in.Kind, in.Name = pipeline.Resource, *resource
	}
	if *up == "" || in.Name == "" {
		fmt.Fprintln(stderr, "gateway explain: -upstream and one of -tool, -prompt or -resource are required")
		return 2
	}
	if *arguments != "" && !json.Valid([]byte(*arguments)) {
		fmt.Fprintln(stderr, "gateway explain: -args is not JSON")
		return 2
	}
	var err error
	if in.Annotations, err = policy.ParseAnnotations(json.RawMessage(*annotations)); err != nil {
		fmt.Fprintf(stderr, "gateway explain: -annotations: %v\n", err)
		return 2
	}
	switch {
	case *apiKey != "":
		if *groups != "" || *roles != "" || *scopes != "" {
			fmt.Fprintln(stderr, "gateway explain: with -api-key, the key's groups, roles and scopes are those of its entry in the config: leave out -groups, -roles and -scopes")
			return 2
		}
		p, code := apiKeyPrincipal(cfg, *apiKey, stderr)
		if code != 0 {
			return code
		}
		in.Principal = p
	case *subject != "":
		in.Principal = session.Principal{Issuer: *issuer, Subject: *subject}
		if in.Principal.Issuer == "" && len(cfg.Auth.OIDC) > 0 {
			in.Principal.Issuer = cfg.Auth.OIDC[0].URL
		}
	}
	if *apiKey == "" {
		in.Principal.Groups, in.Principal.Roles, in.Principal.Scopes = list(*groups), list(*roles), list(*scopes)
	}
	trusted := map[string]bool{}
	known := false
	for _, u := range cfg.Upstreams {
		trusted[u.Name] = u.TrustAnnotations
		known = known || u.Name == *up
	}
	if !known {
		fmt.Fprintf(stderr, "gateway explain: warning: the config has no upstream %q\n", *up)
	}
	rules, err := policy.Compile(&cfg.Policy, func(u string) bool { return trusted[u] })
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	steps, d := rules.Explain(in)
	fmt.Fprintf(stdout, "principal %s", in.Principal.String())
	for _, claim := range []struct {
		name   string
		values []string
	}{{"groups", in.Principal.Groups}, {"roles", in.Principal.Roles}, {"scopes", in.Principal.Scopes}} {
		if len(claim.values) > 0 {
			fmt.Fprintf(stdout, " %s %q", claim.name, claim.values)
		}
	}
	fmt.Fprintf(stdout, ", %s %q of upstream %s\n", in.Kind, in.Name, in.Upstream)
	for _, s := range steps {
		mark := "  no "
		if s.Matched {
			mark = "  YES"
		}
		fmt.Fprintf(stdout, "%s %s (%s:%d)", mark, s.Rule, cfg.Policy.File, s.Line)
		if s.Why != "" {
			fmt.Fprintf(stdout, ": %s", s.Why)
		}
		fmt.Fprintln(stdout)
	}
	switch {
	case d.Arguments != nil && d.DryRun:
		fmt.Fprintf(stdout, "arguments as %s cleaned their paths (in dry run the upstream gets them as sent): %s\n", strings.Join(d.Rewrites, ", "), d.Arguments)
	case d.Arguments != nil:
		fmt.Fprintf(stdout, "arguments the upstream gets, paths cleaned by %s: %s\n", strings.Join(d.Rewrites, ", "), d.Arguments)
	}
	fmt.Fprintf(stdout, "decision: %s by %s", d.Effect, d.Rule)
	if d.Reason != "" {
		fmt.Fprintf(stdout, " (%s)", d.Reason)
	}
	if d.DryRun {
		fmt.Fprint(stdout, " [dry run: not enforced]")
	}
	fmt.Fprintln(stdout)
	return 0
}

// apiKeyPrincipal returns the principal of the client API key named name, as the gateway
// authenticates it (gateway.APIKeys, auth.APIKey.Principal); a non-zero code when there is
// none. A value that is a key rather than a name (one of the configured keys, or anything
// with the keys' prefix) is refused without being printed: it is a secret, and the command's
// output may land in a terminal's history or a ticket.
func apiKeyPrincipal(cfg *config.Config, name string, stderr io.Writer) (session.Principal, int) {
	keys, err := gateway.APIKeys(cfg)
	if err != nil {
		fmt.Fprintln(stderr, "gateway explain:", err)
		return session.Principal{}, 1
	}
	for i := range keys {
		if keys[i].Name == name {
			return keys[i].Principal(), 0
		}
	}
	if k, ok := auth.FindAPIKey(keys, name); ok {
		fmt.Fprintf(stderr, "gateway explain: -api-key takes a key's name, and this is the key itself (a secret: do not paste it): pass -api-key %s\n", k.Name)
		return session.Principal{}, 2
	}
	if strings.HasPrefix(name, auth.APIKeyPrefix) {
		fmt.Fprintf(stderr, "gateway explain: -api-key takes the key's name, as its auth.api_keys entry gives it, and this looks like a key itself (it starts with %s): pass the name, never the key\n", auth.APIKeyPrefix)
		return session.Principal{}, 2
	}
	names := make([]string, len(keys))
	for i := range keys {
		names[i] = keys[i].Name
	}
	known := "the config has none"
	if len(names) > 0 {
		known = "the configured names are " + strings.Join(names, ", ")
	}
	fmt.Fprintf(stderr, "gateway explain: no API key named %q in auth.api_keys or auth.api_keys_file (%s)\n", name, known)
	return session.Principal{}, 2
}

// list splits a comma-separated flag value.
func list(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}
