// Package admin serves the gateway's admin API and page: JSON over HTTP on a listener of its
// own, for operators. It shows the upstreams and their state, the catalog, the sessions, the
// calls held for approval, the pinned tool definitions and the grants users gave the gateway
// at upstreams, and it takes the operator's decisions on held calls and changed definitions,
// and revocations of grants.
//
// The package knows nothing of how the gateway keeps any of it: the gateway gives a Backend.
// Every request is authenticated by the gateway's Authorizer (an admin API key, or a token
// with an admin role), and every action is handed to the Backend with the admin who took it,
// for the audit trail.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/manifold-mcp/manifold/internal/grants"
)

// Errors a Backend returns (wrapped) for the answers they stand for.
var (
	// ErrNotFound: no such held call, pin or change (404).
	ErrNotFound = errors.New("not found")
	// ErrConflict: the decision came too late (the call was decided or timed out, the
	// definition changed again): look again (409).
	ErrConflict = errors.New("conflict")
	// ErrUnauthorized: no admin credential, or one that is not valid (401).
	ErrUnauthorized = errors.New("unauthorized")
	// ErrForbidden: a valid credential of someone who is not an admin, or an admin who may
	// not take this decision, such as approving a call of their own (403).
	ErrForbidden = errors.New("forbidden")
)

// Operator is who an admin request comes from.
type Operator struct {
	// Name names the operator in the audit trail and to other operators, like "apikey:ops"
	// or "sam@https://idp.example.com".
	Name string
	// Principal identifies the operator as the gateway identifies its clients' principals
	// (the issuer and subject of a token, or an API key's name), so that the operator's own
	// calls can be told from others' (separation of duties); "" when unknown.
	Principal string
}

// Decisions an operator posts.
const (
	Approve = "approve"
	Deny    = "deny"
	Accept  = "accept"
	Reject  = "reject"
)

// Upstream is one upstream server and its state.
type Upstream struct {
	Name      string `json:"name"`
	Transport string `json:"transport"`
	Isolation string `json:"isolation"`
	// State is the shared connection's: starting, ready, backoff, stopped.
	State string `json:"state"`
	// Error is the last connection error, if the upstream is not ready.
	Error string `json:"error,omitempty"`
	// Tools, Prompts, Resources count what the upstream lists now.
	Tools     int `json:"tools"`
	Prompts   int `json:"prompts"`
	Resources int `json:"resources"`
	// Withheld counts its tools withheld because their definition changed since pinned.
	Withheld int `json:"withheld"`
}

// ReplicaConfig is the configuration one gateway replica runs, as it last said.
type ReplicaConfig struct {
	// Replica names the replica; "" for a gateway without replicas.
	Replica string `json:"replica,omitempty"`
	// This marks the replica that answered.
	This bool `json:"this,omitempty"`
	// Version is config.Config.Version of what it runs.
	Version string `json:"version"`
	// Since is when it began to run that configuration.
	Since time.Time `json:"since"`
	// LastReload is when a reload was last asked of it (zero: never); LastError why that
	// reload was refused ("" when it applied), the old configuration still running.
	LastReload time.Time `json:"lastReload,omitzero"`
	LastError  string    `json:"lastError,omitempty"`
}

// ConfigStatus is the configuration every replica known runs.
type ConfigStatus struct {
	Replicas []ReplicaConfig `json:"replicas"`
	// Agree is true when they all run the same version.
	Agree bool `json:"agree"`
}

// Tool is one tool of the merged catalog, or one withheld from it.
type Tool struct {
	// Name is the name clients see; empty for a withheld tool.
	Name        string          `json:"name,omitempty"`
	Upstream    string          `json:"upstream"`
	Original    string          `json:"original"`
	Title       string          `json:"title,omitempty"`
	Description string          `json:"description,omitempty"`
	Annotations json.RawMessage `json:"annotations,omitempty"`
	// Withheld marks a tool clients do not see because its definition changed since it was
	// pinned and no operator accepted the change.
	Withheld bool `json:"withheld,omitempty"`
}

// Session is one client session.
type Session struct {
	// Fingerprint is the short hash the gateway's logs and audit name the session by; never
	// the session id, which is a bearer secret.
	Fingerprint     string    `json:"fingerprint"`
	Principal       string    `json:"principal"`
	Profile         string    `json:"profile,omitempty"`
	ProtocolVersion string    `json:"protocolVersion"`
	Client          string    `json:"client,omitempty"`
	Created         time.Time `json:"created"`
	// AgeSeconds is how long ago it was created.
	AgeSeconds float64 `json:"ageSeconds"`
}

// Approval is a tool call held for a person's decision.
type Approval struct {
	ID        string          `json:"id"`
	Session   string          `json:"session"`
	Principal string          `json:"principal"`
	Upstream  string          `json:"upstream"`
	Tool      string          `json:"tool"`
	Original  string          `json:"original"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// ArgumentsText is Arguments indented, as text: what the page shows, so that a number
	// too large for JavaScript is shown as the client sent it.
	ArgumentsText string          `json:"argumentsText,omitempty"`
	Annotations   json.RawMessage `json:"annotations,omitempty"`
	Rule          string          `json:"rule"`
	Held          time.Time       `json:"held"`
	Deadline      time.Time       `json:"deadline"`
	Decision      string          `json:"decision,omitempty"`
	Approver      string          `json:"approver,omitempty"`
}

// Pin is a pinned tool definition and the change seen since, if any.
type Pin struct {
	Upstream   string          `json:"upstream"`
	Tool       string          `json:"tool"`
	Hash       string          `json:"hash"`
	Definition json.RawMessage `json:"definition"`
	Pinned     time.Time       `json:"pinned"`
	// Missing is since when the upstream no longer lists the tool; zero while it does. The
	// pin is forgotten some time after (pins.forget_after).
	Missing time.Time `json:"missing,omitzero"`
	Change  *Change   `json:"change,omitempty"`
	// Withheld: clients do not see the tool until the change is accepted.
	Withheld bool `json:"withheld"`
}

// Change is a definition an upstream lists that differs from the pinned one.
type Change struct {
	Hash       string          `json:"hash"`
	Definition json.RawMessage `json:"definition"`
	Seen       time.Time       `json:"seen"`
	Rejected   bool            `json:"rejected,omitempty"`
	By         string          `json:"by,omitempty"`
	// Diff lists the changed members of the definition.
	Diff []FieldChange `json:"diff"`
}

// FieldChange is one member of a definition that changed.
type FieldChange struct {
	Field  string          `json:"field"`
	Before json.RawMessage `json:"before,omitempty"`
	After  json.RawMessage `json:"after,omitempty"`
}

// Backend is what the admin API shows and acts on: the gateway.
type Backend interface {
	Upstreams(ctx context.Context) []Upstream
	Catalog(ctx context.Context) []Tool
	Sessions(ctx context.Context) ([]Session, error)
	Approvals(ctx context.Context) ([]Approval, error)
	// Decide approves or denies a held call, as the operator by. It refuses with
	// ErrForbidden what by may not decide (an approval of a call of their own).
	Decide(ctx context.Context, id, decision string, by Operator) (Approval, error)
	Pins(ctx context.Context) ([]Pin, error)
	// Resolve accepts or rejects the change of hash of a pinned tool, as admin.
	Resolve(ctx context.Context, upstream, tool, hash, decision, admin string) (Pin, error)
	// Audit records an admin request: who, what (action and target) and how it ended.
	Audit(admin, action, target, outcome string, status int)
	// Config returns the configuration each replica runs.
	Config(ctx context.Context) (ConfigStatus, error)
	// Reload has every replica read its configuration files again and apply them; it
	// returns how it went here, the others reporting theirs as they apply (Config).
	Reload(ctx context.Context) (ConfigStatus, error)
	// Grants lists the grants users gave the gateway at upstreams (credentials.user_oauth),
	// never a token: a page from cursor ("" for the first), and the cursor of the next ("" at
	// the end).
	Grants(ctx context.Context, cursor string) ([]grants.GrantInfo, string, error)
	// RevokeGrant revokes a user's grant at an upstream: at its authorization server where
	// it supports revocation, and in the gateway. ErrNotFound when there is none.
	RevokeGrant(ctx context.Context, user grants.Principal, upstream string) error
}

// Authorizer tells who an admin request comes from, or why it is refused (ErrUnauthorized,
// ErrForbidden, wrapped with what to do). With ErrForbidden, the Operator names who was
// refused (a valid credential without an admin role), for the audit trail; with
// ErrUnauthorized it is zero.
type Authorizer interface {
	Admin(r *http.Request) (Operator, error)
}
