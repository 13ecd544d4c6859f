// Package modern is the request vocabulary of MCP 2026-07-28, the stateless revision: which
// era an HTTP request belongs to, the checks a modern request passes before dispatch, the
// SEP-2243 standard headers (Mcp-Method, Mcp-Name, Mcp-Param-*) in both directions, and the
// members every modern result carries (resultType, ttlMs, cacheScope).
//
// It does no I/O and keeps no state; every function is safe for concurrent use. A front end
// classifies each POST, validates the modern ones, and answers a refusal with the status and
// JSON-RPC error it carries:
//
//	if modern.Classify(r.Header.Get(modern.HeaderProtocolVersion), sid != "", req.Method, req.Params) == modern.Modern {
//		view, err := modern.Validate(r.Header, req.Method, req.Params, toolParams)
//		var refusal *modern.Failure
//		if errors.As(err, &refusal) {
//			// answer refusal.Err with HTTP refusal.Status
//		}
//		// serve the request with view.Version, view.Capabilities, ...
//	}
//
// Params handed to this package must be valid JSON with no member given twice
// ([protocol.DuplicateMember]): the checks read the first of a duplicated member, as the
// gateway's raw readers do.
package modern
