package modern

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/manifold-mcp/manifold/internal/protocol"
)

// CacheScope says who may be served a cached result (2026-07-28 caching, SEP-2549).
type CacheScope string

const (
	// CachePublic results hold nothing of a user's: any client or shared cache may serve them
	// to anyone.
	CachePublic CacheScope = "public"
	// CachePrivate results may be reused only within the authorization context that fetched
	// them.
	CachePrivate CacheScope = "private"
)

// WithResultType returns result, a JSON object, with its resultType set to resultType
// (protocol.ResultTypeComplete for a final result) unless it already has one, which is kept:
// every modern result carries one. The other members keep their bytes and order.
func WithResultType(result json.RawMessage, resultType string) (json.RawMessage, error) {
	if _, ok, err := protocol.Member(result, "resultType"); err != nil {
		return nil, fmt.Errorf("set resultType: %w", err)
	} else if ok {
		return result, nil
	}
	out, err := protocol.SetMember(result, "resultType", protocol.AppendString(nil, resultType))
	if err != nil {
		return nil, fmt.Errorf("set resultType: %w", err)
	}
	return out, nil
}

// WithCacheHints returns result, a JSON object, with ttlMs and cacheScope set to the hints
// given, replacing any it had: the hints of a result the gateway serves are its own (a
// negative ttlMs is sent as 0). They belong on the complete results of server/discover, the
// four list methods and resources/read, never on an input_required one.
func WithCacheHints(result json.RawMessage, ttlMs int64, scope CacheScope) (json.RawMessage, error) {
	out, err := protocol.SetMember(result, "ttlMs", strconv.AppendInt(nil, max(ttlMs, 0), 10))
	if err == nil {
		out, err = protocol.SetMember(out, "cacheScope", protocol.AppendString(nil, string(scope)))
	}
	if err != nil {
		return nil, fmt.Errorf("set cache hints: %w", err)
	}
	return out, nil
}

// TTL returns the ttlMs of a result: 0 when it is absent, negative, or not an integer that
// fits in an int64 (a result from a server that gives no hint is stale at once).
func TTL(result json.RawMessage) int64 {
	raw, ok, err := protocol.Member(result, "ttlMs")
	if err != nil || !ok {
		return 0
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		return 0
	}
	return max(n, 0)
}

// MergeTTL returns the ttlMs of a result merged from parts: the shortest of their [TTL]s,
// so that the merged result is stale as soon as one of its parts is. No parts give 0.
func MergeTTL(parts ...json.RawMessage) int64 {
	if len(parts) == 0 {
		return 0
	}
	shortest := TTL(parts[0])
	for _, p := range parts[1:] {
		shortest = min(shortest, TTL(p))
	}
	return shortest
}
