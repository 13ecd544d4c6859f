package protocol

import (
	"encoding/json"
	"slices"
)

// Protocol versions Manifold speaks on both faces, newest first.
const (
	Version20251125 = "2025-11-25"
	Version20250618 = "2025-06-18"
	Version20250326 = "2025-03-26"
	Version20241105 = "2024-11-05"
	// Version20260728 is the stateless revision; Manifold serves it per request when the
	// configuration turns that face on, and otherwise answers its probes so that dual-era
	// clients fall back to initialize.
	Version20260728 = "2026-07-28"
	// LatestVersion is what Manifold offers upstreams and answers clients that ask for a
	// version it does not know.
	LatestVersion = Version20251125
)

// SupportedVersions lists the versions Manifold negotiates, newest first.
var SupportedVersions = []string{Version20251125, Version20250618, Version20250326, Version20241105}

// ModernVersions lists the stateless versions (2026-07-28 and later) Manifold knows, newest
// first: a request of these carries its version and capabilities in its own _meta instead of
// a session's initialize.
var ModernVersions = []string{Version20260728}

// Keys of a 2026-07-28 request's params._meta (2026-07-28 "Per-request _meta"). The W3C
// trace context keys are unprefixed.
const (
	MetaProtocolVersion    = "io.modelcontextprotocol/protocolVersion"
	MetaClientCapabilities = "io.modelcontextprotocol/clientCapabilities"
	MetaClientInfo         = "io.modelcontextprotocol/clientInfo"
	MetaLogLevel           = "io.modelcontextprotocol/logLevel"
	MetaProgressToken      = "progressToken"
	MetaTraceparent        = "traceparent"
	MetaTracestate         = "tracestate"
	MetaBaggage            = "baggage"
)

// Keys of a 2026-07-28 result's _meta, and the notification that opens a listen stream.
const (
	// MetaServerInfo is the server's Implementation, in a result's _meta.
	MetaServerInfo = "io.modelcontextprotocol/serverInfo"
	// MetaSubscriptionID is the id of the subscriptions/listen request a notification on its
	// stream belongs to, with that id's JSON type.
	MetaSubscriptionID = "io.modelcontextprotocol/subscriptionId"
	// NotificationSubscriptionsAcknowledged is the first message of a listen stream: what of
	// the asked notifications the server will send.
	NotificationSubscriptionsAcknowledged = "notifications/subscriptions/acknowledged"
)

// Values of a 2026-07-28 result's resultType. A result without one is read as
// ResultTypeComplete.
const (
	ResultTypeComplete      = "complete"
	ResultTypeInputRequired = "input_required"
)

// IsSupportedVersion reports whether v is one of SupportedVersions.
func IsSupportedVersion(v string) bool { return slices.Contains(SupportedVersions, v) }

// NegotiateVersion returns the version a server answers to a client that asked for requested:
// the same version when supported, else LatestVersion (mcp-notes §1.2).
func NegotiateVersion(requested string) string {
	if IsSupportedVersion(requested) {
		return requested
	}
	return LatestVersion
}

// MCP method names.
const (
	MethodInitialize             = "initialize"
	MethodPing                   = "ping"
	MethodDiscover               = "server/discover"
	MethodSetLogLevel            = "logging/setLevel"
	MethodListTools              = "tools/list"
	MethodCallTool               = "tools/call"
	MethodListResources          = "resources/list"
	MethodListResourceTemplates  = "resources/templates/list"
	MethodReadResource           = "resources/read"
	MethodSubscribe              = "resources/subscribe"
	MethodUnsubscribe            = "resources/unsubscribe"
	MethodListPrompts            = "prompts/list"
	MethodGetPrompt              = "prompts/get"
	MethodComplete               = "completion/complete"
	MethodListen                 = "subscriptions/listen" // 2026-07-28: a stream of change notifications
	MethodCreateMessage          = "sampling/createMessage"
	MethodElicit                 = "elicitation/create"
	MethodListRoots              = "roots/list"
	NotificationInitialized      = "notifications/initialized"
	NotificationCancelled        = "notifications/cancelled"
	NotificationProgress         = "notifications/progress"
	NotificationMessage          = "notifications/message"
	NotificationToolsChanged     = "notifications/tools/list_changed"
	NotificationResourcesChanged = "notifications/resources/list_changed"
	NotificationPromptsChanged   = "notifications/prompts/list_changed"
	NotificationResourceUpdated  = "notifications/resources/updated"
	NotificationRootsChanged     = "notifications/roots/list_changed"
	// NotificationElicitationComplete ends a URL-mode elicitation (2025-11-25).
	NotificationElicitationComplete = "notifications/elicitation/complete"
)

// LogLevels are the RFC 5424 levels of logging/setLevel, least severe first.
var LogLevels = []string{"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"}

// Implementation is the clientInfo / serverInfo of initialize.
type Implementation struct {
	Name    string `json:"name"`
	Title   string `json:"title,omitempty"`
	Version string `json:"version"`
}

// InitializeParams is what the gateway reads of, or sends in, an initialize request. The
// capabilities stay raw so that nothing a client declared is lost.
type InitializeParams struct {
	ProtocolVersion string          `json:"protocolVersion"`
	Capabilities    json.RawMessage `json:"capabilities"`
	ClientInfo      *Implementation `json:"clientInfo,omitempty"`
}

// InitializeResult is the result of initialize.
type InitializeResult struct {
	ProtocolVersion string             `json:"protocolVersion"`
	Capabilities    ServerCapabilities `json:"capabilities"`
	ServerInfo      Implementation     `json:"serverInfo"`
	Instructions    string             `json:"instructions,omitempty"`
}

// ServerCapabilities are the server capabilities the gateway reads or declares. A nil member is
// not declared.
type ServerCapabilities struct {
	Completions  *struct{}                  `json:"completions,omitempty"`
	Logging      *struct{}                  `json:"logging,omitempty"`
	Prompts      *ListChangedCap            `json:"prompts,omitempty"`
	Resources    *ResourcesCap              `json:"resources,omitempty"`
	Tools        *ListChangedCap            `json:"tools,omitempty"`
	Tasks        json.RawMessage            `json:"tasks,omitempty"`
	Experimental map[string]json.RawMessage `json:"experimental,omitempty"`
}

// ListChangedCap is the shape of the tools and prompts capabilities.
type ListChangedCap struct {
	ListChanged bool `json:"listChanged,omitempty"`
}

// ResourcesCap is the shape of the resources capability.
type ResourcesCap struct {
	Subscribe   bool `json:"subscribe,omitempty"`
	ListChanged bool `json:"listChanged,omitempty"`
}
