package oauthclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// Challenge is what a resource server's 401 or 403 says in its Bearer WWW-Authenticate
// challenge (RFC 6750 §3, RFC 9728 §5.1).
type Challenge struct {
	// ResourceMetadata is the URL of the Protected Resource Metadata; "" if not given.
	ResourceMetadata string
	// Scope is the space-separated scopes the request needs; "" if not given.
	Scope            string
	Error            string
	ErrorDescription string
}

// ParseChallenge returns the Bearer challenge among h's WWW-Authenticate values, and whether
// there was one.
func ParseChallenge(h http.Header) (Challenge, bool) {
	for _, v := range h.Values("WWW-Authenticate") {
		for _, c := range parseChallenges(v) {
			if strings.EqualFold(c.scheme, "Bearer") {
				return Challenge{ResourceMetadata: c.params["resource_metadata"], Scope: c.params["scope"],
					Error: c.params["error"], ErrorDescription: c.params["error_description"]}, true
			}
		}
	}
	return Challenge{}, false
}

type challenge struct {
	scheme string
	params map[string]string
}

// parseChallenges splits a WWW-Authenticate value into its challenges (RFC 9110 §11.6.1):
// a scheme token, then comma-separated name=value parameters whose values are tokens or
// quoted strings. A token68 credential is skipped.
func parseChallenges(s string) []challenge {
	var out []challenge
	i := 0
	skip := func() {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == ',') {
			i++
		}
	}
	token := func() string {
		start := i
		for i < len(s) && !strings.ContainsRune(" \t,=\"", rune(s[i])) {
			i++
		}
		return s[start:i]
	}
	for skip(); i < len(s); skip() {
		name := token()
		if name == "" { // stray character
			i++
			continue
		}
		j := i
		for j < len(s) && (s[j] == ' ' || s[j] == '\t') {
			j++
		}
		if j >= len(s) || s[j] != '=' || len(out) == 0 {
			out = append(out, challenge{scheme: name, params: map[string]string{}})
			continue
		}
		// name=value, a parameter of the current challenge (or token68 padding "==").
		i = j + 1
		for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
			i++
		}
		var value string
		if i < len(s) && s[i] == '"' {
			var b strings.Builder
			for i++; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				b.WriteByte(s[i])
			}
			i++
			value = b.String()
		} else {
			value = token()
			for i < len(s) && s[i] == '=' { // token68 padding
				i++
			}
		}
		out[len(out)-1].params[strings.ToLower(name)] = value
	}
	return out
}

// ResourceMetadata is an upstream's Protected Resource Metadata (RFC 9728 §2), the fields a
// client reads.
type ResourceMetadata struct {
	Resource             string   `json:"resource"`
	AuthorizationServers []string `json:"authorization_servers"`
	ScopesSupported      []string `json:"scopes_supported,omitempty"`
}

// ServerMetadata is an authorization server's metadata (RFC 8414 §2, OpenID Connect
// Discovery 1.0), the fields a client reads.
type ServerMetadata struct {
	Issuer                                     string   `json:"issuer"`
	AuthorizationEndpoint                      string   `json:"authorization_endpoint"`
	TokenEndpoint                              string   `json:"token_endpoint"`
	RegistrationEndpoint                       string   `json:"registration_endpoint,omitempty"`
	RevocationEndpoint                         string   `json:"revocation_endpoint,omitempty"`
	ScopesSupported                            []string `json:"scopes_supported,omitempty"`
	CodeChallengeMethodsSupported              []string `json:"code_challenge_methods_supported,omitempty"`
	TokenEndpointAuthMethodsSupported          []string `json:"token_endpoint_auth_methods_supported,omitempty"`
	AuthorizationResponseIssParameterSupported bool     `json:"authorization_response_iss_parameter_supported,omitempty"`
	ClientIDMetadataDocumentSupported          bool     `json:"client_id_metadata_document_supported,omitempty"`
}

// Discovery is what a client learns about an upstream before it authorizes: whom to ask, for
// what resource, with which scopes.
type Discovery struct {
	// Resource is the resource indicator (RFC 8707) to send in authorization and token
	// requests: the Protected Resource Metadata's resource, which matched the upstream.
	Resource string
	// Scopes are the scopes to ask for when configuration names none: the challenge's, else
	// the metadata's scopes_supported, else none (MCP 2025-11-25 "Scope Selection Strategy").
	Scopes   []string
	Metadata ResourceMetadata
	// Server is the metadata of the first authorization server that answered and passed the
	// checks.
	Server ServerMetadata
}

// Discover finds how to authorize toward the MCP server at upstream (MCP 2025-11-25
// "Authorization Server Discovery"). The Protected Resource Metadata comes from the
// challenge's resource_metadata when ch has one, else from the well-known URI of upstream,
// path-inserted then at the root (RFC 9728 §3.1); its resource must be upstream, or a
// same-origin parent of it. Then the metadata of its authorization servers is tried in order,
// each at the RFC 8414 well-known URI (path-inserted), then at OpenID Connect discovery; the
// metadata's issuer must be the URL it was asked for (RFC 8414 §3.3), and it must support
// PKCE S256. ch may be nil.
func (f *Fetcher) Discover(ctx context.Context, upstream string, ch *Challenge) (*Discovery, error) {
	up, err := canonical(upstream)
	if err != nil {
		return nil, fmt.Errorf("upstream %q: %w", upstream, err)
	}
	var prm ResourceMetadata
	if ch != nil && ch.ResourceMetadata != "" {
		if err := f.getJSON(ctx, ch.ResourceMetadata, &prm); err != nil {
			return nil, fmt.Errorf("protected resource metadata from the challenge: %w", err)
		}
	} else if err := f.firstJSON(ctx, resourceMetadataURLs(up), &prm); err != nil {
		return nil, fmt.Errorf("protected resource metadata of %s: %w", up, err)
	}
	res, err := canonical(prm.Resource)
	if err != nil || !covers(res, up) {
		return nil, fmt.Errorf("%w: the protected resource metadata names resource %q, not %s: refusing metadata that is not the upstream's own", ErrMismatch, prm.Resource, upstream)
	}
	if len(prm.AuthorizationServers) == 0 {
		return nil, fmt.Errorf("the protected resource metadata of %s lists no authorization_servers", up)
	}
	d := &Discovery{Resource: res.String(), Metadata: prm}
	switch {
	case ch != nil && ch.Scope != "":
		d.Scopes = strings.Fields(ch.Scope)
	default:
		d.Scopes = prm.ScopesSupported
	}
	var errs []error
	for _, as := range prm.AuthorizationServers {
		md, err := f.ServerMetadata(ctx, as)
		if err == nil {
			d.Server = *md
			return d, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// ErrMismatch is wrapped by a refusal of metadata that names another resource or issuer, and
// of an authorization response whose state or iss is not the one expected.
var ErrMismatch = errors.New("mismatch")

// ServerMetadata fetches and checks the metadata of the authorization server whose issuer
// identifier is issuer.
func (f *Fetcher) ServerMetadata(ctx context.Context, issuer string) (*ServerMetadata, error) {
	u, err := url.Parse(issuer)
	if err != nil || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("authorization server %q is no issuer identifier (an https URL without query or fragment)", issuer)
	}
	var md ServerMetadata
	if err := f.firstJSON(ctx, serverMetadataURLs(u), &md); err != nil {
		return nil, fmt.Errorf("metadata of authorization server %s: %w", issuer, err)
	}
	switch {
	case md.Issuer != issuer:
		return nil, fmt.Errorf("%w: authorization server metadata fetched for %s names issuer %q (RFC 8414 §3.3)", ErrMismatch, issuer, md.Issuer)
	case !slices.Contains(md.CodeChallengeMethodsSupported, "S256"):
		return nil, fmt.Errorf("authorization server %s does not advertise PKCE S256 in code_challenge_methods_supported; MCP clients must not proceed without it", issuer)
	case md.AuthorizationEndpoint == "" || md.TokenEndpoint == "":
		return nil, fmt.Errorf("authorization server %s advertises no authorization_endpoint or token_endpoint", issuer)
	}
	for _, e := range []string{md.AuthorizationEndpoint, md.TokenEndpoint, md.RegistrationEndpoint, md.RevocationEndpoint} {
		if e == "" {
			continue
		}
		if err := f.CheckURL(e); err != nil {
			return nil, fmt.Errorf("authorization server %s: %w", issuer, err)
		}
	}
	return &md, nil
}

// firstJSON GETs each URL in turn until one answers 200, and decodes it into v. A refused
// target or a network error stops the search; an error status moves on to the next URL.
func (f *Fetcher) firstJSON(ctx context.Context, urls []string, v any) error {
	var errs []error
	for _, u := range urls {
		err := f.getJSON(ctx, u, v)
		if err == nil {
			return nil
		}
		errs = append(errs, err)
		if _, ok := errors.AsType[*StatusError](err); !ok {
			break
		}
	}
	return errors.Join(errs...)
}

// resourceMetadataURLs are the well-known URIs of up's metadata: path-inserted, then root.
func resourceMetadataURLs(up *url.URL) []string {
	const wk = "/.well-known/oauth-protected-resource"
	origin := up.Scheme + "://" + up.Host
	if p := strings.TrimSuffix(up.EscapedPath(), "/"); p != "" {
		return []string{origin + wk + p, origin + wk}
	}
	return []string{origin + wk}
}

// serverMetadataURLs are the URLs to try for the metadata of issuer u (MCP 2025-11-25
// "Authorization Server Metadata Discovery").
func serverMetadataURLs(u *url.URL) []string {
	origin := u.Scheme + "://" + u.Host
	p := strings.TrimSuffix(u.EscapedPath(), "/")
	if p == "" {
		return []string{origin + "/.well-known/oauth-authorization-server", origin + "/.well-known/openid-configuration"}
	}
	return []string{origin + "/.well-known/oauth-authorization-server" + p, origin + "/.well-known/openid-configuration" + p,
		origin + p + "/.well-known/openid-configuration"}
}

// canonical parses raw as an MCP server's canonical URI (MCP 2025-11-25 "Canonical Server
// URI"): absolute, no fragment, lowercase scheme and host, no trailing slash.
func canonical(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, err
	}
	if u.Scheme == "" || u.Host == "" || u.Fragment != "" {
		return nil, fmt.Errorf("%q is not an absolute URL without fragment", raw)
	}
	u.Scheme, u.Host = strings.ToLower(u.Scheme), strings.ToLower(u.Host)
	u.Path, u.RawPath = strings.TrimSuffix(u.Path, "/"), strings.TrimSuffix(u.RawPath, "/")
	return u, nil
}

// covers reports whether resource res names up: the same URL, or a same-origin parent of its
// path (a server that names its origin as the resource).
func covers(res, up *url.URL) bool {
	if res.Scheme != up.Scheme || res.Host != up.Host || res.RawQuery != up.RawQuery && res.RawQuery != "" {
		return false
	}
	return res.Path == up.Path || strings.HasPrefix(up.Path, res.Path+"/")
}
