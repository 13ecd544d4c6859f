package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"

	"github.com/manifold-mcp/manifold/upstream"
)

// collisionCounter counts the collision warnings a catalog builder logs, by name.
type collisionCounter struct {
	mu    sync.Mutex
	names map[string]int
}

func (c *collisionCounter) Enabled(context.Context, slog.Level) bool { return true }
func (c *collisionCounter) WithAttrs([]slog.Attr) slog.Handler       { return c }
func (c *collisionCounter) WithGroup(string) slog.Handler            { return c }
func (c *collisionCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "two upstreams expose the same name; the one listed first in the config wins" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "name" {
			c.mu.Lock()
			c.names[a.Value.String()]++
			c.mu.Unlock()
		}
		return true
	})
	return nil
}

func (c *collisionCounter) count(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.names[name]
}

// toolCatalog is a catalog of tools with the given names.
func toolCatalog(names ...string) *upstream.Catalog {
	items := make([]upstream.Item, len(names))
	for i, n := range names {
		items[i] = upstream.Item{Key: n, Raw: toolJSON(n)}
	}
	return upstream.NewCatalog(map[upstream.Kind][]upstream.Item{upstream.Tools: items})
}

// TestCatalogNameTablesAreBounded: two unprefixed upstreams that list fresh tool names on
// every change (so each change is a new collision, and a new name for "former") must not
// grow the builder's per-name tables: they hold only what the current catalog and the down
// upstreams' last lists need. The real cases keep working: a lasting collision is logged
// once, and a down upstream's former tools are still known as its own until it comes back
// without them.
func TestCatalogNameTablesAreBounded(t *testing.T) {
	logs := &collisionCounter{names: map[string]int{}}
	churn := &fakeUpstream{name: "churn"}
	copycat := &fakeUpstream{name: "copycat"}
	steady := &fakeUpstream{name: "steady", catalog: toolCatalog("keep")}
	routes := []*route{
		{index: 0, name: "churn", client: churn},
		{index: 1, name: "copycat", client: copycat},
		{index: 2, name: "steady", prefix: "st", scheme: "st", client: steady},
	}
	b := newCatalogBuilder(routes, "__", slog.New(logs))

	const rounds = 200
	for i := range rounds {
		name := fmt.Sprintf("t%d", i)
		churn.catalog = toolCatalog(name)
		copycat.catalog = toolCatalog(name)
		snap := b.build()
		if snap.tools[name] == nil || snap.tools[name].route != routes[0] {
			t.Fatalf("round %d: %s is not churn's", i, name)
		}
		// The same collision seen again while it lasts is not logged again.
		b.build()
		if n := logs.count(name); n != 1 {
			t.Fatalf("round %d: the collision on %s was logged %d times, want once", i, name, n)
		}
	}
	b.mu.Lock()
	warned, former := len(b.warned), len(b.former)
	b.mu.Unlock()
	// One collision lasts; two names are listed (churn's latest and steady's).
	if warned > 1 {
		t.Errorf("after %d changes of names the builder remembers %d collisions, want at most 1", rounds, warned)
	}
	if former > 2 {
		t.Errorf("after %d changes of names the builder remembers %d former names, want at most 2", rounds, former)
	}

	// churn goes down: its last tool is still known as its own, however often the catalog is
	// rebuilt meanwhile, so that a call says "unavailable"; steady's is still current.
	last := fmt.Sprintf("t%d", rounds-1)
	copycat.catalog = toolCatalog()
	churn.catalog = nil
	for range 3 {
		b.build()
	}
	if r := b.formerOwner(upstream.Tools, last); r != routes[0] {
		t.Errorf("while churn is down, formerOwner(%s) = %s, want churn", last, routeName(r))
	}
	if r := b.formerOwner(upstream.Tools, "st__keep"); r != routes[2] {
		t.Errorf("formerOwner(st__keep) = %s, want steady", routeName(r))
	}

	// churn comes back without that tool: the name is forgotten.
	churn.catalog = toolCatalog("fresh")
	b.build()
	if r := b.formerOwner(upstream.Tools, last); r != nil {
		t.Errorf("churn is back without %s, yet formerOwner = %s", last, routeName(r))
	}
	if r := b.formerOwner(upstream.Tools, "fresh"); r != routes[0] {
		t.Errorf("formerOwner(fresh) = %s, want churn", routeName(r))
	}

	// A collision that ended and comes back is news again, and logged once more.
	copycat.catalog = toolCatalog("fresh")
	b.build()
	b.build()
	if n := logs.count("fresh"); n != 1 {
		t.Errorf("the collision on fresh was logged %d times, want once", n)
	}
	copycat.catalog = toolCatalog()
	b.build()
	copycat.catalog = toolCatalog("fresh")
	b.build()
	if n := logs.count("fresh"); n != 2 {
		t.Errorf("the collision on fresh, ended and back, was logged %d times in all, want twice", n)
	}
}

func routeName(r *route) string {
	if r == nil {
		return "nil"
	}
	return r.name
}
