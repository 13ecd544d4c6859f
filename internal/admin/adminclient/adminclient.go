// Package adminclient is a client of the gateway's admin API (package admin): it lists the
// calls held for approval, the pinned tool definitions and the grants users gave the gateway
// at upstreams, and posts an operator's decisions on them and revocations of grants.
// `gateway approvals`, `gateway pins` and `gateway grants` are built on it.
//
//	c := &adminclient.Client{URL: "http://127.0.0.1:8081", Key: key}
//	held, err := c.Approvals(ctx)
//	a, err := c.Decide(ctx, held[0].ID, admin.Approve)
//
// An answer with an error status is a *StatusError, which matches admin.ErrUnauthorized,
// admin.ErrForbidden, admin.ErrNotFound or admin.ErrConflict with errors.Is.
package adminclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/manifold-mcp/manifold/internal/admin"
	"github.com/manifold-mcp/manifold/internal/grants"
)

// maxAnswer bounds an answer's body: a gateway's lists, not a stream.
const maxAnswer = 64 << 20

// Client calls one gateway's admin API. Its methods are safe for concurrent use; its fields
// must not change once it is in use.
type Client struct {
	// URL is the admin listener's base URL, like http://127.0.0.1:8081.
	URL string
	// Key is the admin credential sent as the bearer token (an admin API key, or a token
	// with an admin role); "" sends none.
	Key string
	// HTTP sends the requests; nil means http.DefaultClient.
	HTTP *http.Client
}

// StatusError is an answer of the admin API with an error status.
type StatusError struct {
	// Status is the HTTP status.
	Status int
	// Message is the API's own error message ("" if the body had none).
	Message string
}

func (e *StatusError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("HTTP %d", e.Status)
	}
	return fmt.Sprintf("HTTP %d: %s", e.Status, e.Message)
}

// Is matches the admin package's error for the status.
func (e *StatusError) Is(target error) bool {
	switch e.Status {
	case http.StatusUnauthorized:
		return target == admin.ErrUnauthorized
	case http.StatusForbidden:
		return target == admin.ErrForbidden
	case http.StatusNotFound:
		return target == admin.ErrNotFound
	case http.StatusConflict:
		return target == admin.ErrConflict
	}
	return false
}

// Approvals lists the calls held for a decision.
func (c *Client) Approvals(ctx context.Context) ([]admin.Approval, error) {
	var out struct {
		Approvals []admin.Approval `json:"approvals"`
	}
	if err := c.do(ctx, http.MethodGet, "/api/approvals", nil, &out); err != nil {
		return nil, fmt.Errorf("list the held calls: %w", err)
	}
	return out.Approvals, nil
}

// Decide approves or denies (admin.Approve, admin.Deny) the held call id.
func (c *Client) Decide(ctx context.Context, id, decision string) (admin.Approval, error) {
	var out struct {
		Approval admin.Approval `json:"approval"`
	}
	body := map[string]string{"decision": decision}
	if err := c.do(ctx, http.MethodPost, "/api/approvals/"+url.PathEscape(id), body, &out); err != nil {
		return admin.Approval{}, fmt.Errorf("%s the held call %s: %w", decision, id, err)
	}
	return out.Approval, nil
}

// Pins lists the pinned tool definitions, each with its pending change, if any.
func (c *Client) Pins(ctx context.Context) ([]admin.Pin, error) {
	var out struct {
		Pins []admin.Pin `json:"pins"`
	}
	if err := c.do(ctx, http.MethodGet, "/api/pins", nil, &out); err != nil {
		return nil, fmt.Errorf("list the pins: %w", err)
	}
	return out.Pins, nil
}

// Resolve accepts or rejects (admin.Accept, admin.Reject) the change of hash of the pinned
// tool upstream/tool.
func (c *Client) Resolve(ctx context.Context, upstream, tool, hash, decision string) (admin.Pin, error) {
	var out struct {
		Pin admin.Pin `json:"pin"`
	}
	body := map[string]string{"decision": decision, "hash": hash}
	path := "/api/pins/" + url.PathEscape(upstream) + "/" + url.PathEscape(tool)
	if err := c.do(ctx, http.MethodPost, path, body, &out); err != nil {
		return admin.Pin{}, fmt.Errorf("%s the change of %s/%s: %w", decision, upstream, tool, err)
	}
	return out.Pin, nil
}

// Grants lists one page of the grants users gave the gateway at upstreams (never a token):
// the page after cursor ("" for the first), and the cursor of the next ("" after the last).
func (c *Client) Grants(ctx context.Context, cursor string) ([]grants.GrantInfo, string, error) {
	var out struct {
		Grants []grants.GrantInfo `json:"grants"`
		Next   string             `json:"next"`
	}
	path := "/api/grants"
	if cursor != "" {
		path += "?cursor=" + url.QueryEscape(cursor)
	}
	if err := c.do(ctx, http.MethodGet, path, nil, &out); err != nil {
		return nil, "", fmt.Errorf("list the grants: %w", err)
	}
	return out.Grants, out.Next, nil
}

// AllGrants lists every grant, following the pages to the last. It fails, rather than read
// on, when the gateway answers a cursor it was given already.
func (c *Client) AllGrants(ctx context.Context) ([]grants.GrantInfo, error) {
	var all []grants.GrantInfo
	seen := map[string]bool{"": true}
	cursor := ""
	for {
		page, next, err := c.Grants(ctx, cursor)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if next == "" {
			return all, nil
		}
		if seen[next] {
			return nil, fmt.Errorf("list the grants: the gateway at %s answered the page cursor %q twice: its list does not move on", c.URL, next)
		}
		seen[next] = true
		cursor = next
	}
}

// RevokeGrant revokes user's grant at upstream: at the upstream's authorization server where
// it supports revocation, and in the gateway. It fails with an error matching
// admin.ErrNotFound when user has no grant there.
func (c *Client) RevokeGrant(ctx context.Context, user grants.Principal, upstream string) error {
	var out struct {
		Revoked json.RawMessage `json:"revoked"`
	}
	body := map[string]any{"principal": user, "upstream": upstream}
	if err := c.do(ctx, http.MethodPost, "/api/grants/revoke", body, &out); err != nil {
		return fmt.Errorf("revoke %s's grant at %s: %w", user, upstream, err)
	}
	return nil
}

// do sends one request and decodes a 200 answer into out.
func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(c.URL, "/")+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Key != "" {
		req.Header.Set("Authorization", "Bearer "+c.Key)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return fmt.Errorf("read the answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal(data, &e)
		return &StatusError{Status: resp.StatusCode, Message: e.Error}
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("the answer is not the admin API's JSON (is %s the admin listener?): %w", c.URL, err)
	}
	return nil
}
