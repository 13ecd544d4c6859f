package catalog

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"regexp"
	"strconv"
	"strings"

	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/upstream"
)

// Entry is one item of the merged catalog. Entries belong to their Snapshot and must not be
// modified.
type Entry struct {
	// Namespace is the upstream that lists the item.
	Namespace *Namespace
	// Original is the upstream's own name, URI or URI template.
	Original string
	// Exposed is what clients see.
	Exposed string
	// raw is the item as clients see it: the upstream's JSON with the key field rewritten.
	raw json.RawMessage
}

// Snapshot is the merged catalog at one moment. It is immutable, so safe for concurrent use:
// a change builds a new one.
type Snapshot struct {
	lists [upstream.NumKinds][]*Entry
	// version identifies each list's content, so that cursors can tell a changed list.
	version [upstream.NumKinds]uint64
	// tools and prompts find items by exposed name.
	tools, prompts map[string]*Entry
	// resources finds listed resources by exposed URI, templateEntries listed templates by
	// exposed URI template.
	resources, templateEntries map[string]*Entry
	// schemes finds upstreams by the scheme prefix of their URIs; unprefixed is the upstream
	// whose URIs pass unchanged, if any.
	schemes    map[string]*Namespace
	unprefixed *Namespace
	// instructions are the instructions of the upstreams marked to include them, in config
	// order.
	instructions []nsText
	// templates match, per upstream, the URIs its listed templates expand to: such a URI is
	// readable whatever the upstream's resource filter (or the profile) says of listed
	// resources.
	templates map[*Namespace][]*regexp.Regexp
	// profile is the profile this snapshot serves, nil for the whole catalog; profiles are
	// the whole catalog's snapshots of each profile.
	profile  *Profile
	profiles map[string]*Snapshot
	// serves holds the upstreams a profile's snapshot lists items of; nil for the whole
	// catalog, which serves every upstream.
	serves map[*Namespace]bool
	// collisions lists the items left out because an earlier upstream exposes the same name.
	collisions []Collision
	// statuses are the upstreams' statuses as this snapshot saw them: one reported ready has
	// its items in it.
	statuses map[string]upstream.Status
}

// Tool returns the tool clients know by the exposed name, or nil.
func (s *Snapshot) Tool(name string) *Entry { return s.tools[name] }

// Prompt returns the prompt clients know by the exposed name, or nil.
func (s *Snapshot) Prompt(name string) *Entry { return s.prompts[name] }

// nsText is a text that comes from one upstream.
type nsText struct {
	ns   *Namespace
	text string
}

// ResolveURI finds the upstream of an exposed resource URI (or template) and the URI in its
// own terms: a listed resource first, then the scheme prefix, then the unprefixed upstream.
// ok is false when no upstream can serve it, or when the upstream's resource filter or the
// snapshot's profile leaves the URI out (unless it matches a listed template).
func (s *Snapshot) ResolveURI(uri string) (ns *Namespace, original string, ok bool) {
	ns, original, listed := s.owner(uri)
	if ns == nil || !listed && !s.readable(ns, uri, original) {
		return nil, "", false
	}
	return ns, original, true
}

// owner finds the upstream of an exposed URI and the URI in its own terms, and whether it is
// a listed resource; a nil ns when no upstream can serve it.
func (s *Snapshot) owner(uri string) (ns *Namespace, original string, listed bool) {
	if e, ok := s.resources[uri]; ok {
		return e.Namespace, e.Original, true
	}
	ns, original = s.unprefixed, uri
	if scheme, o, ok := splitExposedURI(uri); ok {
		if owner, ok := s.schemes[scheme]; ok {
			ns, original = owner, o
		}
	}
	return ns, original, false
}

// readable reports whether an unlisted URI of ns may be read: the whole catalog's own
// filter and the profile's selectors decide, unless the URI matches a listed template.
// Where a filter or a profile restricts reads, only a URI in plain form is judged (see
// plainURI): a server may resolve "docs/../secret" or "%73ecret" to what a pattern drops.
func (s *Snapshot) readable(ns *Namespace, exposed, original string) bool {
	filter := ns.Shaping.Filters[upstream.Resources]
	if filter.keepsAll() && s.profile == nil {
		return true
	}
	if !plainURI(original) {
		return false
	}
	for _, t := range s.templates[ns] {
		if t.MatchString(exposed) {
			return true
		}
	}
	return filter.Keeps(original) && (s.profile == nil || s.profile.Admits(ns, upstream.Resources, exposed))
}

// plainURI reports whether uri is in a form patterns can judge: no dot segments ("." or
// ".." between slashes), no percent-escape of a character that needs none (letters, digits,
// - . _ ~) or of a separator or control character (/ \ and below 0x20), and no control
// character or backslash as it stands.
func plainURI(uri string) bool {
	for i := 0; i < len(uri); i++ {
		switch c := uri[i]; {
		case c < 0x20 || c == 0x7f || c == '\\':
			return false
		case c == '%':
			if i+2 >= len(uri) {
				return false
			}
			b, err := strconv.ParseUint(uri[i+1:i+3], 16, 8)
			if err != nil {
				return false
			}
			d := byte(b)
			if d < 0x20 || d == 0x7f || d == '/' || d == '\\' || d == '.' || d == '-' || d == '_' || d == '~' ||
				d >= 'a' && d <= 'z' || d >= 'A' && d <= 'Z' || d >= '0' && d <= '9' {
				return false
			}
		}
	}
	path := uri
	if end := strings.IndexAny(path, "?#"); end >= 0 {
		path = path[:end]
	}
	for seg := range strings.SplitSeq(path, "/") {
		if seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

// Serves reports whether the snapshot lists items of ns: always for the whole catalog, and
// for a profile's when one of its selectors takes any. What such an upstream sends to every
// client (a broadcast log message) reaches the profile's clients only then.
func (s *Snapshot) Serves(ns *Namespace) bool { return s.serves == nil || s.serves[ns] }

// Template returns the listed resource template clients know by the exposed URI template,
// or nil.
func (s *Snapshot) Template(uriTemplate string) *Entry { return s.templateEntries[uriTemplate] }

// Owner finds the upstream of an exposed URI as ResolveURI does, but in the whole catalog and
// whatever filters and profiles say: for undoing what a client did earlier (unsubscribing),
// never for reading.
func (s *Snapshot) Owner(uri string) (ns *Namespace, original string, ok bool) {
	ns, original, _ = s.owner(uri)
	return ns, original, ns != nil
}

// Profile returns the snapshot of the named profile taken at the same moment, or nil if
// there is no such profile.
func (s *Snapshot) Profile(name string) *Snapshot { return s.profiles[name] }

// seal computes what a snapshot derives from its lists: versions and template patterns.
func (s *Snapshot) seal() {
	for _, k := range upstream.Kinds {
		h := fnv.New64a()
		for _, e := range s.lists[k] {
			h.Write(e.raw)
			h.Write([]byte{0})
		}
		s.version[k] = h.Sum64()
	}
	s.templates = map[*Namespace][]*regexp.Regexp{}
	for _, e := range s.lists[upstream.ResourceTemplates] {
		if re := templatePattern(e.Exposed); re != nil {
			s.templates[e.Namespace] = append(s.templates[e.Namespace], re)
		}
	}
}

// restrict returns the snapshot of profile p: the items p admits, and the upstreams whose
// URIs it reaches.
func (s *Snapshot) restrict(p *Profile) *Snapshot {
	ps := &Snapshot{
		tools:           map[string]*Entry{},
		prompts:         map[string]*Entry{},
		resources:       map[string]*Entry{},
		templateEntries: map[string]*Entry{},
		schemes:         map[string]*Namespace{},
		statuses:        s.statuses,
		profile:         p,
	}
	serves := map[*Namespace]bool{}
	ps.serves = serves
	for _, k := range upstream.Kinds {
		for _, e := range s.lists[k] {
			if !p.Admits(e.Namespace, k, e.Exposed) {
				continue
			}
			serves[e.Namespace] = true
			ps.add(k, e)
		}
	}
	// A collision concerns the profile when the name it is about is listed there.
	for _, c := range s.collisions {
		if ps.listed(c.Kind, c.Name) {
			ps.collisions = append(ps.collisions, c)
		}
	}
	reaches := func(ns *Namespace) bool {
		return p.reaches(ns, upstream.Resources) || p.reaches(ns, upstream.ResourceTemplates)
	}
	for scheme, ns := range s.schemes {
		if reaches(ns) {
			ps.schemes[scheme] = ns
		}
	}
	if s.unprefixed != nil && reaches(s.unprefixed) {
		ps.unprefixed = s.unprefixed
	}
	for _, in := range s.instructions {
		if serves[in.ns] {
			ps.instructions = append(ps.instructions, in)
		}
	}
	ps.seal()
	return ps
}

// add appends e to the list of kind k and to the lookup of its kind; used while a snapshot
// is built, before seal.
func (s *Snapshot) add(k upstream.Kind, e *Entry) {
	s.lists[k] = append(s.lists[k], e)
	switch k {
	case upstream.Tools:
		s.tools[e.Exposed] = e
	case upstream.Prompts:
		s.prompts[e.Exposed] = e
	case upstream.Resources:
		s.resources[e.Exposed] = e
	case upstream.ResourceTemplates:
		s.templateEntries[e.Exposed] = e
	}
}

// Version identifies the content of kind k's list: it differs when the list changed.
func (s *Snapshot) Version(k upstream.Kind) uint64 { return s.version[k] }

// Instructions are the instructions of the upstreams marked to include them, each headed by
// the upstream's name; "" when none.
func (s *Snapshot) Instructions() string {
	if len(s.instructions) == 0 {
		return ""
	}
	texts := make([]string, len(s.instructions))
	for i, in := range s.instructions {
		texts[i] = in.text
	}
	return strings.Join(texts, "\n\n")
}

// Statuses returns each upstream's status, by name, as this snapshot saw it: one reported
// ready has its items in it. The map is the caller's.
func (s *Snapshot) Statuses() map[string]upstream.Status { return maps.Clone(s.statuses) }

// Collisions returns the items left out because an upstream listed earlier in the config
// exposes the same name or URI. The slice is the caller's; never nil.
func (s *Snapshot) Collisions() []Collision { return append([]Collision{}, s.collisions...) }

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

// Page returns the result of a list method: up to pageSize items of kind k from the cursor
// on ("" for the first page), with a nextCursor when more follow. A cursor this list did not
// issue, or issued before it changed, is a *protocol.Error with code CodeInvalidParams.
func (s *Snapshot) Page(k upstream.Kind, cursorParam string, pageSize int) (json.RawMessage, error) {
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

// kindLabels name the kinds in Item and Collision.
var kindLabels = [upstream.NumKinds]string{
	upstream.Tools:             "tool",
	upstream.Resources:         "resource",
	upstream.ResourceTemplates: "template",
	upstream.Prompts:           "prompt",
}

// Item is one item of the merged catalog as clients see it.
type Item struct {
	// Kind is "tool", "resource", "template" or "prompt".
	Kind     string `json:"kind"`
	Name     string `json:"name"`
	Upstream string `json:"upstream"`
	Original string `json:"original"`
}

// View is the merged catalog at one moment: every item with its owner, and what name
// collisions left out.
type View struct {
	Items      []Item      `json:"items"`
	Collisions []Collision `json:"collisions"`
}

// View returns the catalog as clients see it, kind by kind in list order. It is the caller's.
func (s *Snapshot) View() View {
	view := View{Items: []Item{}, Collisions: s.Collisions()}
	for _, k := range upstream.Kinds {
		for _, e := range s.lists[k] {
			view.Items = append(view.Items, Item{Kind: kindLabels[k], Name: e.Exposed, Upstream: e.Namespace.Name, Original: e.Original})
		}
	}
	return view
}

// Admits reports whether the snapshot's profile admits the item of kind k that ns exposes as
// exposed; true for the whole catalog.
func (s *Snapshot) Admits(ns *Namespace, k upstream.Kind, exposed string) bool {
	return s.profile == nil || s.profile.Admits(ns, k, exposed)
}

// listed reports whether the item of the kind labelled kind ("tool", …) named name is in the
// snapshot's lists.
func (s *Snapshot) listed(kind, name string) bool {
	switch kind {
	case kindLabels[upstream.Tools]:
		return s.tools[name] != nil
	case kindLabels[upstream.Prompts]:
		return s.prompts[name] != nil
	case kindLabels[upstream.Resources]:
		return s.resources[name] != nil
	case kindLabels[upstream.ResourceTemplates]:
		return s.templateEntries[name] != nil
	}
	return false
}

// Entries returns the items of kind k in list order. The slice is the snapshot's: do not
// modify it.
func (s *Snapshot) Entries(k upstream.Kind) []*Entry { return s.lists[k] }

// Raw returns the item as clients see it. The bytes are the snapshot's: do not modify them.
func (e *Entry) Raw() json.RawMessage { return e.raw }
