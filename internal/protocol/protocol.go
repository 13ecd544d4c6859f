// Package protocol is the wire vocabulary shared by Manifold's client face and its upstream
// connections: JSON-RPC 2.0 envelopes that keep params and results as raw JSON, request ids
// that keep their exact bytes, error codes, MCP method names, protocol versions and the few
// capability shapes the gateway reads.
//
// It does no I/O. A transport reads one framed message and calls [Decode]; it writes what
// [Encode] returns:
//
//	msg, err := protocol.Decode(line)
//	switch m := msg.(type) {
//	case *protocol.Request:      // m.ID, m.Method, m.Params
//	case *protocol.Notification: // m.Method, m.Params
//	case *protocol.Response:     // m.ID, m.Result or m.Error
//	}
package protocol
