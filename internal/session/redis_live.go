package session

import (
	"context"
	"encoding/json"

	"github.com/redis/go-redis/v9"
)

// The vocabulary of the bus between replicas (package replicabus carries it) that this
// package writes too: the event log publishes its appends and takeovers on a session's
// channel. And what a replica reads of sessions it knows by digest only.

// Digest is how the shared store names a session: its keys, the channels of the bus and the
// messages on it carry the digest, never the id itself, so that reading Redis is not enough
// to take a session over.
func Digest(id string) string { return sessionHash(id) }

// Kinds of bus messages the store itself writes.
const (
	// BusEvents carries events a stream's producer appended to its event log, published on
	// the stream's session channel in the same round trip (RedisEventLog), for a replica
	// where the stream's client resumed it.
	BusEvents = "events"
	// BusReplicaGone is broadcast by the replica that found another's lease run out.
	BusReplicaGone = "gone"
	// BusStreamTaken tells the replicas following a session that replica Replica took its
	// stream Stream over from the one that stopped producing it (RedisEventLog.Claim).
	BusStreamTaken = "taken"
)

// BusMessage is one message between replicas. Kinds other than those above are the
// gateway's; the bus carries them as they are.
type BusMessage struct {
	Kind string `json:"k"`
	// From is the sending replica.
	From string `json:"f,omitempty"`
	// Session is the digest of the session the message is about, if any.
	Session string `json:"s,omitempty"`
	// SessionID is the session's id when this replica knows it (it followed the session's
	// channel, or has read its record); filled in on receipt, never sent.
	SessionID string `json:"-"`
	// Stream and Events, Complete: a stream's events (BusEvents), or the stream a message is
	// for.
	Stream   string          `json:"st,omitempty"`
	Events   []LoggedEvent   `json:"e,omitempty"`
	Complete bool            `json:"c,omitempty"`
	Requests json.RawMessage `json:"rq,omitempty"`
	// Replica names a replica the message is about (BusReplicaGone).
	Replica string `json:"r,omitempty"`
	// Data is the message's payload: a JSON-RPC message, an id.
	Data json.RawMessage `json:"d,omitempty"`
	// Text is a short string argument (a URI, an upstream's name).
	Text string `json:"t,omitempty"`
}

// Post is a message for PublishAll: to Replica, or to the followers of session Digest, or,
// when both are empty, to every replica.
type Post struct {
	Replica string
	Digest  string
	Msg     *BusMessage
}

// SessionChannel is the pub/sub channel of session digest under keyPrefix: the replicas that
// hold one of its streams follow it.
func SessionChannel(keyPrefix, digest string) string {
	return keyPrefix + ":{" + digest + "}:live"
}

func (s *redisConn) sessionChannel(digest string) string {
	return SessionChannel(s.opts.KeyPrefix, digest)
}

// IDOf returns the id of session digest if this store created or read it, else "".
func (s *RedisStore) IDOf(digest string) string { return s.idOf(digest) }

// eventsMessage is what the event log publishes with an append.
func eventsMessage(digest, stream string, events []LoggedEvent, complete bool, requests json.RawMessage) ([]byte, error) {
	return json.Marshal(&BusMessage{Kind: BusEvents, Session: digest, Stream: stream, Events: events, Complete: complete, Requests: requests})
}

// GetByDigest reads the record of session digest, for a replica that takes over what
// another owned and may never have seen the session's id: its ID is empty.
func (s *RedisStore) GetByDigest(ctx context.Context, digest string) (*Record, error) {
	rec, _, _, err := s.read(ctx, digest, "")
	return rec, err
}

// Existing reports, for each digest, whether its session still exists: one round trip.
func (s *RedisStore) Existing(ctx context.Context, digests []string) ([]bool, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	pipe := s.client.Pipeline()
	cmds := make([]*redis.IntCmd, len(digests))
	for i, d := range digests {
		cmds[i] = pipe.Exists(ctx, s.keysOf(d).rec)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, opError(ctx, "exists", err)
	}
	out := make([]bool, len(digests))
	for i, c := range cmds {
		out[i] = c.Val() == 1
	}
	return out, nil
}

// Sealer seals what crosses Redis between replicas (seal.Sealer): Seal encrypts and
// authenticates plaintext bound to ad; Open gives it back when sealed was sealed with one of
// its keys and the same ad, and fails otherwise. Safe for concurrent use.
type Sealer interface {
	Seal(plaintext, ad []byte) []byte
	Open(sealed, ad []byte) ([]byte, error)
}

// SealFor returns the form of message data published on channel: sealed by s, bound to the
// channel, so that a message cannot be moved to another; data itself when s is nil.
func SealFor(s Sealer, channel string, data []byte) []byte {
	if s == nil {
		return data
	}
	return s.Seal(data, []byte(channel))
}
