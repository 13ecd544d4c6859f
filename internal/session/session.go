// Package session keeps the state of client sessions of the gateway's server face, behind a
// Store: a Record is plain data that any replica can load. Two stores implement it, with the
// same behaviour (package storetest runs one suite against both): MemoryStore, in this
// process, and RedisStore, shared by replicas. Beside a RedisStore, on its client, are types
// of their own for its other concerns: RedisRoutes, its routing tables and task records;
// RedisEndedWatch, which reports sessions ended through another replica or evicted;
// RedisEventLog, the events of resumable streams, which it announces with BusMessage values
// on a session's channel (SessionChannel) for the bus between replicas, package replicabus.
// A RedisStore may share its client (RedisOptions.Client, made by NewRedisClient) with other
// state; it lends it to no one.
//
//	store := session.NewMemoryStore(&session.MemoryOptions{MaxSessions: 1000, MaxPerPrincipal: 20})
//	// or: store, err := session.NewRedisStore(&session.RedisOptions{URL: "redis://127.0.0.1:6379/0", IdleTimeout: 30 * time.Minute})
//	rec, err := store.Create(ctx, session.Record{ProtocolVersion: "2025-11-25"})
//	rec, err = store.Get(ctx, rec.ID)                  // ErrNotFound once deleted or expired
//	err = store.Touch(ctx, rec.ID)                     // its client used it: expiry and eviction are put off
//	err = store.Keep(ctx, rec.ID)                      // its client listens: expiry is put off
//	expired, err := store.Expire(ctx, time.Now().Add(-30*time.Minute))
package session

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"time"
)

// ErrNotFound is returned for a session id that is unknown, deleted or expired.
var ErrNotFound = errors.New("session not found")

// ErrLimit is returned by Create when the store already holds its maximum of sessions.
var ErrLimit = errors.New("session limit reached")

// ErrOwnerLimit is returned by Create when the new session's owner already holds its maximum
// of sessions: its principal (MaxPerPrincipal of the store's options), or, for an anonymous
// session, its client address (MaxPerAnonymousAddr). It is not ErrLimit: the store as a
// whole has room.
var ErrOwnerLimit = errors.New("session limit of this principal or client address reached")

// Record is one client session as the store keeps it. It is plain data: it holds nothing that
// only one process could use. Records returned by a Store are shared: treat them as read-only
// and change a session through Store.Update.
type Record struct {
	// ID is the MCP-Session-Id: 32 random bytes, base64url, visible ASCII only.
	ID string `json:"id"`
	// ProtocolVersion is the version negotiated at initialize.
	ProtocolVersion string `json:"protocolVersion"`
	// ClientInfo and ClientCapabilities are what the client sent at initialize, raw.
	ClientInfo         json.RawMessage `json:"clientInfo,omitempty"`
	ClientCapabilities json.RawMessage `json:"clientCapabilities,omitempty"`
	// Initialized is set when the client sent notifications/initialized.
	Initialized bool `json:"initialized,omitempty"`
	// LogLevel is the level the client set with logging/setLevel; empty until it does.
	LogLevel string `json:"logLevel,omitempty"`
	// Principal is who the session belongs to; zero (anonymous) while authentication is off.
	// A session is bound to its principal: a request of another is refused.
	Principal Principal `json:"principal,omitzero"`
	// ClientAddr is the client's address (an IP, without port) as the gateway saw it at
	// initialize; empty if unknown. The stores compare it as given: an anonymous session
	// counts against its address's cap (MaxPerAnonymousAddr).
	//
	// A session counts against the principal or address it was created with: Update must not
	// change the principal's identity (Principal.Key) or ClientAddr.
	//
	// A Redis store keeps it beside the record (with the owner set the session counts in),
	// not in it, as it keeps Connections: a replica of the previous build reads the record
	// as it was. Get and Update return it from there, read in the same round trip as the
	// record; Update does not store a change to it. A session created by the previous build
	// has none.
	ClientAddr string `json:"clientAddr,omitempty"`
	// Profile is the virtual endpoint the session was initialized on, "" for /mcp: the
	// session lives there only, and sees that profile's catalog.
	Profile string `json:"profile,omitempty"`
	// Subscriptions are the resource URIs the client subscribed to, as it named them.
	Subscriptions []string `json:"subscriptions,omitempty"`
	// Connections name, by upstream, the replica that holds the session's own connection to
	// it (isolation: session), so that a call landing on another replica is run there. A
	// Redis store keeps them beside the record (SetConnection), not in it: a replica of an
	// earlier build reads the record as it was.
	Connections map[string]string `json:"connections,omitempty"`
	// CreatedAt is when initialize created the session.
	CreatedAt time.Time `json:"createdAt"`
}

// Principal is who makes requests: an OIDC token's issuer and subject, or a named API key
// (Issuer APIKeyIssuer, Subject the key's name). Issuer and Subject identify it; the rest is
// what policy reads of it, as the credential of the request at hand said. The zero Principal
// is anonymous (authentication off).
type Principal struct {
	Issuer  string `json:"iss,omitempty"`
	Subject string `json:"sub,omitempty"`
	// Email, Groups, Roles and Scopes come from the token's claims (or the API key's entry).
	Email  string   `json:"email,omitempty"`
	Groups []string `json:"groups,omitempty"`
	Roles  []string `json:"roles,omitempty"`
	Scopes []string `json:"scopes,omitempty"`
}

// APIKeyIssuer is the Issuer of a Principal authenticated by an API key.
const APIKeyIssuer = "manifold:api-key"

// LocalIssuer is the Issuer of the local user a stdio face serves (`gateway stdio`): the
// Subject is the name that face was given, the OS user's by default. No credential proves it:
// whoever can start the gateway's program is that user.
const LocalIssuer = "manifold:local"

// Anonymous reports whether p is the zero Principal.
func (p Principal) Anonymous() bool { return p.Issuer == "" && p.Subject == "" }

// Same reports whether p and q are the same principal: the same issuer and subject, whatever
// their claims say today.
func (p Principal) Same(q Principal) bool { return p.Issuer == q.Issuer && p.Subject == q.Subject }

// Key is p's identity as one string, for maps and store keys: "" when anonymous.
func (p Principal) Key() string {
	if p.Anonymous() {
		return ""
	}
	return p.Issuer + "\x00" + p.Subject
}

// HasScope reports whether p was granted scope.
func (p Principal) HasScope(scope string) bool {
	for _, s := range p.Scopes {
		if s == scope {
			return true
		}
	}
	return false
}

// String names the principal in logs and audit records: "anonymous", "apikey:NAME",
// "local:NAME", or subject@issuer.
func (p Principal) String() string {
	switch {
	case p.Anonymous():
		return "anonymous"
	case p.Issuer == APIKeyIssuer:
		return "apikey:" + p.Subject
	case p.Issuer == LocalIssuer:
		return "local:" + p.Subject
	}
	return p.Subject + "@" + p.Issuer
}

// Store keeps session records and their routing tables. Implementations are safe for
// concurrent use.
type Store interface {
	Routes
	Tasks
	// Create stores a new session with a fresh random ID (rec.ID is ignored) and returns it.
	// It fails with ErrLimit when the store is full, else with ErrOwnerLimit when the
	// session's principal (or, anonymous, its ClientAddr) holds its maximum of sessions.
	// A refused session takes no room. Deleted and expired sessions count for nothing.
	//
	// A store with an eviction threshold (the EvictIdle of its options) makes room when it is
	// full: it deletes the session whose client made no request for longest (Touch; Keep does
	// not count), if it made none for at least the threshold, and announces it to the
	// watchers of ended sessions (WatchEnded). It evicts none for a session its owner's cap
	// refuses (ErrOwnerLimit), and refuses with ErrLimit when no session is idle enough.
	Create(ctx context.Context, rec Record) (*Record, error)
	// Get returns the live session with that id, or ErrNotFound. Reading a session does not
	// mark it used: the gateway reads sessions on behalf of others (log fan-out, log levels).
	Get(ctx context.Context, id string) (*Record, error)
	// Touch marks the session used now by a request of its own client, which puts off its
	// idle expiry and its eviction (Create): the gateway calls it for each request of the
	// session's own client. An unknown id is not an error.
	Touch(ctx context.Context, id string) error
	// Keep puts off the session's idle expiry as Touch does, but not its eviction: it is not
	// a request of its client. The gateway calls it for a session whose client listens on
	// its stream without sending requests. An unknown id is not an error.
	Keep(ctx context.Context, id string) error
	// Update applies change to a copy of the session and stores the result, or ErrNotFound.
	Update(ctx context.Context, id string, change func(*Record)) (*Record, error)
	// Delete ends the session. Deleting an unknown session is not an error.
	Delete(ctx context.Context, id string) error
	// Expire deletes the sessions unused since before cutoff and returns their ids. It calls
	// nothing of its caller's while it holds the store: a session in use is kept by marking it
	// used (Touch) first.
	Expire(ctx context.Context, cutoff time.Time) ([]string, error)
	// List returns up to limit live sessions, oldest first, for operators (the admin API).
	List(ctx context.Context, limit int) ([]Listed, error)
}

// NewID returns a new session id: 32 bytes from crypto/rand, base64url without padding.
func NewID() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return base64.RawURLEncoding.EncodeToString(b[:])
}
