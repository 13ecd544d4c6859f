// Package check validates what deploy/ ships: it renders the Helm chart with Helm's own
// template engine, for the default values and for the replicated example, reads the plain
// Kubernetes manifests, and checks every object against its Kubernetes API type and against
// what the gateway needs (probes on the port the config listens on, the admin port kept out
// of the Service, a grace period that outlasts the drain, a config `gateway validate`
// accepts). It is a module of its own so that the gateway's module does not carry Helm's and
// Kubernetes' dependencies; its tests are all there is: cd deploy/check && go test ./...
package check
