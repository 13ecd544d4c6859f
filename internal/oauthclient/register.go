package oauthclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
)

// ClientConfig is how the gateway may identify itself to an upstream's authorization server,
// as configured. Any part may be empty; Register picks among what is set and advertised.
type ClientConfig struct {
	// ClientID and ClientSecret are credentials registered with the authorization server
	// beforehand; ClientSecret "" means a public client.
	ClientID     string
	ClientSecret string
	// MetadataDocumentURL is the https URL (with a path) at which the gateway serves its
	// Client ID Metadata Document (see MetadataDocument); "" means none.
	MetadataDocumentURL string
	// NoDynamicRegistration forbids RFC 7591 registration even where the server offers it.
	NoDynamicRegistration bool
	// ClientName is the name shown to the user on the consent page.
	ClientName string
	// RedirectURI is the callback URL the authorization server sends the user back to.
	RedirectURI string
}

// Client is the identity the gateway uses at one authorization server.
type Client struct {
	ID     string
	Secret string
	// Method is the token endpoint authentication method: "none", "client_secret_basic" or
	// "client_secret_post".
	Method string
	// How is how the identity was obtained: "preregistered", "metadata_document" or "dynamic".
	How string
}

// Ways a Client was obtained.
const (
	HowPreregistered    = "preregistered"
	HowMetadataDocument = "metadata_document"
	HowDynamic          = "dynamic"
)

// ErrNoRegistration is wrapped by Register's refusal when no way to obtain a client identity
// is both configured and offered by the server.
var ErrNoRegistration = errors.New("no client registration possible")

// Register returns the client identity to use at md's authorization server, in the order of
// preference of MCP 2025-11-25 "Client Registration Approaches": pre-registered credentials;
// a Client ID Metadata Document, when configured and the server advertises
// client_id_metadata_document_supported; dynamic registration (RFC 7591) at the server's
// registration_endpoint, unless forbidden. Only dynamic registration makes a request.
func (f *Fetcher) Register(ctx context.Context, md *ServerMetadata, cfg ClientConfig) (*Client, error) {
	switch {
	case cfg.ClientID != "":
		return &Client{ID: cfg.ClientID, Secret: cfg.ClientSecret, Method: secretMethod(md, cfg.ClientSecret), How: HowPreregistered}, nil
	case cfg.MetadataDocumentURL != "" && md.ClientIDMetadataDocumentSupported:
		return &Client{ID: cfg.MetadataDocumentURL, Method: "none", How: HowMetadataDocument}, nil
	case md.RegistrationEndpoint != "" && !cfg.NoDynamicRegistration:
		return f.registerDynamic(ctx, md, cfg)
	}
	why := fmt.Sprintf("authorization server %s", md.Issuer)
	switch {
	case cfg.MetadataDocumentURL != "":
		why += " does not advertise client_id_metadata_document_supported"
	default:
		why += " takes no Client ID Metadata Document (none is configured)"
	}
	switch {
	case md.RegistrationEndpoint == "":
		why += " and offers no registration_endpoint"
	default:
		why += " and dynamic registration is turned off"
	}
	return nil, fmt.Errorf("%w: %s; register a client with it by hand and configure its client id (and secret)", ErrNoRegistration, why)
}

// secretMethod picks how a confidential client authenticates at the token endpoint: basic
// unless the server advertises only post (RFC 8414 §2 defaults to basic).
func secretMethod(md *ServerMetadata, secret string) string {
	switch {
	case secret == "":
		return "none"
	case len(md.TokenEndpointAuthMethodsSupported) > 0 && !slices.Contains(md.TokenEndpointAuthMethodsSupported, "client_secret_basic") &&
		slices.Contains(md.TokenEndpointAuthMethodsSupported, "client_secret_post"):
		return "client_secret_post"
	default:
		return "client_secret_basic"
	}
}

// registerDynamic registers a public client (RFC 7591 §3.1) for the authorization code flow.
func (f *Fetcher) registerDynamic(ctx context.Context, md *ServerMetadata, cfg ClientConfig) (*Client, error) {
	if cfg.RedirectURI == "" || cfg.ClientName == "" {
		return nil, errors.New("dynamic registration needs the gateway's client name and redirect URI; configure both")
	}
	body, err := json.Marshal(clientMetadata(cfg.ClientName, []string{cfg.RedirectURI}))
	if err != nil {
		return nil, err
	}
	var answer struct {
		ClientID                string `json:"client_id"`
		ClientSecret            string `json:"client_secret"`
		TokenEndpointAuthMethod string `json:"token_endpoint_auth_method"`
	}
	err = f.post1(ctx, md.RegistrationEndpoint, "application/json", bytes.NewReader(body), "", "", []int{http.StatusCreated, http.StatusOK}, &answer)
	if err != nil {
		return nil, fmt.Errorf("dynamic registration at %s: %w", md.RegistrationEndpoint, err)
	}
	if answer.ClientID == "" {
		return nil, fmt.Errorf("dynamic registration at %s: the answer has no client_id", md.RegistrationEndpoint)
	}
	c := &Client{ID: answer.ClientID, Secret: answer.ClientSecret, Method: answer.TokenEndpointAuthMethod, How: HowDynamic}
	if c.Method == "" {
		c.Method = secretMethod(md, c.Secret)
	}
	return c, nil
}

// clientMetadata is the gateway's client metadata (RFC 7591 §2): a public client of the
// authorization code flow with refresh tokens.
func clientMetadata(name string, redirectURIs []string) map[string]any {
	return map[string]any{
		"client_name":                name,
		"redirect_uris":              redirectURIs,
		"grant_types":                []string{"authorization_code", "refresh_token"},
		"response_types":             []string{"code"},
		"token_endpoint_auth_method": "none",
	}
}

// MetadataDocument returns the Client ID Metadata Document to serve at clientID, an https URL
// with a path (draft-ietf-oauth-client-id-metadata-document, MCP 2025-11-25 "Client ID
// Metadata Documents"): the client's metadata with client_id equal to that URL.
func MetadataDocument(clientID, name string, redirectURIs []string) ([]byte, error) {
	u, err := url.Parse(clientID)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.Path == "" || u.Path == "/" || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("client id %q: a Client ID Metadata Document's URL must be https with a path, without fragment or user info", clientID)
	}
	if name == "" || len(redirectURIs) == 0 {
		return nil, errors.New("a Client ID Metadata Document needs a client name and at least one redirect URI")
	}
	doc := clientMetadata(name, redirectURIs)
	doc["client_id"] = clientID
	return json.Marshal(doc)
}
