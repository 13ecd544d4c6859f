// Package policy owns the decision for each client request (design.md, decision 7): which
// items a principal may see, and whether a request on one may go on.
//
// Rules are the `policy.rules` of the config, compiled once and then read by every request:
// the first rule whose match admits the request decides its effect (allow, deny, hide or
// approve), the policy's default when none does. Principal matchers are package principal's,
// shared with the rate limits (package limit).
//
//	rules, err := policy.Compile(&cfg.Policy, func(upstream string) bool { return trust[upstream] })
//	if err != nil { ... }
//	// Params that repeat a member are refused before (protocol.DuplicateMember): Decide
//	// refuses repeats only where its argument matchers read.
//	d := rules.Decide(policy.Input{
//		Principal: principal,
//		Upstream:  t.Upstream,
//		Kind:      t.Kind,
//		Name:      t.Original, // the upstream's own name: renames are presentation
//		Arguments: t.Arguments,
//	})
//	if d.Effect != config.EffectAllow && !d.DryRun { ... refuse, per the refusal table ... }
//	if d.Arguments != nil && !d.DryRun {
//		// The deciding rule's path matchers cleaned the arguments (d.Rewrites names it):
//		// the upstream gets them as that rule checked them.
//		t.Arguments = d.Arguments
//	}
//
//	// Lists: an item is listed unless hidden; a filtered catalog may be cached per ViewKey.
//	key := rules.ViewKey(principal)
//	if rules.Visible(policy.Input{Principal: principal, Upstream: u, Kind: pipeline.Tool, Name: name}) { ... }
//
//	// `gateway explain`: why a request got its decision.
//	steps, d := rules.Explain(in)
package policy
