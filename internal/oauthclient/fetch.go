package oauthclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/manifold-mcp/manifold/internal/loopback"
)

// ErrForbiddenTarget is wrapped by every refusal of a URL or address that the Fetcher will
// not reach: the wrong scheme, or an address inside the network (loopback, private,
// link-local, cloud metadata, multicast, unspecified, or one of these embedded in an IPv6
// address) that metadata from outside must not point it at.
var ErrForbiddenTarget = errors.New("forbidden target")

// Defaults of FetcherOptions.
const (
	DefaultTimeout      = 10 * time.Second
	DefaultMaxBodyBytes = 1 << 20
	maxRedirects        = 3
)

// FetcherOptions are a Fetcher's settings; the zero value is the safe default.
type FetcherOptions struct {
	// AllowPrivate permits loopback and private (RFC 1918, RFC 4193, shared address space)
	// targets, and plain http to a loopback host: for tests and on-premises servers.
	// Link-local, cloud metadata (such as 169.254.169.254 and fd00:ec2::254), multicast,
	// unspecified and reserved addresses stay refused.
	AllowPrivate bool
	// Timeout bounds each request, body included; 0 means DefaultTimeout.
	Timeout time.Duration
	// MaxBodyBytes bounds each response body; 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64
}

// Fetcher makes the discovery, registration and token requests of an OAuth client in a way
// that is not a way in (SSRF, MCP 2025-11-25 "Security Best Practices"): it reaches only
// https URLs, dials only public addresses (checked on the resolved address at dial time, so
// DNS rebinding cannot slip past), uses no proxy, bounds each response's size and time,
// follows a redirect of a GET to the same scheme and host only, and follows none of a POST.
// It is safe for concurrent use.
type Fetcher struct {
	allowPrivate bool
	maxBody      int64
	get, post    *http.Client
}

// NewFetcher returns a Fetcher; nil opts means the zero value.
func NewFetcher(opts *FetcherOptions) *Fetcher {
	if opts == nil {
		opts = &FetcherOptions{}
	}
	f := &Fetcher{allowPrivate: opts.AllowPrivate, maxBody: opts.MaxBodyBytes}
	if f.maxBody <= 0 {
		f.maxBody = DefaultMaxBodyBytes
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	dialer := &net.Dialer{Timeout: timeout, ControlContext: f.control}
	transport := &http.Transport{
		Proxy:                 nil, // a proxy would be dialled instead of the checked address
		DialContext:           dialer.DialContext,
		TLSHandshakeTimeout:   timeout,
		ResponseHeaderTimeout: timeout,
		MaxIdleConns:          16,
		IdleConnTimeout:       90 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	f.get = &http.Client{Transport: transport, Timeout: timeout, CheckRedirect: f.checkRedirect}
	f.post = &http.Client{Transport: transport, Timeout: timeout, CheckRedirect: func(req *http.Request, _ []*http.Request) error {
		return fmt.Errorf("%w: a token, registration or revocation endpoint redirected to %s; such requests follow no redirect", ErrForbiddenTarget, req.URL.Redacted())
	}}
	return f
}

// CloseIdleConnections closes the Fetcher's idle connections. It may be called more than once.
func (f *Fetcher) CloseIdleConnections() { f.get.CloseIdleConnections() }

// CheckURL returns an error wrapping ErrForbiddenTarget unless raw is an absolute https URL
// without user info or fragment, or, when private targets are allowed, an http URL whose host
// is loopback. Addresses are checked later, when dialled.
func (f *Fetcher) CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%w: %q is not a URL: %v", ErrForbiddenTarget, raw, err)
	}
	switch {
	case u.Host == "":
		return fmt.Errorf("%w: %q is not an absolute URL", ErrForbiddenTarget, raw)
	case u.User != nil:
		return fmt.Errorf("%w: %q carries user info", ErrForbiddenTarget, u.Redacted())
	case u.Fragment != "":
		return fmt.Errorf("%w: %q carries a fragment", ErrForbiddenTarget, raw)
	case u.Scheme == "https":
		return nil
	case u.Scheme == "http" && f.allowPrivate && loopback.Host(u.Hostname()):
		return nil
	case u.Scheme == "http":
		return fmt.Errorf("%w: %q: authorization server and metadata URLs must be https (plain http is allowed only to loopback, with private targets allowed)", ErrForbiddenTarget, raw)
	default:
		return fmt.Errorf("%w: %q: scheme %q, want https", ErrForbiddenTarget, raw, u.Scheme)
	}
}

// sharedSpace is the shared address space of carrier NAT (RFC 6598): private in all but name.
var sharedSpace = netip.MustParsePrefix("100.64.0.0/10")

// reserved holds the special-purpose IPv4 ranges that the net/netip predicates leave out and
// that are never a server's address: "this network", benchmarking, and reserved.
var reserved = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("240.0.0.0/4"),
}

// metadataAddrs are the cloud instance metadata services' addresses, refused even with
// private targets allowed: AWS, GCP and Azure (169.254.169.254), AWS over IPv6
// (fd00:ec2::254, a unique local address), Alibaba Cloud (100.100.100.200, in the shared
// address space) and AWS ECS task metadata (169.254.170.2).
var metadataAddrs = []netip.Addr{
	netip.MustParseAddr("169.254.169.254"),
	netip.MustParseAddr("fd00:ec2::254"),
	netip.MustParseAddr("100.100.100.200"),
	netip.MustParseAddr("169.254.170.2"),
}

// IPv6 ranges that carry an IPv4 address or are no server's address.
var (
	// nat64 is the well-known NAT64 prefix (RFC 6052): the IPv4 address is the last 32 bits.
	nat64 = netip.MustParsePrefix("64:ff9b::/96")
	// nat64Local is the local-use NAT64 prefix (RFC 8215), an operator's own translator whose
	// embedding the address does not tell: inside the network by definition.
	nat64Local = netip.MustParsePrefix("64:ff9b:1::/48")
	// sixToFour is 6to4 (RFC 3056): the IPv4 address is bits 16 to 48.
	sixToFour = netip.MustParsePrefix("2002::/16")
	// v4Compatible is the IPv4-compatible IPv6 address space, deprecated (RFC 4291 §2.5.5.1).
	v4Compatible = netip.MustParsePrefix("::/96")
	// siteLocal is the site-local space, deprecated (RFC 3879) and private in effect.
	siteLocal = netip.MustParsePrefix("fec0::/10")
	// teredo is the Teredo tunnel (RFC 4380): its addresses lead through a relay to an
	// obfuscated IPv4 address, never to a server of its own.
	teredo = netip.MustParsePrefix("2001::/32")
)

// embeddedIPv4 returns the IPv4 address that a NAT64 or 6to4 address ip leads to, and the
// kind of embedding; an invalid Addr when ip is no such address.
func embeddedIPv4(ip netip.Addr) (netip.Addr, string) {
	b := ip.As16()
	switch {
	case !ip.Is6():
		return netip.Addr{}, ""
	case nat64.Contains(ip):
		return netip.AddrFrom4([4]byte(b[12:16])), "NAT64"
	case sixToFour.Contains(ip):
		return netip.AddrFrom4([4]byte(b[2:6])), "6to4"
	}
	return netip.Addr{}, ""
}

// CheckAddr returns an error wrapping ErrForbiddenTarget if ip is no address the Fetcher may
// dial. An IPv4 address embedded in a NAT64 or 6to4 address is checked as that IPv4 address;
// the deprecated IPv4-compatible and site-local spaces, local-use NAT64 and Teredo are
// refused, and so are the cloud metadata addresses, private targets allowed or not.
func (f *Fetcher) CheckAddr(ip netip.Addr) error {
	ip = ip.WithZone("").Unmap()
	target, via := ip, ""
	if v4, how := embeddedIPv4(ip); v4.IsValid() {
		target, via = v4, fmt.Sprintf(" (by %s address %s)", how, ip)
	}
	why := f.refusal(target)
	if why == "" {
		return nil
	}
	hint := ""
	if why == "loopback" || why == "private" {
		hint = "; allow private targets only for an on-premises authorization server"
	}
	return fmt.Errorf("%w: %s%s is a %s address%s", ErrForbiddenTarget, target, via, why, hint)
}

// refusal says what kind of address ip is when the Fetcher may not dial it, or "".
func (f *Fetcher) refusal(ip netip.Addr) string {
	switch {
	case !ip.IsValid() || ip.IsUnspecified():
		return "unspecified"
	case slices.Contains(metadataAddrs, ip):
		return "cloud metadata"
	case ip.IsMulticast() || ip.IsInterfaceLocalMulticast() || ip.IsLinkLocalMulticast():
		return "multicast"
	case ip.IsLinkLocalUnicast():
		return "link-local"
	case ip.IsLoopback():
		if f.allowPrivate {
			return ""
		}
		return "loopback"
	case ip.IsPrivate() || sharedSpace.Contains(ip):
		if f.allowPrivate {
			return ""
		}
		return "private"
	case v4Compatible.Contains(ip):
		return "deprecated IPv4-compatible"
	case siteLocal.Contains(ip):
		return "deprecated site-local"
	case nat64Local.Contains(ip):
		return "local-use NAT64"
	case teredo.Contains(ip):
		return "Teredo"
	}
	for _, p := range reserved {
		if p.Contains(ip) {
			return "reserved"
		}
	}
	return ""
}

// control checks the address about to be dialled, after name resolution.
func (f *Fetcher) control(_ context.Context, _, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: dial %q: %v", ErrForbiddenTarget, address, err)
	}
	return f.CheckAddr(ap.Addr())
}

func (f *Fetcher) checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return fmt.Errorf("%w: more than %d redirects from %s", ErrForbiddenTarget, maxRedirects, via[0].URL.Redacted())
	}
	first := via[0].URL
	if req.URL.Scheme != first.Scheme || !strings.EqualFold(req.URL.Host, first.Host) {
		return fmt.Errorf("%w: %s redirected to another host (%s)", ErrForbiddenTarget, first.Redacted(), req.URL.Redacted())
	}
	return f.CheckURL(req.URL.String())
}

// StatusError is a response whose status was not the one expected.
type StatusError struct {
	URL    string
	Status int
	// OAuth is the error response body (RFC 6749 §5.2), when the server sent one.
	OAuth *OAuthError
}

func (e *StatusError) Error() string {
	if e.OAuth != nil {
		return fmt.Sprintf("%s answered %d: %v", e.URL, e.Status, e.OAuth)
	}
	return fmt.Sprintf("%s answered %d", e.URL, e.Status)
}

func (e *StatusError) Unwrap() error {
	if e.OAuth == nil {
		return nil
	}
	return e.OAuth
}

// OAuthError is an authorization server's error (RFC 6749 §5.2, RFC 7591 §3.2.2) or an
// authorization response's error (RFC 6749 §4.1.2.1).
type OAuthError struct {
	Code        string `json:"error"`
	Description string `json:"error_description,omitempty"`
}

func (e *OAuthError) Error() string {
	if e.Description == "" {
		return "oauth error " + e.Code
	}
	return "oauth error " + e.Code + ": " + e.Description
}

// getJSON GETs raw and decodes its 200 JSON body into v. A 404 is a StatusError, so that
// callers may try the next well-known URL.
func (f *Fetcher) getJSON(ctx context.Context, raw string, v any) error {
	if err := f.CheckURL(raw); err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, raw, nil)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrForbiddenTarget, err)
	}
	req.Header.Set("Accept", "application/json")
	return f.do(f.get, req, []int{http.StatusOK}, v)
}

// postForm POSTs form to raw (with basic auth when user is set), follows no redirect, and
// decodes a JSON body of one of the accepted statuses into v (nil: the body is ignored).
func (f *Fetcher) postForm(ctx context.Context, raw string, form url.Values, user, password string, v any) error {
	return f.post1(ctx, raw, "application/x-www-form-urlencoded", strings.NewReader(form.Encode()), user, password, []int{http.StatusOK}, v)
}

func (f *Fetcher) post1(ctx context.Context, raw, contentType string, body io.Reader, user, password string, ok []int, v any) error {
	if err := f.CheckURL(raw); err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, raw, body)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrForbiddenTarget, err)
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Accept", "application/json")
	if user != "" {
		// RFC 6749 §2.3.1: the id and secret are form-encoded before basic auth.
		req.SetBasicAuth(url.QueryEscape(user), url.QueryEscape(password))
	}
	return f.do(f.post, req, ok, v)
}

func (f *Fetcher) do(client *http.Client, req *http.Request, ok []int, v any) error {
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", req.Method, req.URL.Redacted(), err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, f.maxBody+1))
	if err != nil {
		return fmt.Errorf("%s %s: read the body: %w", req.Method, req.URL.Redacted(), err)
	}
	if int64(len(body)) > f.maxBody {
		return fmt.Errorf("%s %s: the body exceeds %d bytes", req.Method, req.URL.Redacted(), f.maxBody)
	}
	good := false
	for _, s := range ok {
		good = good || resp.StatusCode == s
	}
	if !good {
		se := &StatusError{URL: req.URL.Redacted(), Status: resp.StatusCode}
		var oe OAuthError
		if json.Unmarshal(body, &oe) == nil && oe.Code != "" {
			se.OAuth = &oe
		}
		return se
	}
	if v == nil {
		return nil
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%s %s: the body is not the JSON expected: %w", req.Method, req.URL.Redacted(), err)
	}
	return nil
}
