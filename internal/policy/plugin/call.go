package plugin

import (
	"encoding/json"
	"errors"

	"github.com/manifold-mcp/manifold/policy/pluginpb"
)

// Call is one client request the plugins are asked about.
type Call struct {
	// Principal is who is calling; its zero value is an anonymous caller.
	Principal Principal
	// SessionFingerprint is the short hash that names the client's session in logs and audit
	// (never the session ID itself); empty outside a session.
	SessionFingerprint string
	// Upstream is the configured name of the upstream server the call goes to.
	Upstream string
	// Method is the MCP method of the client's request: tools/call, prompts/get,
	// resources/read, completion/complete, or, in Inspect only, tasks/result (the result of
	// a tool call run as a task; Target then names the tool).
	Method string
	// Target is the upstream's own name of what is called: for tools/call its tool name, for
	// prompts/get its prompt name, for resources/read the URI, for completion/complete the
	// prompt's name or the resource template's URI whose argument is completed.
	Target string
	// Exposed is the name the client sees and used.
	Exposed string
	// Arguments are the call's arguments: a JSON object, or empty when the client sent none.
	Arguments json.RawMessage
	// Annotations are the target's annotations as the upstream declared them, or empty.
	Annotations json.RawMessage
}

// Principal is the authenticated caller, as plugins see it.
type Principal struct {
	Issuer  string
	Subject string
	Email   string
	Groups  []string
	Roles   []string
	Scopes  []string
}

// toWire returns c as the contract's message. The message shares c's slices: it is only read.
func (c *Call) toWire() *pluginpb.Call {
	return &pluginpb.Call{
		Principal: &pluginpb.Principal{
			Issuer:  c.Principal.Issuer,
			Subject: c.Principal.Subject,
			Email:   c.Principal.Email,
			Groups:  c.Principal.Groups,
			Roles:   c.Principal.Roles,
			Scopes:  c.Principal.Scopes,
		},
		Session:         &pluginpb.Session{Fingerprint: c.SessionFingerprint},
		Upstream:        c.Upstream,
		Method:          c.Method,
		Target:          c.Target,
		Exposed:         c.Exposed,
		ArgumentsJson:   c.Arguments,
		AnnotationsJson: c.Annotations,
	}
}

// Effect is what a plugin decided, or what the plugins decided together. The zero Effect is
// not valid.
type Effect int

const (
	// Allow lets the call go on.
	Allow Effect = iota + 1
	// Deny refuses the call.
	Deny
	// RequireApproval lets the call go on only once a person approves it.
	RequireApproval
	// Rewrite lets the call go on with new arguments (in a Result only: an Outcome's Effect
	// is never Rewrite, its Arguments say it).
	Rewrite
)

// String returns "allow", "deny", "require_approval", "rewrite", or "invalid".
func (e Effect) String() string {
	switch e {
	case Allow:
		return "allow"
	case Deny:
		return "deny"
	case RequireApproval:
		return "require_approval"
	case Rewrite:
		return "rewrite"
	}
	return "invalid"
}

// Outcome is what the plugins decided about one call, together.
type Outcome struct {
	// Effect is Allow, Deny or RequireApproval.
	Effect Effect
	// Reason is for the client: on Deny, the denying plugin's reason (or a sentence saying
	// that the plugin is unavailable); on RequireApproval, the reasons of the plugins that
	// asked for approval, joined by "; ". Empty on Allow.
	Reason string
	// Arguments are the arguments to forward when a plugin rewrote them (the last rewrite);
	// nil when none did.
	Arguments json.RawMessage
	// Results are the answers of the plugins that were asked, in order, for the audit trail.
	Results []Result
}

// Result is one plugin's part in an Outcome, or in an Inspect.
type Result struct {
	// Plugin is the plugin's Spec.Name.
	Plugin string
	// Effect is what the plugin decided: in Inspect, Rewrite when it changed the result and
	// Allow when not. When the plugin failed (Err is set), Effect is Deny if it fails closed,
	// and Allow if it fails open (it was skipped).
	Effect Effect
	// Reason is the plugin's reason, or for a failed plugin that fails closed the sentence
	// shown to the client instead of Err.
	Reason string
	// Err, when not nil, is why the plugin gave no usable answer: a *PluginError, for logs and
	// audit only (it may hold internals that clients must not see).
	Err error
}

// isJSONObject reports whether b is one JSON object, as arguments and results must be.
func isJSONObject(b []byte) bool {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '{':
			return json.Valid(b)
		}
		return false
	}
	return false
}

// errNotJSONObject is the cause of a PluginError for a rewrite that is not a JSON object.
var errNotJSONObject = errors.New("the plugin's JSON is not an object")
