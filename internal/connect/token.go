package connect

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/manifold-mcp/manifold/internal/grants"
	"github.com/manifold-mcp/manifold/internal/oauthclient"
)

// revokeTimeout bounds the best-effort revocation at the authorization server.
const revokeTimeout = 10 * time.Second

// Token returns p's usable token for upstream: the stored grant's, refreshed first (once
// across replicas, grants.Vault.Refresh) when it is due. When the user must connect the
// upstream (again) the error wraps grants.ErrNotFound, ErrInvalidGrant, ErrNoRefreshToken or
// ErrUnreadable: test it with NeedsConnect.
func (s *Service) Token(ctx context.Context, p grants.Principal, upstream string) (grants.Token, error) {
	if _, ok := s.upstream(upstream); !ok {
		return grants.Token{}, fmt.Errorf("token of %s for %q: %w", p, upstream, ErrUnknownUpstream)
	}
	g, err := s.opts.Vault.Refresh(ctx, p, upstream, s.refreshFunc(upstream))
	if err != nil {
		return grants.Token{}, fmt.Errorf("token of %s for %q: %w", p, upstream, err)
	}
	return g.Token, nil
}

// TokenRejected is Token for a caller whose upstream answered 401 to the access token
// rejected: the grant is refreshed unless another caller has replaced that token meanwhile
// (grants.Vault.RefreshRejected).
func (s *Service) TokenRejected(ctx context.Context, p grants.Principal, upstream, rejected string) (grants.Token, error) {
	if _, ok := s.upstream(upstream); !ok {
		return grants.Token{}, fmt.Errorf("token of %s for %q: %w", p, upstream, ErrUnknownUpstream)
	}
	g, err := s.opts.Vault.RefreshRejected(ctx, p, upstream, rejected, s.refreshFunc(upstream))
	if err != nil {
		return grants.Token{}, fmt.Errorf("token of %s for %q after a refusal: %w", p, upstream, err)
	}
	return g.Token, nil
}

// refreshFunc renews a grant of upstream at its authorization server. An invalid_grant answer
// is reported as grants.ErrInvalidGrant, and so is a grant from another authorization server
// than the upstream's now: neither can be refreshed, the user must connect again.
func (s *Service) refreshFunc(upstream string) grants.RefreshFunc {
	return func(ctx context.Context, g grants.Grant) (grants.Token, error) {
		fl, err := s.flow(ctx, upstream)
		if err != nil {
			return grants.Token{}, err
		}
		if g.Issuer != "" && g.Issuer != fl.Discovery.Server.Issuer {
			return grants.Token{}, fmt.Errorf("%w: the grant comes from %s, and upstream %q now authorizes at %s",
				grants.ErrInvalidGrant, g.Issuer, upstream, fl.Discovery.Server.Issuer)
		}
		t, err := fl.Refresh(ctx, &oauthclient.Token{AccessToken: g.Token.AccessToken, TokenType: g.Token.TokenType,
			RefreshToken: g.Token.RefreshToken, Expiry: g.Token.Expiry})
		if err != nil {
			var oe *oauthclient.OAuthError
			if errors.As(err, &oe) && oe.Code == "invalid_grant" {
				return grants.Token{}, fmt.Errorf("%w: %v", grants.ErrInvalidGrant, err)
			}
			return grants.Token{}, err
		}
		return grantToken(t, nil), nil
	}
}

// grantToken is t as the Vault keeps it; asked are the scopes to record when the server's
// answer names none.
func grantToken(t *oauthclient.Token, asked []string) grants.Token {
	scopes := strings.Fields(t.Scope)
	if len(scopes) == 0 {
		scopes = asked
	}
	return grants.Token{AccessToken: t.AccessToken, RefreshToken: t.RefreshToken, TokenType: t.TokenType,
		Expiry: t.Expiry, Scopes: scopes}
}

// Revoke revokes p's grant at upstream: at the authorization server first, where it supports
// RFC 7009 (best effort: a failure is logged), then in the Vault. It fails with an error
// wrapping grants.ErrNotFound when there is no grant.
func (s *Service) Revoke(ctx context.Context, p grants.Principal, upstream string) error {
	g, err := s.opts.Vault.Get(ctx, p, upstream)
	switch {
	case err == nil:
		s.revokeAtServer(ctx, g)
	case errors.Is(err, grants.ErrUnreadable):
		// Nothing to tell the server: the token cannot be read. Delete it all the same.
	default:
		return fmt.Errorf("revoke the grant of %s at %q: %w", p, upstream, err)
	}
	if err := s.opts.Vault.Delete(ctx, p, upstream); err != nil {
		return fmt.Errorf("revoke the grant of %s at %q: %w", p, upstream, err)
	}
	return nil
}

// revokeAtServer tells g's authorization server that g's token is no longer wanted, without
// failing: the grant is deleted anyway.
func (s *Service) revokeAtServer(ctx context.Context, g grants.Grant) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), revokeTimeout)
	defer cancel()
	log := s.logger.With("upstream", g.Upstream, "principal", g.Principal.String())
	fl, err := s.flow(ctx, g.Upstream)
	if err != nil {
		log.Warn("grant not revoked at the authorization server (deleted here all the same)", "error", err)
		return
	}
	if g.Issuer != "" && g.Issuer != fl.Discovery.Server.Issuer {
		log.Warn("grant not revoked at its authorization server, which the upstream no longer uses (deleted here all the same)", "issuer", g.Issuer)
		return
	}
	if err := fl.Revoke(ctx, &oauthclient.Token{AccessToken: g.Token.AccessToken, RefreshToken: g.Token.RefreshToken}); err != nil {
		log.Warn("grant not revoked at the authorization server (deleted here all the same)", "error", err)
	}
}
