package connect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/manifold-mcp/manifold/internal/seal"
)

// records keeps the Service's records in its Store, each sealed and bound to its key, so that
// a record moved to another key, or made by a gateway with other keys, does not open. It
// holds no state of its own and is safe for concurrent use; it neither opens nor closes the
// Store.
type records struct {
	store  Store
	sealer *seal.Sealer
	// logger is told of the records that do not open.
	logger *slog.Logger
}

// Keys of the Store's records.
func requestKey(id string) string     { return "request:" + id }
func flowKey(state string) string     { return "flow:" + state }
func clientKey(up, iss string) string { return "client:" + up + ":" + iss }

// put seals v's JSON, bound to key, and puts it in the Store.
func (rs *records) put(ctx context.Context, key string, v any, ttl time.Duration) error {
	return rs.putOwned(ctx, "", key, v, ttl)
}

// putOwned is put for a record counted against owner (if not "") when the Store bounds each
// owner's records (OwnedPutter), at most MaxLinksPerPrincipal.
func (rs *records) putOwned(ctx context.Context, owner, key string, v any, ttl time.Duration) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s record: %w", recordKind(key), err)
	}
	sealed := rs.sealer.Seal(b, []byte(key))
	if op, ok := rs.store.(OwnedPutter); ok && owner != "" {
		err = op.PutOwned(ctx, owner, key, sealed, ttl, MaxLinksPerPrincipal)
	} else {
		err = rs.store.Put(ctx, key, sealed, ttl)
	}
	if err != nil {
		return fmt.Errorf("keep %s record: %w", recordKind(key), err)
	}
	return nil
}

// get reads (take: takes) the record under key into v. A record that does not open is
// reported as ErrNotFound: it is not one this gateway made.
func (rs *records) get(ctx context.Context, key string, take bool, v any) error {
	get := rs.store.Get
	if take {
		get = rs.store.Take
	}
	sealed, err := get(ctx, key)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return ErrNotFound
		}
		return fmt.Errorf("read %s record: %w", recordKind(key), err)
	}
	b, err := rs.sealer.Open(sealed, []byte(key))
	if err != nil {
		rs.logger.Warn("a connect record does not open (another gateway's keys, or changed): treated as absent", "record", recordKind(key), "error", err)
		return ErrNotFound
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("decode %s record: %w", recordKind(key), err)
	}
	return nil
}

// recordKind is the kind of record under key, for messages: the part before the colon.
func recordKind(key string) string {
	kind, _, _ := strings.Cut(key, ":")
	return kind
}
