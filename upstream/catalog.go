package upstream

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/manifold-mcp/manifold/internal/modern"
	"github.com/manifold-mcp/manifold/internal/protocol"
)

// Kind names one of the four lists an upstream serves.
type Kind int

// The list kinds, in the order the gateway serves them.
const (
	Tools Kind = iota
	Resources
	ResourceTemplates
	Prompts
	// NumKinds is how many kinds there are.
	NumKinds
)

// Kinds lists every Kind.
var Kinds = []Kind{Tools, Resources, ResourceTemplates, Prompts}

type kindInfo struct {
	name, method, field, key, changed string
}

var kindInfos = [NumKinds]kindInfo{
	Tools:             {"tools", protocol.MethodListTools, "tools", "name", protocol.NotificationToolsChanged},
	Resources:         {"resources", protocol.MethodListResources, "resources", "uri", protocol.NotificationResourcesChanged},
	ResourceTemplates: {"resource templates", protocol.MethodListResourceTemplates, "resourceTemplates", "uriTemplate", protocol.NotificationResourcesChanged},
	Prompts:           {"prompts", protocol.MethodListPrompts, "prompts", "name", protocol.NotificationPromptsChanged},
}

// String returns the kind's name, for logs.
func (k Kind) String() string { return kindInfos[k].name }

// ListField is the result field of the kind's list method ("tools", "resourceTemplates", …).
func (k Kind) ListField() string { return kindInfos[k].field }

// KeyField is the item field that identifies an item of the kind ("name", "uri", "uriTemplate").
func (k Kind) KeyField() string { return kindInfos[k].key }

// ChangedNotification is the list_changed notification that announces a change of the kind.
func (k Kind) ChangedNotification() string { return kindInfos[k].changed }

// Item is one entry of an upstream list: its key (name, URI or URI template) and its JSON
// exactly as the upstream sent it.
type Item struct {
	Key string
	Raw json.RawMessage
}

// Catalog is an upstream's four lists as last fetched. It is immutable once published, and
// must not be copied.
type Catalog struct {
	lists [NumKinds][]Item

	// headerParams holds the x-mcp-header arguments of each tool that has some, by tool
	// name: read from the tools' input schemas once per catalog, on first use.
	headerParamsOnce sync.Once
	headerParams     map[string][]modern.Param
}

// toolHeaderParams returns the arguments of tool that a 2026-07-28 tools/call mirrors in
// Mcp-Param-* headers, from the tool's input schema as the upstream listed it; nil when it
// has none, or when the catalog does not list the tool. A tool whose annotations are invalid
// has none here; such tools are dropped from the catalog of a connection that sends headers
// (see dropInvalidAnnotations).
func (c *Catalog) toolHeaderParams(tool string) []modern.Param {
	if c == nil {
		return nil
	}
	c.headerParamsOnce.Do(func() {
		for _, it := range c.lists[Tools] {
			params, err := modern.HeaderParams(inputSchemaOf(it.Raw))
			if err != nil || len(params) == 0 {
				continue
			}
			if c.headerParams == nil {
				c.headerParams = map[string][]modern.Param{}
			}
			c.headerParams[it.Key] = params
		}
	})
	return c.headerParams[tool]
}

// inputSchemaOf returns the inputSchema of a tool as listed, or nil.
func inputSchemaOf(tool json.RawMessage) json.RawMessage {
	schema, ok, err := protocol.Member(tool, "inputSchema")
	if err != nil || !ok {
		return nil
	}
	return schema
}

// List returns the items of kind k, in the upstream's order.
func (c *Catalog) List(k Kind) []Item {
	if c == nil {
		return nil
	}
	return c.lists[k]
}

// withList returns a copy of c with kind k replaced.
func (c *Catalog) withList(k Kind, items []Item) *Catalog {
	next := &Catalog{}
	if c != nil {
		next.lists = c.lists
	}
	next.lists[k] = items
	return next
}

// maxPages bounds how many pages of one list are fetched, so that an upstream whose cursors
// never end cannot keep the gateway busy forever.
const maxPages = 1000

// fetchList reads every page of kind k with call. It returns the items and how long the
// list stays fresh: the shortest ttlMs of its pages (2026-07-28 caching hints; a page
// without one, as from a 2025 server, gives 0).
func fetchList(ctx context.Context, k Kind, call func(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error)) ([]Item, time.Duration, error) {
	info := kindInfos[k]
	var items []Item
	var ttl time.Duration
	seen := map[string]bool{}
	cursor := ""
	for page := 0; ; page++ {
		if page == maxPages {
			return nil, 0, fmt.Errorf("list %s: more than %d pages", info.name, maxPages)
		}
		var params json.RawMessage
		if cursor != "" {
			params, _ = json.Marshal(map[string]string{"cursor": cursor})
		}
		raw, err := call(ctx, info.method, params)
		if err != nil {
			return nil, 0, fmt.Errorf("list %s: %w", info.name, err)
		}
		if pageTTL := time.Duration(modern.TTL(raw)) * time.Millisecond; page == 0 || pageTTL < ttl {
			ttl = pageTTL
		}
		var result map[string]json.RawMessage
		if err := json.Unmarshal(raw, &result); err != nil {
			return nil, 0, fmt.Errorf("list %s: malformed result: %w", info.name, err)
		}
		var entries []json.RawMessage
		if f, ok := result[info.field]; ok {
			if err := json.Unmarshal(f, &entries); err != nil {
				return nil, 0, fmt.Errorf("list %s: %q is not an array: %w", info.name, info.field, err)
			}
		}
		for _, e := range entries {
			var keyed map[string]json.RawMessage
			if err := json.Unmarshal(e, &keyed); err != nil {
				return nil, 0, fmt.Errorf("list %s: an entry is not an object: %w", info.name, err)
			}
			var key string
			if err := json.Unmarshal(keyed[info.key], &key); err != nil || key == "" {
				return nil, 0, fmt.Errorf("list %s: an entry has no %q", info.name, info.key)
			}
			items = append(items, Item{Key: key, Raw: e})
		}
		var next string
		if f, ok := result["nextCursor"]; ok {
			_ = json.Unmarshal(f, &next)
		}
		if next == "" {
			return items, ttl, nil
		}
		if seen[next] {
			return nil, 0, fmt.Errorf("list %s: the upstream repeated cursor %q", info.name, next)
		}
		seen[next] = true
		cursor = next
	}
}

// NewCatalog returns a catalog holding the given lists, for tests and benchmarks of the
// catalog's users.
func NewCatalog(lists map[Kind][]Item) *Catalog {
	c := &Catalog{}
	for k, items := range lists {
		c.lists[k] = items
	}
	return c
}
