package gateway

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strconv"
	"strings"
	"sync"

	"github.com/manifold-mcp/manifold/protocol"
	"github.com/manifold-mcp/manifold/upstream"
)

// upstreamClient is what the gateway needs of a connection to one upstream; *upstream.Client
// is the real one.
type upstreamClient interface {
	Name() string
	Catalog() *upstream.Catalog
	Server() *protocol.InitializeResult
	Call(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error)
	Notify(ctx context.Context, method string, params json.RawMessage) error
	State() upstream.State
	Status() upstream.Status
	Run(ctx context.Context)
	Close() error
}

var _ upstreamClient = (*upstream.Client)(nil)

// connKey names the connection a route's messages travel on, for the routing records: the
// upstream's name for a shared connection, and name plus session for a session's own one, so
// that ids two children hand out alike never meet.
func (r *route) connKey(sessionID string) string {
	switch {
	case r.boundSession != "":
		return r.name + "\x00" + r.boundSession
	case r.pool != nil && sessionID != "":
		return r.name + "\x00" + sessionID
	}
	return r.name
}

// route is one upstream as the catalog sees it, in config order.
type route struct {
	index  int
	name   string
	prefix string // for tool and prompt names; "" = unprefixed
	scheme string // for resource URIs; "" = unprefixed
	client upstreamClient
	// includeInstructions says whether the upstream's instructions reach clients.
	includeInstructions bool
	// noOwnerOnce logs once that requests of this upstream cannot be routed to one client.
	noOwnerOnce sync.Once
	// pool holds per-session connections when the upstream is isolated; nil when shared.
	pool *connPool
	// boundSession is the session a per-session connection belongs to; nil when shared.
	boundSession string
	// broadcastLogs sends log messages that belong to no call to every session.
	broadcastLogs bool

	// progress maps the progress tokens the gateway gave this connection to the calls they
	// are about: token → progressRoute.
	progress sync.Map

	logMu sync.Mutex
	// sentLevel is the log level last set on the upstream, and sentTo the connection (its
	// initialize result) it was set on. Guarded by logMu.
	sentLevel string
	sentTo    *protocol.InitializeResult
}

// entry is one item of the merged catalog.
type entry struct {
	route *route
	// original is the upstream's own name, URI or URI template.
	original string
	// exposed is what clients see.
	exposed string
	// raw is the item as clients see it: the upstream's JSON with the key field rewritten.
	raw json.RawMessage
}

// snapshot is the merged catalog at one moment. It is immutable: a change builds a new one.
type snapshot struct {
	lists [upstream.NumKinds][]*entry
	// version identifies each list's content, so that cursors can tell a changed list.
	version [upstream.NumKinds]uint64
	// byName finds tools and prompts by exposed name.
	tools, prompts map[string]*entry
	// resources finds listed resources by exposed URI.
	resources map[string]*entry
	// schemes finds upstreams by the scheme prefix of their URIs; unprefixed is the upstream
	// whose URIs pass unchanged, if any.
	schemes      map[string]*route
	unprefixed   *route
	instructions string
	// collisions lists the items left out because an earlier upstream exposes the same name.
	collisions []Collision
	// statuses are the upstreams' statuses as this snapshot saw them: one reported ready has
	// its items in it.
	statuses map[string]upstream.Status
}

// Collision is an item left out of the merged catalog because an upstream listed earlier in
// the config exposes the same final name or URI.
type Collision struct {
	Kind            string `json:"kind"`
	Name            string `json:"name"`
	KeptUpstream    string `json:"keptUpstream"`
	DroppedUpstream string `json:"droppedUpstream"`
	DroppedOriginal string `json:"droppedOriginal"`
}

// catalogBuilder merges the upstreams' lists into snapshots. Build is called whenever an
// upstream changes; calls are serialized.
type catalogBuilder struct {
	routes []*route
	sep    string
	logger *slog.Logger

	mu sync.Mutex
	// warned holds the collisions of the last build, all logged, so that a collision is logged
	// once while it lasts. Invariant: it holds no collision that the last build did not see,
	// so an upstream that keeps inventing names cannot grow it. Guarded by mu.
	warned map[string]bool
	// former remembers which upstream listed each exposed tool or prompt name, so that a call
	// to it while that upstream is down fails as "unavailable", not "unknown". Invariant: it
	// holds the names of the last build's catalog and the names each down upstream listed when
	// it was last up; an upstream that is up keeps only what it lists now. Guarded by mu.
	former map[string]*route
}

func newCatalogBuilder(routes []*route, sep string, logger *slog.Logger) *catalogBuilder {
	return &catalogBuilder{routes: routes, sep: sep, logger: logger, warned: map[string]bool{}, former: map[string]*route{}}
}

// build merges the upstreams' current lists. On a name collision config order wins and the
// loser is logged once while the collision lasts (design decision 2).
func (b *catalogBuilder) build() *snapshot {
	b.mu.Lock()
	defer b.mu.Unlock()
	// The per-name tables are rebuilt from this build's lists, so that they follow the
	// catalog instead of growing with every name an upstream ever listed.
	warned := map[string]bool{}
	former := map[string]*route{}
	down := map[*route]bool{}
	s := &snapshot{
		tools:     map[string]*entry{},
		prompts:   map[string]*entry{},
		resources: map[string]*entry{},
		schemes:   map[string]*route{},
		statuses:  map[string]upstream.Status{},
	}
	var instructions []string
	templates := map[string]*entry{}
	for _, r := range b.routes {
		if r.scheme == "" {
			s.unprefixed = r
		} else {
			s.schemes[r.scheme] = r
		}
		// The status first: an upstream ready by then has its catalog by now.
		s.statuses[r.name] = r.client.Status()
		cat := r.client.Catalog()
		if cat == nil {
			down[r] = true
			continue
		}
		if r.includeInstructions {
			if info := r.client.Server(); info != nil && info.Instructions != "" {
				instructions = append(instructions, fmt.Sprintf("[%s] %s", r.name, info.Instructions))
			}
		}
		for _, k := range upstream.Kinds {
			var seen map[string]*entry
			switch k {
			case upstream.Tools:
				seen = s.tools
			case upstream.Prompts:
				seen = s.prompts
			case upstream.Resources:
				seen = s.resources
			case upstream.ResourceTemplates:
				seen = templates
			}
			for _, it := range cat.List(k) {
				var exposed string
				switch k {
				case upstream.Tools, upstream.Prompts:
					exposed = exposedName(r.prefix, b.sep, it.Key)
				default:
					exposed = exposeURI(r.scheme, it.Key)
				}
				if prev, dup := seen[exposed]; dup {
					b.warnCollisionLocked(warned, k, exposed, prev, r, it.Key)
					s.collisions = append(s.collisions, Collision{Kind: kindLabels[k], Name: exposed, KeptUpstream: prev.route.name, DroppedUpstream: r.name, DroppedOriginal: it.Key})
					continue
				}
				raw, err := rewriteField(it.Raw, k.KeyField(), exposed)
				if err != nil {
					b.logger.Warn("an upstream list entry could not be rewritten; it is left out", "upstream", r.name, "kind", k.String(), "key", it.Key, "error", err.Error())
					continue
				}
				e := &entry{route: r, original: it.Key, exposed: exposed, raw: raw}
				seen[exposed] = e
				s.lists[k] = append(s.lists[k], e)
				if k == upstream.Tools || k == upstream.Prompts {
					former[k.String()+"\x00"+exposed] = r
				}
			}
		}
	}
	// A down upstream's names stay its own until it is back (and lists them or not), unless
	// an upstream that is up lists them now.
	for key, r := range b.former {
		if _, taken := former[key]; !taken && down[r] {
			former[key] = r
		}
	}
	b.warned, b.former = warned, former
	for _, k := range upstream.Kinds {
		h := fnv.New64a()
		for _, e := range s.lists[k] {
			h.Write(e.raw)
			h.Write([]byte{0})
		}
		s.version[k] = h.Sum64()
	}
	s.instructions = strings.Join(instructions, "\n\n")
	return s
}

// warnCollisionLocked records a collision of this build in warned and logs it unless the last
// build saw it too. b.mu must be held.
func (b *catalogBuilder) warnCollisionLocked(warned map[string]bool, k upstream.Kind, exposed string, kept *entry, lost *route, original string) {
	key := k.String() + "\x00" + exposed + "\x00" + lost.name
	warned[key] = true
	if b.warned[key] {
		return
	}
	b.logger.Warn("two upstreams expose the same name; the one listed first in the config wins",
		"kind", k.String(), "name", exposed, "kept_upstream", kept.route.name, "dropped_upstream", lost.name, "dropped_original", original)
}

// formerOwner returns the upstream that lists the exposed tool or prompt name, or listed it
// when it was last up; nil if none.
func (b *catalogBuilder) formerOwner(k upstream.Kind, exposed string) *route {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.former[k.String()+"\x00"+exposed]
}

// rewriteField returns obj with its string field set to value; every other member keeps
// its bytes and place.
func rewriteField(obj json.RawMessage, field, value string) (json.RawMessage, error) {
	if current, ok, err := protocol.StringMember(obj, field); err != nil {
		return nil, err
	} else if ok && current == value {
		return obj, nil
	}
	return protocol.SetMember(obj, field, protocol.AppendString(nil, value))
}

// resolveURI finds the upstream of an exposed resource URI and the URI in its own terms:
// a listed resource first, then the scheme prefix, then the unprefixed upstream.
func (s *snapshot) resolveURI(uri string) (*route, string, bool) {
	if e, ok := s.resources[uri]; ok {
		return e.route, e.original, true
	}
	if scheme, original, ok := splitExposedURI(uri); ok {
		if r, ok := s.schemes[scheme]; ok {
			return r, original, true
		}
	}
	if s.unprefixed != nil {
		return s.unprefixed, uri, true
	}
	return nil, "", false
}

// errBadCursor is returned for a cursor the gateway did not issue for this list, or whose
// list has changed since; it maps to -32602.
var errBadCursor = protocol.Errorf(protocol.CodeInvalidParams, "invalid or expired cursor: list again without a cursor")

// cursor encodes where the next page of kind k starts in the list at version.
func cursor(k upstream.Kind, version uint64, offset int) string {
	return base64.RawURLEncoding.EncodeToString([]byte(fmt.Sprintf("%d.%x.%d", int(k), version, offset)))
}

// parseCursor returns the offset a cursor points at, checking that it belongs to this list.
func parseCursor(c string, k upstream.Kind, version uint64, size int) (int, error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, errBadCursor
	}
	parts := strings.Split(string(raw), ".")
	if len(parts) != 3 || parts[0] != strconv.Itoa(int(k)) || parts[1] != strconv.FormatUint(version, 16) {
		return 0, errBadCursor
	}
	off, err := strconv.Atoi(parts[2])
	if err != nil || off <= 0 || off >= size {
		return 0, errBadCursor
	}
	return off, nil
}

// page returns the result of a list method: one page of kind k from the cursor on.
func (s *snapshot) page(k upstream.Kind, cursorParam string, pageSize int) (json.RawMessage, error) {
	list := s.lists[k]
	start := 0
	if cursorParam != "" {
		var err error
		if start, err = parseCursor(cursorParam, k, s.version[k], len(list)); err != nil {
			return nil, err
		}
	}
	end := min(start+pageSize, len(list))
	size := 16 + len(k.ListField())
	for _, e := range list[start:end] {
		size += len(e.raw) + 1
	}
	buf := make([]byte, 0, size+64)
	buf = append(buf, `{"`...)
	buf = append(buf, k.ListField()...)
	buf = append(buf, `":[`...)
	for i, e := range list[start:end] {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, e.raw...)
	}
	buf = append(buf, ']')
	if end < len(list) {
		buf = append(buf, `,"nextCursor":`...)
		buf = protocol.AppendString(buf, cursor(k, s.version[k], end))
	}
	buf = append(buf, '}')
	return buf, nil
}

// kindLabels name the kinds in CatalogView.
var kindLabels = [upstream.NumKinds]string{
	upstream.Tools:             "tool",
	upstream.Resources:         "resource",
	upstream.ResourceTemplates: "template",
	upstream.Prompts:           "prompt",
}

// CatalogItem is one item of the merged catalog as clients see it.
type CatalogItem struct {
	// Kind is "tool", "resource", "template" or "prompt".
	Kind     string `json:"kind"`
	Name     string `json:"name"`
	Upstream string `json:"upstream"`
	Original string `json:"original"`
}

// CatalogView is the merged catalog at one moment: every item with its owner, and what name
// collisions left out.
type CatalogView struct {
	Items      []CatalogItem `json:"items"`
	Collisions []Collision   `json:"collisions"`
}

// Catalog returns the merged catalog as clients see it now.
func (g *Gateway) Catalog() CatalogView {
	snap := g.snapshot.Load()
	view := CatalogView{Items: []CatalogItem{}, Collisions: append([]Collision{}, snap.collisions...)}
	for _, k := range upstream.Kinds {
		for _, e := range snap.lists[k] {
			view.Items = append(view.Items, CatalogItem{Kind: kindLabels[k], Name: e.exposed, Upstream: e.route.name, Original: e.original})
		}
	}
	return view
}
