package session

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// ErrUndecodable is returned by a RedisStore for a stored record it cannot read: written by a
// newer version of Manifold, or not a record at all (garbage, tampered with). It wraps
// ErrNotFound, so that callers that only know ErrNotFound answer as for an unknown session.
var ErrUndecodable = fmt.Errorf("stored record not decodable: %w", ErrNotFound)

// The wire forms of what a RedisStore writes. Each value is JSON with a schema version "v";
// a reader accepts the versions it knows (1 up to wireVersion) and nothing else. No value
// holds a session id: records name their session by its hash ("s"), and an upstream key
// that contains the session id (the connection key of an isolated upstream) is stored in
// pieces split at the id ("up").
const wireVersion = 1

// sessionHash is what a RedisStore stores instead of a session id: the first 16 bytes of its
// SHA-256, in hex. Its first 12 hex digits are the session's fingerprint in logs.
func sessionHash(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:16])
}

// taskHash names a task id in global index keys, so that a key's length does not depend on
// what a client sent.
func taskHash(id string) string {
	sum := sha256.Sum256([]byte("task\x00" + id))
	return hex.EncodeToString(sum[:16])
}

// upstreamHash names an upstream's request or task in global index keys. The upstream key
// may contain a session id, so it is hashed; both parts are length-prefixed, so that no two
// pairs share an input.
func upstreamHash(upstream, upstreamID string) string {
	h := sha256.New()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(upstream)))
	h.Write(n[:])
	h.Write([]byte(upstream))
	h.Write([]byte(upstreamID))
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// recordWire is the stored form of a Record (version 1): the record less its id, its
// connections (kept beside it, by SetConnection) and its ClientAddr (kept beside it, in
// ownerWire). A replica of an earlier build reads records during a rolling upgrade, and
// refuses one with a member it does not know (decodeWire): this form must stay as that
// build wrote it. What a later build adds goes beside the record, or in a new version.
type recordWire struct {
	V       int    `json:"v"`
	Session string `json:"s"`

	ProtocolVersion string `json:"protocolVersion,omitempty"`
	// ClientInfo and ClientCapabilities are kept as strings, byte for byte as the client sent
	// them.
	ClientInfo         string    `json:"clientInfo,omitempty"`
	ClientCapabilities string    `json:"clientCapabilities,omitempty"`
	Initialized        bool      `json:"initialized,omitempty"`
	LogLevel           string    `json:"logLevel,omitempty"`
	Principal          Principal `json:"principal,omitzero"`
	Profile            string    `json:"profile,omitempty"`
	Subscriptions      []string  `json:"subscriptions,omitempty"`
	CreatedAt          time.Time `json:"createdAt"`
}

func encodeRecord(rec *Record, hash string) (string, error) {
	return marshalWire(recordWire{
		V:                  wireVersion,
		Session:            hash,
		ProtocolVersion:    rec.ProtocolVersion,
		ClientInfo:         string(rec.ClientInfo),
		ClientCapabilities: string(rec.ClientCapabilities),
		Initialized:        rec.Initialized,
		LogLevel:           rec.LogLevel,
		Principal:          rec.Principal,
		Profile:            rec.Profile,
		Subscriptions:      rec.Subscriptions,
		CreatedAt:          rec.CreatedAt,
	})
}

// decodeRecord reads a stored record of the session id, whose hash is hash.
func decodeRecord(data, id, hash string) (*Record, error) {
	var w recordWire
	if err := decodeWire(data, &w, hash, &w.V, &w.Session); err != nil {
		return nil, err
	}
	return &Record{
		ID:                 id,
		ProtocolVersion:    w.ProtocolVersion,
		ClientInfo:         rawOrNil(w.ClientInfo),
		ClientCapabilities: rawOrNil(w.ClientCapabilities),
		Initialized:        w.Initialized,
		LogLevel:           w.LogLevel,
		Principal:          w.Principal,
		Profile:            w.Profile,
		Subscriptions:      w.Subscriptions,
		CreatedAt:          w.CreatedAt,
	}, nil
}

// ownerWire is the stored form of what the per-owner caps need of a session (version 1),
// kept beside its record (sessionKeys.owner) with the record's ttl: the owner set it was
// admitted to, or would be on a store with that cap, by the SHA-256 of its owner
// (RedisStore.ownerKey), and the ClientAddr it was created with. It is written by Create
// only when the session has one of them, and never changed: Update must not change either.
//
// Unlike a record, it is read without refusing members it does not know, so that a later
// build may add some within version 1 without this one losing the owner; a value that is
// not one, or names another session or a malformed owner, is refused.
type ownerWire struct {
	V          int    `json:"v"`
	Session    string `json:"s"`
	Owner      string `json:"owner,omitempty"`
	ClientAddr string `json:"clientAddr,omitempty"`
}

// encodeOwner returns the stored form of the owner (hex SHA-256, "" for none) and client
// address of session hash; "" when it has neither, for nothing is stored then.
func encodeOwner(hash, owner, clientAddr string) string {
	if owner == "" && clientAddr == "" {
		return ""
	}
	v, _ := marshalWire(ownerWire{V: wireVersion, Session: hash, Owner: owner, ClientAddr: clientAddr}) // strings only: cannot fail
	return v
}

// decodeOwner reads the stored owner of session hash: "" (no such key) is a session without
// an owner or address.
func decodeOwner(data, hash string) (ownerWire, error) {
	var w ownerWire
	if data == "" {
		return w, nil
	}
	if err := json.Unmarshal([]byte(data), &w); err != nil {
		return ownerWire{}, fmt.Errorf("%w: %v", ErrUndecodable, err)
	}
	switch {
	case w.V < 1 || w.V > wireVersion:
		return ownerWire{}, fmt.Errorf("%w: schema version %d, this build reads 1 to %d", ErrUndecodable, w.V, wireVersion)
	case w.Session != hash:
		return ownerWire{}, fmt.Errorf("%w: the owner names another session", ErrUndecodable)
	case w.Owner != "" && !isSHA256(w.Owner):
		return ownerWire{}, fmt.Errorf("%w: bad owner hash", ErrUndecodable)
	}
	return w, nil
}

// reverseWire is the stored form of a ReverseRecord (version 1).
type reverseWire struct {
	V          int       `json:"v"`
	Session    string    `json:"s"`
	ID         string    `json:"id"`
	Method     string    `json:"method,omitempty"`
	Upstream   []string  `json:"up"`
	UpstreamID string    `json:"upid"`
	UpHash     string    `json:"uh"`
	Sent       time.Time `json:"sent"`
}

func encodeReverse(r ReverseRecord, hash string) (string, reverseWire, error) {
	w := reverseWire{
		V:          wireVersion,
		Session:    hash,
		ID:         r.ID,
		Method:     r.Method,
		Upstream:   splitSession(r.Upstream, r.SessionID),
		UpstreamID: r.UpstreamID,
		UpHash:     upstreamHash(r.Upstream, r.UpstreamID),
		Sent:       r.Sent,
	}
	value, err := marshalWire(w)
	return value, w, err
}

// decodeReverse reads a stored reverse record of the session whose hash is hash; its id is
// sessionID, "" if unknown.
func decodeReverse(data, sessionID, hash string) (ReverseRecord, reverseWire, error) {
	var w reverseWire
	if err := decodeWire(data, &w, hash, &w.V, &w.Session); err != nil {
		return ReverseRecord{}, w, err
	}
	return ReverseRecord{
		SessionID:  sessionID,
		ID:         w.ID,
		Method:     w.Method,
		Upstream:   joinSession(w.Upstream, sessionID),
		UpstreamID: w.UpstreamID,
		Sent:       w.Sent,
	}, w, nil
}

// taskWire is the stored form of a TaskRecord (version 1). Besides the record it holds what
// the store's scripts need without parsing times: the hashes naming the task's index keys
// (th, uh), its creation as a fixed-width decimal of unix nanoseconds (cn), its member in the
// session's set of ttl deadlines if it has a ttl (dk), and once it ended its member in the
// session's set of ended tasks (ek).
type taskWire struct {
	V           int       `json:"v"`
	Session     string    `json:"s"`
	ID          string    `json:"id"`
	Upstream    []string  `json:"up"`
	UpstreamID  string    `json:"upid"`
	UpHash      string    `json:"uh"`
	IDHash      string    `json:"th"`
	Created     time.Time `json:"created"`
	CreatedKey  string    `json:"cn"`
	TTL         int64     `json:"ttl,omitempty"`
	DeadlineKey string    `json:"dk,omitempty"`
	Ended       time.Time `json:"ended,omitzero"`
	EndKey      string    `json:"ek,omitempty"`
}

func encodeTask(t TaskRecord, hash string) (string, taskWire, error) {
	w := taskWire{
		V:          wireVersion,
		Session:    hash,
		ID:         t.ID,
		Upstream:   splitSession(t.Upstream, t.SessionID),
		UpstreamID: t.UpstreamID,
		UpHash:     upstreamHash(t.Upstream, t.UpstreamID),
		IDHash:     taskHash(t.ID),
		Created:    t.Created,
		CreatedKey: nanoKey(t.Created),
		TTL:        int64(t.TTL),
		Ended:      t.Ended,
	}
	if t.TTL > 0 {
		w.DeadlineKey = nanoKey(t.Created.Add(t.TTL)) + "|" + t.ID
	}
	if !t.Ended.IsZero() {
		w.EndKey = endKey(t.Ended, t.Created, t.ID)
	}
	value, err := marshalWire(w)
	return value, w, err
}

// decodeTask reads a stored task record of the session whose hash is hash; its id is
// sessionID, "" if unknown.
func decodeTask(data, sessionID, hash string) (TaskRecord, taskWire, error) {
	var w taskWire
	if err := decodeWire(data, &w, hash, &w.V, &w.Session); err != nil {
		return TaskRecord{}, w, err
	}
	return TaskRecord{
		ID:         w.ID,
		SessionID:  sessionID,
		Upstream:   joinSession(w.Upstream, sessionID),
		UpstreamID: w.UpstreamID,
		Created:    w.Created,
		TTL:        time.Duration(w.TTL),
		Ended:      w.Ended,
	}, w, nil
}

// indexWire is the value of a global index key: the session (by hash) and the id, within
// it, of the record the key leads to.
type indexWire struct {
	V       int    `json:"v"`
	Session string `json:"s"`
	ID      string `json:"id"`
}

func encodeIndex(hash, id string) string {
	v, _ := marshalWire(indexWire{V: wireVersion, Session: hash, ID: id}) // strings only: cannot fail
	return v
}

func decodeIndex(data string) (indexWire, error) {
	var w indexWire
	if err := decodeWire(data, &w, "", &w.V, &w.Session); err != nil {
		return w, err
	}
	if !isHash(w.Session) {
		return w, fmt.Errorf("%w: bad session hash", ErrUndecodable)
	}
	return w, nil
}

// decodeWire decodes data into dst, a wire form whose version and session hash are at v and
// session: data must be one JSON object of a known version without unknown fields, and name
// the session hash (when hash is not "").
func decodeWire(data string, dst any, hash string, v *int, session *string) error {
	var head struct {
		V int `json:"v"`
	}
	if err := json.Unmarshal([]byte(data), &head); err != nil {
		return fmt.Errorf("%w: not a JSON object", ErrUndecodable)
	}
	if head.V < 1 || head.V > wireVersion {
		return fmt.Errorf("%w: schema version %d, this build reads 1 to %d", ErrUndecodable, head.V, wireVersion)
	}
	dec := json.NewDecoder(strings.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return fmt.Errorf("%w: %v", ErrUndecodable, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: data after the record", ErrUndecodable)
	}
	if hash != "" && *session != hash {
		return fmt.Errorf("%w: the record names another session", ErrUndecodable)
	}
	return nil
}

// splitSession returns s in pieces split at each occurrence of sessionID, so that s can be
// stored without the id and joined again by one who knows it.
func splitSession(s, sessionID string) []string {
	if sessionID == "" {
		return []string{s}
	}
	return strings.Split(s, sessionID)
}

// joinSession undoes splitSession. Without the session id a string that contained it cannot
// be rebuilt: the result is then "".
func joinSession(parts []string, sessionID string) string {
	if len(parts) > 1 && sessionID == "" {
		return ""
	}
	return strings.Join(parts, sessionID)
}

// nanoKey is t as a fixed-width decimal of unix nanoseconds, so that such keys sort as their
// times; times before 1970 sort as 1970.
func nanoKey(t time.Time) string {
	return fmt.Sprintf("%020d", max(t.UnixNano(), 0))
}

// endKey is a task's member in its session's set of ended tasks, which sorts (as bytes) by
// the time it ended, then its creation, then its id: the order in which tasks make room. Its
// fixed-width head is 42 bytes; the id follows.
func endKey(ended, created time.Time, id string) string {
	return nanoKey(ended) + "|" + nanoKey(created) + "|" + id
}

func isHash(s string) bool { return isLowerHex(s, 32) }

// isSHA256 reports whether s is a SHA-256 in lower-case hex: an owner's.
func isSHA256(s string) bool { return isLowerHex(s, 64) }

func isLowerHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil && strings.ToLower(s) == s
}

func rawOrNil(s string) json.RawMessage {
	if s == "" {
		return nil
	}
	return json.RawMessage(s)
}

// marshalWire encodes v, a wire form, keeping HTML characters as they are. It fails only
// for a time that JSON cannot hold (a year outside 0 to 9999).
func marshalWire(v any) (string, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", fmt.Errorf("encode: %w", err)
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}
