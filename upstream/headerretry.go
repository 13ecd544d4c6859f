package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/manifold-mcp/manifold/internal/protocol"
)

// A 2026-07-28 tools/call over HTTP mirrors the tool's x-mcp-header arguments in Mcp-Param-*
// headers, computed from the tool's input schema as the gateway last fetched it. When the
// upstream changed those annotations since (and announced nothing, or its announcement is
// still on its way), it refuses the call with -32020 before running it. SEP-2243 asks a
// client to refetch tools/list and retry (mcp-2026-notes §1.5); the gateway does so once.

// refusedHeaders reports whether err is a -32020 (header mismatch) that a 2026-07-28 upstream
// over HTTP answered: the only connection whose requests carry headers computed from the
// catalog.
func (cn *connection) refusedHeaders(err error) bool {
	if cn.modernVersion == "" {
		return false
	}
	if _, overHTTP := cn.conn.(modernConn); !overHTTP {
		return false
	}
	var rpcErr *protocol.Error
	return errors.As(err, &rpcErr) && rpcErr.Code == protocol.CodeHeaderMismatch
}

// callWithFreshTools answers a tools/call that the upstream refused with -32020 (refused):
// it refetches the tool list, publishes it, and sends the call once more, whose Mcp-Param-*
// headers are then computed from the tool's current schema. A second -32020 fails the call
// with ErrHeaderMismatch, the upstream's own message kept for the log.
func (cn *connection) callWithFreshTools(ctx context.Context, params json.RawMessage, refused error) (json.RawMessage, error) {
	name := cn.client.spec.Name
	tool, _, _ := protocol.StringMember(params, "name")
	cn.client.logger.Info("the upstream refused a call's headers (-32020); fetching its tool list again, then sending the call once more",
		"tool", tool, "error", refused.Error())
	if err := cn.refreshToolsShared(ctx); err != nil {
		return nil, fmt.Errorf("%s %s %s: the upstream refused its headers (%v), and fetching its tool list again failed: %w",
			name, protocol.MethodCallTool, tool, refused, err)
	}
	result, err := cn.call(ctx, protocol.MethodCallTool, params, cn.client.spec.RequestTimeout)
	if cn.refusedHeaders(err) {
		return nil, fmt.Errorf("%s %s %s: %w (the upstream said: %v)", name, protocol.MethodCallTool, tool, ErrHeaderMismatch, err)
	}
	return result, err
}

// sharedRefresh is one refetch of the tool list, awaited by every call that needs it.
type sharedRefresh struct {
	// done is closed when the refetch ended; err is set before.
	done chan struct{}
	err  error
	// waiters counts the calls that waited on it, for the log. Guarded by connection.mu.
	waiters int
}

// refreshToolsShared refetches the tool list and publishes it in the client's catalog, and
// OnChange has reported it when it returns. Calls refused together share one refetch (conventions 15):
// it runs under the connection's lifetime, so that a caller that gives up does not cancel it
// for the others; each caller waits at most until its own ctx ends.
func (cn *connection) refreshToolsShared(ctx context.Context) error {
	cn.mu.Lock()
	if cn.err != nil {
		cn.mu.Unlock()
		return fmt.Errorf("%s: %w", cn.client.spec.Name, ErrUnavailable)
	}
	r := cn.toolsRefresh
	if r == nil {
		r = &sharedRefresh{done: make(chan struct{})}
		cn.toolsRefresh = r
		// Counted while cn.err is nil, under mu: close has not begun waiting for workers.
		cn.workers.Add(1)
		go cn.refreshTools(r)
	}
	r.waiters++
	cn.mu.Unlock()
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// refreshTools runs the shared refetch r to its end.
func (cn *connection) refreshTools(r *sharedRefresh) {
	defer cn.workers.Done()
	ctx, cancel := context.WithTimeout(cn.ctx, cn.client.spec.RequestTimeout)
	defer cancel()
	items, err := cn.fetch(ctx, Tools)
	if err == nil {
		for {
			old := cn.client.catalog.Load()
			if cn.client.catalog.CompareAndSwap(old, old.withList(Tools, items)) {
				break
			}
		}
	}
	if err == nil {
		// Before the waiters retry: what the gateway serves follows the list they retry with.
		cn.client.changed()
	}
	cn.mu.Lock()
	cn.toolsRefresh = nil
	waiters := r.waiters
	cn.mu.Unlock()
	cn.client.logger.Debug("fetched the tool list again for calls whose headers were refused", "calls", waiters, "error", errString(err))
	r.err = err
	close(r.done)
}
