package connect

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/manifold-mcp/manifold/internal/grants"
	"github.com/manifold-mcp/manifold/internal/oauthclient"
)

// revokeTimeout bounds the best-effort revocation at the authorization server.
const revokeTimeout = 10 * time.Second

// Token returns p's usable token for upstream: the stored grant's, refreshed first (once
// across replicas, grants.Vault.Refresh) when it is due. When the user must connect the
// upstream (again) the error wraps grants.ErrNotFound, ErrInvalidGrant, ErrNoRefreshToken,
// ErrUnreadable or ErrResourceChanged: test it with NeedsConnect. A grant made for another
// URL than the upstream's now is deleted, and neither refreshed nor handed out.
func (s *Service) Token(ctx context.Context, p grants.Principal, upstream string) (grants.Token, error) {
	return s.tokens.token(ctx, p, upstream, "")
}

// TokenRejected is Token for a caller whose upstream answered 401 to the access token
// rejected: the grant is refreshed unless another caller has replaced that token meanwhile
// (grants.Vault.RefreshRejected).
func (s *Service) TokenRejected(ctx context.Context, p grants.Principal, upstream, rejected string) (grants.Token, error) {
	return s.tokens.token(ctx, p, upstream, rejected)
}

// Revoke revokes p's grant at upstream: at the authorization server first, where it supports
// RFC 7009 (best effort: a failure is logged), then in the Vault. It fails with an error
// wrapping grants.ErrNotFound when there is no grant. Options.OnRevoked is called once the
// grant is deleted.
func (s *Service) Revoke(ctx context.Context, p grants.Principal, upstream string) error {
	return s.tokens.revoke(ctx, p, upstream)
}

// grantTokens hands out the grants' tokens from the Vault, refreshed at the upstreams'
// authorization servers when due, and revokes grants there and in the Vault. A grant made for
// another URL than its upstream's now is neither refreshed nor handed out, nor sent to that
// upstream's server. It holds no state of its own and is safe for concurrent use; it neither
// opens nor closes the Vault.
type grantTokens struct {
	vault *grants.Vault
	// flows gives the upstreams as configured now, and their authorization flows.
	flows  *flowCache
	logger *slog.Logger
	// onRevoked is Options.OnRevoked.
	onRevoked func(ctx context.Context, p grants.Principal, upstream string)
}

// token is Service.Token, and Service.TokenRejected when rejected is the token the upstream
// refused.
func (gt *grantTokens) token(ctx context.Context, p grants.Principal, upstream, rejected string) (grants.Token, error) {
	what := fmt.Sprintf("token of %s for %q", p, upstream)
	if rejected != "" {
		what += " after a refusal"
	}
	if _, ok := gt.flows.upstream(upstream); !ok {
		return grants.Token{}, fmt.Errorf("%s: %w", what, ErrUnknownUpstream)
	}
	var g grants.Grant
	var err error
	if rejected == "" {
		g, err = gt.vault.Refresh(ctx, p, upstream, gt.refreshFunc(upstream))
	} else {
		g, err = gt.vault.RefreshRejected(ctx, p, upstream, rejected, gt.refreshFunc(upstream))
	}
	if err == nil {
		err = gt.checkResource(ctx, g)
	}
	if err != nil {
		return grants.Token{}, fmt.Errorf("%s: %w", what, err)
	}
	return g.Token, nil
}

// otherResource returns the upstream's URL now, and whether g was made for another one (a
// grant of an upstream no longer configured is not).
func (gt *grantTokens) otherResource(g grants.Grant) (string, bool) {
	up, ok := gt.flows.upstream(g.Upstream)
	return up.URL, ok && g.Resource != up.URL
}

// checkResource deletes g and returns an error wrapping ErrResourceChanged if g was made for
// another URL than its upstream's now; nil otherwise. A grant put again meanwhile stays.
func (gt *grantTokens) checkResource(ctx context.Context, g grants.Grant) error {
	now, other := gt.otherResource(g)
	if !other {
		return nil
	}
	_, err := gt.vault.DeleteIf(ctx, g.Principal, g.Upstream, func(stored grants.Grant) bool {
		return stored.Resource == g.Resource
	})
	if err != nil && !errors.Is(err, grants.ErrNotFound) {
		return fmt.Errorf("%w (made for %s, the upstream is now at %s); deleting it failed: %w", ErrResourceChanged, g.Resource, now, err)
	}
	return fmt.Errorf("%w: made for %s, the upstream is now at %s", ErrResourceChanged, g.Resource, now)
}

// refreshFunc renews a grant of upstream at its authorization server. An invalid_grant answer
// is reported as grants.ErrInvalidGrant, and so is a grant from another authorization server
// than the upstream's now, or made for another URL of the upstream: none can be refreshed
// (the Vault deletes it), the user must connect again.
func (gt *grantTokens) refreshFunc(upstream string) grants.RefreshFunc {
	return func(ctx context.Context, g grants.Grant) (grants.Token, error) {
		if now, other := gt.otherResource(g); other {
			// Checked before the flow: the refresh token must not reach the authorization
			// server of another resource.
			return grants.Token{}, fmt.Errorf("%w: %w: made for %s, upstream %q is now at %s",
				grants.ErrInvalidGrant, ErrResourceChanged, g.Resource, upstream, now)
		}
		fl, err := gt.flows.flow(ctx, upstream)
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

// revoke is Service.Revoke.
func (gt *grantTokens) revoke(ctx context.Context, p grants.Principal, upstream string) error {
	g, err := gt.vault.Get(ctx, p, upstream)
	switch {
	case err == nil:
		gt.revokeAtServer(ctx, g)
	case errors.Is(err, grants.ErrUnreadable):
		// Nothing to tell the server: the token cannot be read. Delete it all the same.
	default:
		return fmt.Errorf("revoke the grant of %s at %q: %w", p, upstream, err)
	}
	if err := gt.vault.Delete(ctx, p, upstream); err != nil {
		return fmt.Errorf("revoke the grant of %s at %q: %w", p, upstream, err)
	}
	if gt.onRevoked != nil {
		gt.onRevoked(ctx, p, upstream)
	}
	return nil
}

// revokeAtServer tells g's authorization server that g's token is no longer wanted, without
// failing: the grant is deleted anyway.
func (gt *grantTokens) revokeAtServer(ctx context.Context, g grants.Grant) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), revokeTimeout)
	defer cancel()
	log := gt.logger.With("upstream", g.Upstream, "principal", g.Principal.String())
	if _, other := gt.otherResource(g); other {
		log.Warn("grant not revoked at its authorization server: it was made for another URL of the upstream (deleted here all the same)", "resource", g.Resource)
		return
	}
	fl, err := gt.flows.flow(ctx, g.Upstream)
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
