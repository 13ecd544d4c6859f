package auth

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/manifold-mcp/manifold/internal/session"
)

// verifyJWT authenticates an OIDC access token: it picks the issuer by the token's
// unverified iss, has go-oidc verify the signature (with the issuer's keySet) and iss, then
// checks exp, nbf, iat, aud and sub itself and reads the principal's claims.
func (a *Authenticator) verifyJWT(ctx context.Context, tok string) (*Authenticated, error) {
	if hit, ok := a.verified.lookup(tok, a.now()); ok {
		return &Authenticated{Principal: clonePrincipal(hit.Principal), Token: hit.Token, Expiry: hit.Expiry}, nil
	}
	iss, err := peekIssuer(tok)
	if err != nil {
		return nil, err
	}
	is := a.issuers[iss]
	if is == nil {
		return nil, invalidToken(descUntrusted, fmt.Errorf("iss %.200q is not configured", iss))
	}

	// The generation before verification: a refresh racing it makes the entry stale.
	generation := is.keys.generation.Load()
	st := &verifyState{}
	idt, err := is.verifier.Verify(context.WithValue(ctx, verifyStateKey{}, st), tok)
	if err != nil {
		return nil, verifyError(err, st.err)
	}
	var claims map[string]any
	if err := idt.Claims(&claims); err != nil {
		return nil, invalidToken(descInvalid, fmt.Errorf("decode claims: %w", err))
	}

	// Times (RFC 7519 §4.1.4-6), with the issuer's leeway.
	now := a.now()
	exp, ok, cerr := timeClaim(claims, "exp")
	if cerr != nil {
		return nil, cerr
	}
	if !ok {
		return nil, invalidToken(descNoExpiry, nil)
	}
	if now.After(exp.Add(is.skew)) {
		return nil, invalidToken(descExpired, fmt.Errorf("expired at %v, now %v, leeway %v", exp, now, is.skew))
	}
	if nbf, ok, cerr := timeClaim(claims, "nbf"); cerr != nil {
		return nil, cerr
	} else if ok && nbf.After(now.Add(is.skew)) {
		return nil, invalidToken(descNotYetValid, fmt.Errorf("not before %v, now %v, leeway %v", nbf, now, is.skew))
	}
	if iat, ok, cerr := timeClaim(claims, "iat"); cerr != nil {
		return nil, cerr
	} else if ok && iat.After(now.Add(is.skew)) {
		return nil, invalidToken(descIssuedInFuture, fmt.Errorf("issued at %v, now %v, leeway %v", iat, now, is.skew))
	}

	// Audience: the token must have been issued for us (RFC 8707, RFC 9068 §4).
	if !slices.ContainsFunc(idt.Audience, func(aud string) bool {
		return slices.Contains(is.audiences, canonicalResource(aud))
	}) {
		return nil, invalidToken(descAudience, fmt.Errorf("aud %q, want one of %q", idt.Audience, is.audiences))
	}

	p := session.Principal{Issuer: is.url}
	var perr *Error
	if p.Subject, perr = stringClaim(claims, is.claims.Subject); perr != nil {
		return nil, perr
	}
	if p.Subject == "" {
		return nil, invalidToken(descNoSubject, fmt.Errorf("no claim %q", is.claims.Subject))
	}
	if p.Email, perr = stringClaim(claims, is.claims.Email); perr != nil {
		return nil, perr
	}
	if p.Groups, perr = listClaim(claims, is.claims.Groups, false); perr != nil {
		return nil, perr
	}
	if p.Roles, perr = listClaim(claims, is.claims.Roles, false); perr != nil {
		return nil, perr
	}
	if p.Scopes, perr = listClaim(claims, is.claims.Scopes, true); perr != nil {
		return nil, perr
	}
	result := &Authenticated{Principal: p, Token: tok, Expiry: exp}
	a.verified.remember(tok, result, is.keys, generation, is.skew, now)
	return &Authenticated{Principal: clonePrincipal(p), Token: tok, Expiry: exp}, nil
}

// peekIssuer reads the iss of a compact JWS without verifying it, only to choose the
// verifier, and refuses what cannot be a token of ours: not three base64url parts, or an
// algorithm outside signingAlgs.
func peekIssuer(tok string) (string, error) {
	h, rest, ok1 := strings.Cut(tok, ".")
	p, sig, ok2 := strings.Cut(rest, ".")
	if !ok1 || !ok2 || strings.Contains(sig, ".") || h == "" || p == "" {
		return "", invalidToken(descNotJWT, errors.New("not three dot-separated parts"))
	}
	var header struct {
		Alg string `json:"alg"`
	}
	if err := decodeSegment(h, &header); err != nil {
		return "", invalidToken(descNotJWT, fmt.Errorf("header: %w", err))
	}
	if !slices.ContainsFunc(signingAlgs, func(a jose.SignatureAlgorithm) bool { return string(a) == header.Alg }) {
		return "", invalidToken(descAlg, fmt.Errorf("alg %.40q", header.Alg))
	}
	if sig == "" {
		return "", invalidToken(descBadSignature, errors.New("no signature"))
	}
	var payload struct {
		Iss string `json:"iss"`
	}
	if err := decodeSegment(p, &payload); err != nil {
		return "", invalidToken(descNotJWT, fmt.Errorf("payload: %w", err))
	}
	if payload.Iss == "" {
		return "", invalidToken(descNoIssuer, nil)
	}
	return payload.Iss, nil
}

// decodeSegment decodes one base64url (unpadded, RFC 7515 §2) part of a JWS as a JSON object.
func decodeSegment(seg string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return err
	}
	if len(b) == 0 || b[0] != '{' {
		return errors.New("not a JSON object")
	}
	return json.Unmarshal(b, v)
}

// verifyError turns a failure of the oidc verifier into an *Error. ksErr is what the keySet
// said, if it was called: the verifier keeps only its text.
func verifyError(err, ksErr error) *Error {
	switch {
	case ksErr == nil:
		return invalidToken(descInvalid, err)
	case errors.Is(ksErr, errUnknownKey):
		return invalidToken(descUnknownKey, ksErr)
	case errors.Is(ksErr, errBadSignature):
		return invalidToken(descBadSignature, ksErr)
	case errors.Is(ksErr, errKeysUnavailable):
		return invalidToken(descKeysUnavailable, ksErr)
	case errors.Is(ksErr, context.Canceled), errors.Is(ksErr, context.DeadlineExceeded):
		return invalidToken(descNotVerified, ksErr)
	}
	return invalidToken(descInvalid, ksErr)
}
