// Package oauthclient is the gateway's OAuth 2.1 client toward the authorization servers of
// upstream MCP servers (MCP 2025-11-25 "Authorization"): it discovers where and how to
// authorize, obtains a client identity, runs the authorization code flow with PKCE on a
// user's behalf, and refreshes and revokes the tokens it yields. It keeps no tokens: storing
// them per user and upstream, and serving the callback and the Client ID Metadata Document,
// are its caller's.
//
// A flow is bound to the user who starts it: Callback takes the user who is at the callback
// and refuses an answer brought back by anyone else before its code is redeemed, so that no
// one can start an authorization and have another user complete it (login CSRF, session
// fixation of the upstream grant). The caller must therefore authenticate the callback
// request as it authenticated the start.
//
// Every request goes through a Fetcher, which refuses targets inside the network (SSRF):
// metadata comes from outside and names the URLs that are fetched next.
//
//	f := oauthclient.NewFetcher(nil)
//	ch, _ := oauthclient.ParseChallenge(resp.Header) // the upstream's 401
//	d, err := f.Discover(ctx, "https://mcp.example.com/mcp", &ch)
//	c, err := f.Register(ctx, &d.Server, oauthclient.ClientConfig{
//		ClientName: "Manifold", RedirectURI: "https://gw.example.com/oauth/callback"})
//	fl := &oauthclient.Flow{Fetcher: f, Discovery: d, Client: c,
//		RedirectURI: "https://gw.example.com/oauth/callback"}
//	p, err := fl.Start(principal)
//	err = pending.Put(p) // a PendingStore; then send the user's browser to p.URL
//
//	// at the callback, with the user who is there (authenticated at the gateway):
//	tok, p, err := fl.Callback(ctx, pending, principal, r.URL.Query())
//	// then keep tok for (p.Owner, upstream)
//
//	tok, err = fl.Refresh(ctx, tok) // when tok.Valid(now, skew) is false
//	err = fl.Revoke(ctx, tok)       // when the user disconnects
package oauthclient
