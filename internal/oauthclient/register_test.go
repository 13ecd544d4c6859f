package oauthclient

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestRegisterChooses: pre-registered first, then a Client ID Metadata Document where the
// server takes one, then dynamic registration (against the demo issuer), else a clear error.
func TestRegisterChooses(t *testing.T) {
	w := newWorld(t, nil)
	f := NewFetcher(&FetcherOptions{AllowPrivate: true})
	defer f.CloseIdleConnections()
	dcr, err := f.ServerMetadata(context.Background(), w.as.URL)
	if err != nil {
		t.Fatal(err)
	}
	cimd := *dcr
	cimd.ClientIDMetadataDocumentSupported = true
	postOnly := cimd
	postOnly.TokenEndpointAuthMethodsSupported = []string{"client_secret_post"}
	bare := *dcr
	bare.RegistrationEndpoint = ""
	const doc = "https://gw.example.com/oauth/client.json"
	tests := []struct {
		name    string
		md      *ServerMetadata
		cfg     ClientConfig
		how     string
		method  string
		wantErr string
	}{
		{"pre-registered public", &cimd, ClientConfig{ClientID: "gw", MetadataDocumentURL: doc}, HowPreregistered, "none", ""},
		{"pre-registered with a secret", &cimd, ClientConfig{ClientID: "gw", ClientSecret: "s"}, HowPreregistered, "client_secret_basic", ""},
		{"pre-registered, server takes post only", &postOnly, ClientConfig{ClientID: "gw", ClientSecret: "s"}, HowPreregistered, "client_secret_post", ""},
		{"metadata document", &cimd, ClientConfig{MetadataDocumentURL: doc, RedirectURI: redirectURI}, HowMetadataDocument, "none", ""},
		{"metadata document not taken: dynamic", dcr, ClientConfig{MetadataDocumentURL: doc, ClientName: "Manifold", RedirectURI: redirectURI}, HowDynamic, "none", ""},
		{"dynamic without a redirect URI", dcr, ClientConfig{ClientName: "Manifold"}, "", "", "needs the gateway's client name and redirect URI"},
		{"dynamic turned off", dcr, ClientConfig{NoDynamicRegistration: true}, "", "", "dynamic registration is turned off"},
		{"nothing offered", &bare, ClientConfig{MetadataDocumentURL: doc}, "", "", "does not advertise client_id_metadata_document_supported and offers no registration_endpoint"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := f.Register(context.Background(), tt.md, tt.cfg)
			if tt.wantErr != "" {
				// Only a configuration error is no ErrNoRegistration.
				noReg := tt.cfg.RedirectURI != "" || tt.cfg.ClientName == ""
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || errors.Is(err, ErrNoRegistration) != noReg {
					t.Errorf("Register: %v, want an error naming %q (ErrNoRegistration: %v)", err, tt.wantErr, noReg)
				}
				return
			}
			if err != nil || c.How != tt.how || c.Method != tt.method || c.ID == "" {
				t.Errorf("Register: %+v, %v; want how %q, method %q", c, err, tt.how, tt.method)
			}
		})
	}
}

func TestMetadataDocument(t *testing.T) {
	const id = "https://gw.example.com/oauth/client.json"
	raw, err := MetadataDocument(id, "Manifold", []string{"https://gw.example.com/oauth/callback"})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	json.Unmarshal(raw, &got)
	want := map[string]any{"client_id": id, "client_name": "Manifold", "redirect_uris": []any{"https://gw.example.com/oauth/callback"},
		"grant_types": []any{"authorization_code", "refresh_token"}, "response_types": []any{"code"}, "token_endpoint_auth_method": "none"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("document (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"http://gw.example.com/c.json", "https://gw.example.com", "https://gw.example.com/", "https://gw.example.com/c#x"} {
		if _, err := MetadataDocument(bad, "Manifold", []string{"https://gw.example.com/cb"}); err == nil {
			t.Errorf("MetadataDocument(%q): no error, want refused", bad)
		}
	}
}
