// Package admintest has fakes of the parts of admin.Backend that tests of the admin page, its
// client and the operator commands share.
//
//	type backend struct {
//		admin.Backend // what the test does not use
//		*admintest.GrantList
//	}
//	b := backend{GrantList: admintest.NewGrantList(2, infos...)}
package admintest

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/manifold-mcp/manifold/internal/admin"
	"github.com/manifold-mcp/manifold/internal/grants"
)

// Revocation is a grant a GrantList was asked to revoke.
type Revocation struct {
	User     grants.Principal
	Upstream string
}

// GrantList is the grants part of an admin.Backend over a list: it serves them a page at a
// time, a cursor being the index of its page's first grant, and revokes what it lists. It
// records the cursors and the revocations it was asked for. It is safe for concurrent use.
type GrantList struct {
	pageSize int

	// mu guards the fields below.
	mu      sync.Mutex
	list    []grants.GrantInfo
	cursors []string
	revoked []Revocation
}

// NewGrantList returns a GrantList of list, pageSize grants a page (all on one if zero).
func NewGrantList(pageSize int, list ...grants.GrantInfo) *GrantList {
	return &GrantList{pageSize: pageSize, list: slices.Clone(list)}
}

// Grants implements admin.Backend: the page at cursor, and the cursor of the next.
func (g *GrantList) Grants(_ context.Context, cursor string) ([]grants.GrantInfo, string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.cursors = append(g.cursors, cursor)
	from := 0
	if cursor != "" {
		var err error
		if from, err = strconv.Atoi(cursor); err != nil || from < 0 || from > len(g.list) {
			return nil, "", fmt.Errorf("%w: no such cursor %q", admin.ErrNotFound, cursor)
		}
	}
	to := len(g.list)
	if g.pageSize > 0 {
		to = min(from+g.pageSize, to)
	}
	next := ""
	if to < len(g.list) {
		next = strconv.Itoa(to)
	}
	return slices.Clone(g.list[from:to]), next, nil
}

// RevokeGrant implements admin.Backend: it forgets the grant, or fails with admin.ErrNotFound.
func (g *GrantList) RevokeGrant(_ context.Context, user grants.Principal, upstream string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.revoked = append(g.revoked, Revocation{user, upstream})
	i := slices.IndexFunc(g.list, func(gi grants.GrantInfo) bool { return gi.Principal == user && gi.Upstream == upstream })
	if i < 0 {
		return fmt.Errorf("%w: %s has no grant at upstream %s", admin.ErrNotFound, user, upstream)
	}
	g.list = slices.Delete(g.list, i, i+1)
	return nil
}

// Cursors returns the cursors Grants was asked for, in order.
func (g *GrantList) Cursors() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.cursors)
}

// Revoked returns the revocations RevokeGrant was asked for, in order, those it refused too.
func (g *GrantList) Revoked() []Revocation {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.revoked)
}
