package main

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// issuer is a local OIDC token issuer on a loopback port, for the gateway-auth target: it
// serves its discovery document and its one RSA public key, and signs RS256 tokens with
// the private key, which never leaves this process. Safe for concurrent use; close stops
// it.
type issuer struct {
	url    string // the issuer identifier: the tokens' iss and the base of discovery
	kid    string
	key    *rsa.PrivateKey
	signer jose.Signer

	srv  *http.Server
	done chan struct{} // closed when srv.Serve returns
}

// startIssuer generates a key and starts serving
//
//	/.well-known/openid-configuration  issuer, jwks_uri, id_token_signing_alg_values_supported
//	/jwks                              the public key, with its kid
//
// on a free loopback port.
func startIssuer() (*issuer, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, fmt.Errorf("issuer key: %w", err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	is := &issuer{kid: "bench-" + hex.EncodeToString(b[:]), key: key, done: make(chan struct{})}
	is.signer, err = jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader(jose.HeaderKey("kid"), is.kid))
	if err != nil {
		return nil, fmt.Errorf("issuer signer: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	is.url = "http://" + ln.Addr().String()
	discovery, err := json.Marshal(map[string]any{
		"issuer":                                is.url,
		"jwks_uri":                              is.url + "/jwks",
		"id_token_signing_alg_values_supported": []string{string(jose.RS256)},
		"response_types_supported":              []string{"code"},
		"subject_types_supported":               []string{"public"},
	})
	if err != nil {
		ln.Close()
		return nil, err
	}
	jwks, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
		{Key: &key.PublicKey, KeyID: is.kid, Algorithm: string(jose.RS256), Use: "sig"},
	}})
	if err != nil {
		ln.Close()
		return nil, err
	}
	serve := func(body []byte) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(body)
		}
	}
	mux := http.NewServeMux()
	mux.Handle("/.well-known/openid-configuration", serve(discovery))
	mux.Handle("/jwks", serve(jwks))
	is.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(is.done)
		_ = is.srv.Serve(ln)
	}()
	return is, nil
}

// token returns a signed RS256 access token for audience aud: iss this issuer, sub
// "bench", scope "mcp", issued and valid from now, expiring after ttl.
func (is *issuer) token(aud string, now time.Time, ttl time.Duration) (string, error) {
	claims := struct {
		jwt.Claims
		Scope string `json:"scope"`
	}{
		Claims: jwt.Claims{
			Issuer:    is.url,
			Subject:   "bench",
			Audience:  jwt.Audience{aud},
			IssuedAt:  jwt.NewNumericDate(now),
			NotBefore: jwt.NewNumericDate(now),
			Expiry:    jwt.NewNumericDate(now.Add(ttl)),
		},
		Scope: "mcp",
	}
	tok, err := jwt.Signed(is.signer).Claims(claims).Serialize()
	if err != nil {
		return "", fmt.Errorf("sign token: %w", err)
	}
	return tok, nil
}

// close stops the issuer, gracefully for a few seconds, then at once, and waits for it.
// Call it once.
func (is *issuer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := is.srv.Shutdown(ctx); err != nil {
		_ = is.srv.Close()
	}
	<-is.done
}

// authGateway starts a gateway over the stdio echo upstream, like gateway-stdio, with
// authentication on: it trusts a local issuer, started here, and the returned target sends
// that issuer's token on every request, so that the gateway verifies a JWT (signature, iss,
// aud, exp) on each. No public_url: the gateway's resource, the tokens' aud, is then its
// own MCP URL. closeIssuer stops the issuer.
func (f *fleet) authGateway(bin, echo string, floor []string) (t target, closeIssuer func(), err error) {
	is, err := startIssuer()
	if err != nil {
		return target{}, nil, err
	}
	// One principal opens every session, up to the errors-only check's concurrency: lift
	// the per-principal cap (64 by default) to the gateway's max_sessions.
	settings := fmt.Sprintf("auth:\n  oidc:\n    - issuer: %q\n  max_sessions_per_principal: 10000\n", is.url)
	url, err := f.gateway(bin, "auth", settings, fmt.Sprintf("  - name: echo\n    prefix: \"\"\n    command: %q\n", echo))
	if err != nil {
		is.close()
		return target{}, nil, err
	}
	tok, err := is.token(url, time.Now(), 2*time.Hour)
	if err != nil {
		is.close()
		return target{}, nil, err
	}
	return target{name: "gateway-auth", url: url, bearer: tok, floor: floor, versus: "gateway-stdio"}, is.close, nil
}
