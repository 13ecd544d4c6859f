// Package sdk writes Manifold policy plugins in Go.
//
// A policy plugin is a separate program that the Manifold gateway starts and asks, for every
// call its own rules have not already refused, whether the call may go on: it can allow
// it, deny it with a reason shown to the client, ask for a person's approval, or rewrite its
// arguments. A plugin may also inspect (and rewrite) the upstream's result before the client
// sees it. Which requests a plugin is asked about is the gateway's configuration: the
// plugin's `methods:` (tools/call by default; prompts/get, resources/read,
// completion/complete), `upstreams:` and `tools:`; the same selection applies to Decide and
// Inspect. The gateway runs each plugin in its own process, so a plugin that crashes or leaks
// never takes the gateway down: it is restarted, and meanwhile its calls are denied (or it is
// skipped when configured to fail open).
//
// A plugin is a type with a Decide method, served from main:
//
//	type guard struct{ words []string }
//
//	func (g *guard) Configure(config json.RawMessage) error { // optional: Configurer
//		return json.Unmarshal(config, &g.words)
//	}
//
//	func (g *guard) Decide(ctx context.Context, call *sdk.Call) (*sdk.Decision, error) {
//		for _, w := range g.words {
//			if bytes.Contains(call.Arguments, []byte(w)) {
//				return sdk.Deny("the arguments mention " + w), nil
//			}
//		}
//		return sdk.Allow(), nil
//	}
//
//	func main() { sdk.Serve(&guard{}) }
//
// Build it with `go build`, and list the binary with its SHA-256 checksum (`sha256sum`) in the
// gateway's configuration; the gateway refuses to start a binary whose checksum differs. The
// binary is not meant to be run by hand: started by anything but the gateway, it says so and
// exits.
//
// # Calls
//
// The gateway calls Configure (when the plugin implements Configurer) once after each start of
// the process, before anything else; a plugin that crashed and was restarted is configured
// again. After that Decide, and Inspect for an Inspector, may be called concurrently from many
// goroutines, each with a context that ends at the gateway's deadline for the call: a plugin
// that blocks should watch ctx. An error returned by Decide or Inspect, or a panic in them,
// counts as a failure of the plugin for that call; it is logged by the gateway and never shown
// to the client.
//
// # Logging
//
// Log with [Logger]: its records reach the gateway's log at their level, attributed to the
// plugin. Anything else the plugin writes to standard output or standard error reaches it at
// debug level (a panic's trace at error level). Nothing may be written to standard output
// before [Serve] is called: the handshake with the gateway goes there.
//
// # Compatibility
//
// The wire contract is policy/pluginpb/policy.proto (protocol version [ProtocolVersion]), which
// only grows within a version: a plugin built with an older SDK keeps working with a newer
// gateway. Plugins in other languages implement that service with hashicorp/go-plugin's gRPC
// handshake and the magic cookie below.
package sdk

import (
	"context"
	"encoding/json"
)

// The go-plugin handshake that Manifold and its plugins agree on. The gateway starts a plugin
// with MagicCookieKey=MagicCookieValue in its environment; a plugin started without it (by
// hand, or by another program) exits. This is a safety check, not a security measure.
const (
	// ProtocolVersion is the version of the plugin protocol, policy/pluginpb's
	// manifold.policy.v1; it changes only when the gateway and its plugins can no longer talk.
	ProtocolVersion = 1
	// MagicCookieKey is the environment variable that carries MagicCookieValue.
	MagicCookieKey = "MANIFOLD_PLUGIN"
	// MagicCookieValue is the value the gateway sets MagicCookieKey to.
	MagicCookieValue = "policy-plugin-5b0e2c1d8f7a4e63"
)

// Plugin decides whether calls may go on. It is the one method every plugin implements.
type Plugin interface {
	// Decide answers for one call. It may be called concurrently; ctx ends when the gateway
	// stops waiting. A nil Decision, like an error, counts as a failure of the plugin.
	Decide(ctx context.Context, call *Call) (*Decision, error)
}

// Inspector is implemented by plugins that want to see, and may rewrite, the results of the
// calls they allowed. The SDK tells the gateway so when it configures the plugin; other
// plugins are never asked.
type Inspector interface {
	// Inspect returns the result to pass on instead of result, or result itself to pass it on
	// unchanged. result is the upstream's whole result of call.Method as JSON, whose shape
	// the method gives:
	//
	//   - tools/call and tasks/result (a tool call run as a task): a CallToolResult
	//     ("content", "structuredContent", "isError", "_meta");
	//   - resources/read: a ReadResourceResult ("contents", each with "uri" and "text" or
	//     "blob"); the URIs are the gateway's, as the client reads them;
	//   - prompts/get: a GetPromptResult ("description", "messages", each with "role" and one
	//     "content" block);
	//   - completion/complete: a CompleteResult ("completion" with "values").
	//
	// What Inspect returns must be an object of the same shape. A plugin is asked only about
	// the results of the methods its configuration's `methods:` names (a tasks/result with
	// tools/call). When several plugins inspect, each sees what the one before it returned.
	// Inspect may be called concurrently; call is the call as it was forwarded (after any
	// rewrite). An error withholds the result from the client unless the plugin fails open.
	Inspect(ctx context.Context, call *Call, result json.RawMessage) (json.RawMessage, error)
}

// Configurer is implemented by plugins that take configuration.
type Configurer interface {
	// Configure receives the plugin's `config:` from the gateway's configuration, as JSON:
	// null when none is set. It is called once after each start of the process, before any
	// Decide or Inspect. An error stops the plugin from starting, and the gateway says why.
	Configure(config json.RawMessage) error
}

// Call is one client request the gateway is about to forward. A plugin must not modify it;
// to change the arguments it returns [Rewrite].
type Call struct {
	// Principal is who is calling; its zero value is an anonymous caller.
	Principal Principal
	// Session identifies the client's session.
	Session Session
	// Upstream is the configured name of the upstream server the call goes to.
	Upstream string
	// Method is the MCP method of the client's request: "tools/call", "prompts/get",
	// "resources/read" or "completion/complete"; in Inspect also "tasks/result", the result
	// of a tool call that ran as a task (Target and Exposed then name the tool).
	Method string
	// Target is the upstream's own name of what is called: for tools/call, the tool name the
	// upstream knows; for prompts/get, the prompt's; for resources/read, the resource's URI;
	// for completion/complete, the prompt or resource template whose argument is completed
	// (a completion is decided on what it completes, as the gateway's policy rules do).
	Target string
	// Exposed is the name the client sees and used (namespaced, possibly renamed).
	Exposed string
	// Arguments are the call's arguments (tools/call, prompts/get) as the upstream would get
	// them at this point: as the client sent them, after any rewrite by the policy's path
	// matchers or by an earlier plugin; a JSON object, or empty when the client sent none or
	// the method has none. Only a tool call's
	// arguments can be rewritten; the gateway refuses a request of another method that a
	// plugin rewrites or asks approval for.
	Arguments json.RawMessage
	// Annotations are the target's annotations as the upstream declared them (for a tool, its
	// ToolAnnotations object, e.g. {"readOnlyHint":true}), or empty when it declared none.
	// They are hints from the upstream, not facts to trust.
	Annotations json.RawMessage
}

// Principal is the authenticated caller: an OIDC token's issuer and subject, or a named API
// key (Issuer "manifold:api-key", Subject the key's name). Issuer and Subject identify it; the
// other fields come from the token's claims or the API key's entry. All fields are empty for
// an anonymous caller (authentication off).
type Principal struct {
	Issuer  string
	Subject string
	Email   string
	Groups  []string
	Roles   []string
	// Scopes are the OAuth scopes granted to the caller's token.
	Scopes []string
}

// Session identifies the client's session without revealing it.
type Session struct {
	// Fingerprint is a short hash of the session ID: the same for every call of one session,
	// and the name the gateway's logs and audit give the session. It cannot be used to act in
	// the session. Empty for a call outside a session.
	Fingerprint string
}

// Effect is what a plugin decides about a call. The zero Effect is not valid.
type Effect int

// The effects, numbered as in policy.proto.
const (
	// EffectAllow lets the call go on, as far as this plugin is concerned.
	EffectAllow Effect = 1
	// EffectDeny refuses the call; no later plugin is asked.
	EffectDeny Effect = 2
	// EffectRequireApproval lets the call go on only once a person approves it; later
	// plugins are still asked.
	EffectRequireApproval Effect = 3
	// EffectRewrite lets the call go on with Decision.Arguments instead of its own; later
	// plugins see those.
	EffectRewrite Effect = 4
)

// String returns "allow", "deny", "require_approval", "rewrite", or "invalid".
func (e Effect) String() string {
	switch e {
	case EffectAllow:
		return "allow"
	case EffectDeny:
		return "deny"
	case EffectRequireApproval:
		return "require_approval"
	case EffectRewrite:
		return "rewrite"
	}
	return "invalid"
}

// Decision is a plugin's answer for one call. Build one with [Allow], [Deny],
// [RequireApproval] or [Rewrite].
type Decision struct {
	Effect Effect
	// Reason says why, in words meant for the client's user: it is shown on a deny and with
	// an approval request. It should say what the user can do, and hold nothing secret.
	Reason string
	// Arguments, for EffectRewrite, are the call's complete new arguments: a JSON object, not
	// a patch. Ignored for the other effects.
	Arguments json.RawMessage
}

// Allow lets the call go on.
func Allow() *Decision { return &Decision{Effect: EffectAllow} }

// Deny refuses the call. reason is shown to the client's user.
func Deny(reason string) *Decision { return &Decision{Effect: EffectDeny, Reason: reason} }

// RequireApproval lets the call go on only once a person approves it; reason is shown to
// whoever is asked.
func RequireApproval(reason string) *Decision {
	return &Decision{Effect: EffectRequireApproval, Reason: reason}
}

// Rewrite lets the call go on with args, a JSON object, as its complete new arguments.
func Rewrite(args json.RawMessage) *Decision {
	return &Decision{Effect: EffectRewrite, Arguments: args}
}
