package main

import "fmt"

// benchPolicy is the gateway-policy target's policy: a rule set like a platform team's, in
// which the load tool's anonymous echo call passes ten rules before the last allows it.
// Most fail early (another upstream or tool, a group the anonymous principal lacks); two are
// evaluated to the end on every call: echo-no-secrets runs its regular expression over the
// call's text argument ("hello-<worker>-<seq>", which it never matches), and read-only-tools
// reads echo's annotations (trusted, undeclared: readOnlyHint false, so no match). Both
// rate limits count every call, under one key (all sessions are the anonymous principal), at
// a rate the load never reaches: what is measured is the cost of counting, not refusals.
const benchPolicy = `policy:
  default: deny
  rules:
    - name: contractors-no-delete
      effect: hide
      match:
        principal: {groups: [contractors]}
        tools: ["delete_*"]
    - name: contractors-no-admin
      effect: hide
      match:
        principal: {groups: [contractors]}
        upstreams: ["admin*", "billing"]
    - name: interns-read-only
      effect: deny
      reason: interns may use read-only tools only
      match:
        principal: {groups: [interns]}
        annotations: {readOnlyHint: false}
    - name: no-system-paths
      effect: deny
      reason: paths under /etc are off limits
      match:
        tools: [read_file, write_file, "*_file"]
        arguments: [{pointer: /path, matches: "^/(etc|root|proc)/"}]
    - name: echo-no-secrets
      effect: deny
      reason: do not send credentials through echo
      match:
        upstreams: [echo]
        tools: [echo]
        arguments: [{pointer: /text, matches: "(?i)(password|secret|token|api[_-]?key)\\s*[=:]"}]
    - name: no-destructive-in-prod
      effect: approve
      match:
        upstreams: ["prod-*"]
        annotations: {destructiveHint: true}
    - name: shell-needs-a-login
      effect: deny
      match:
        principal: {anonymous: true}
        upstreams: [shell, "k8s-*"]
    - name: read-only-tools
      effect: allow
      match: {annotations: {readOnlyHint: true}}
    - name: eng-everything
      effect: allow
      match:
        principal: {groups: [eng, sre]}
        upstreams: [docs, "git*", "k8s-*"]
    - name: ci-keys
      effect: allow
      match:
        principal: {api_keys: ["ci-*"]}
        upstreams: ["ci*", "build*"]
    - name: echo-for-everyone
      effect: allow
      match: {upstreams: [echo]}
  rate_limits:
    - {key: principal, rate: 100000/s, burst: 100000}
    - {key: principal_tool, rate: 100000/s, burst: 100000}
`

// policyGateway starts a gateway over the stdio echo upstream, like gateway-stdio, with
// benchPolicy on the hot path and echo's annotations trusted. Authentication is off: the
// load tool's sessions are anonymous, on a loopback listener.
func (f *fleet) policyGateway(bin, echo string, floor []string) (target, error) {
	url, err := f.gateway(bin, "policy", benchPolicy, fmt.Sprintf("  - name: echo\n    prefix: \"\"\n    command: %q\n    trust_annotations: true\n", echo))
	if err != nil {
		return target{}, err
	}
	return target{name: "gateway-policy", url: url, floor: floor, versus: "gateway-stdio"}, nil
}
