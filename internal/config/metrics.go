package config

import (
	"go.yaml.in/yaml/v3"
)

// Metrics configures the gateway's Prometheus metrics (key `metrics`): GET /metrics, on the
// admin listener or on a listener of its own. Absent, there are none, and recording them
// costs nothing.
type Metrics struct {
	// Enabled serves GET /metrics on the admin listener (key `enabled`), which needs
	// admin.listen; it asks for an admin credential there as the admin API does (an admin API
	// key as a bearer token, or a token with an admin role).
	Enabled bool
	// Listen is a TCP address, host:port, that serves GET /metrics alone (key `listen`),
	// instead of the admin listener; it turns metrics on. It asks for no credential: keep it
	// on loopback or a network only the scraper reaches, since the metrics name the
	// upstreams and show the traffic. Empty: metrics are on the admin listener, if enabled.
	Listen string

	// File and Line say where the `metrics` key is, for messages at run time.
	File string
	Line int
}

// On reports whether the gateway records and serves metrics.
func (m *Metrics) On() bool { return m.Enabled || m.Listen != "" }

// OnAdmin reports whether GET /metrics is served on the admin listener.
func (m *Metrics) OnAdmin() bool { return m.Enabled && m.Listen == "" }

// metricsSettings decodes the top-level `metrics` mapping.
func metricsSettings(m *Metrics) decodeFunc {
	return func(d *decoder, n *yaml.Node, path string) bool {
		m.File, m.Line = d.file, n.Line
		return d.mapping(n, path, "a mapping with enabled: and/or listen:", []field{
			{key: "enabled", decode: boolean(&m.Enabled)},
			{key: "listen", decode: str(&m.Listen)},
		})
	}
}

// metrics checks the metrics settings.
func (v *validator) metrics(c *Config, w where) {
	m := &c.Metrics
	if m.Listen == "" {
		if m.Enabled && !c.Admin.Enabled() {
			v.check(w, "metrics.enabled", "serves /metrics on the admin listener, and there is none: set admin.listen, or metrics.listen for a listener of its own, like 127.0.0.1:9464")
		}
		return
	}
	switch msg := checkListen(m.Listen); {
	case msg != "":
		v.check(w, "metrics.listen", msg)
	case m.Listen == c.Listen && !hasAnyPort(m.Listen):
		v.check(w, "metrics.listen", "is the MCP listener's address too: metrics need a port of their own, like 127.0.0.1:9464")
	case m.Listen == c.Admin.Listen && !hasAnyPort(m.Listen):
		v.check(w, "metrics.listen", "is the admin listener's address too: leave metrics.listen out and set metrics.enabled to serve /metrics there")
	}
}

// hasAnyPort reports whether a listen address asks for any free port (":0"), which two
// listeners may both ask for.
func hasAnyPort(listen string) bool {
	return len(listen) >= 2 && listen[len(listen)-2:] == ":0"
}
