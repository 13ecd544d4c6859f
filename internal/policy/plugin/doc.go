// Package plugin runs Manifold's policy plugins and asks them about calls: it is the host side
// of the contract in policy/pluginpb, whose plugin side is plugin/sdk.
//
// Each plugin is a separate executable, started by [Start] through hashicorp/go-plugin (gRPC
// only) after its SHA-256 checksum is verified, and configured with its own JSON. A plugin
// that crashes or stops answering never takes the gateway down: its calls fail (the call is
// denied, or the plugin skipped when its Spec says FailOpen) while the Host restarts it with
// exponential backoff and configures it again.
//
//	h, err := plugin.Start(ctx, specs, &plugin.Options{Logger: logger})
//	if err != nil { ... } // names the plugin: missing binary, wrong checksum, Configure failed
//	defer h.Close()
//
//	out, err := h.Decide(ctx, call) // the plugins in order; the first deny wins
//	if err != nil { ... }           // ctx ended
//	switch out.Effect {
//	case plugin.Deny: // refuse, showing out.Reason
//	case plugin.RequireApproval: // ask a person (out.Reason), then forward
//	}
//	// forward with out.Arguments when a plugin rewrote them; record out.Results in the audit
//
//	result, results, err := h.Inspect(ctx, call, result) // the plugins that inspect, in order,
//	                                                      // for call.Method's result
//
// go-plugin's types stay inside this package; nothing here depends on the gateway's config.
package plugin
