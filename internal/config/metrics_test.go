package config_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/manifold-mcp/manifold/internal/config"
)

func TestParseMetrics(t *testing.T) {
	for _, tt := range []struct {
		name        string
		yaml        string
		want        config.Metrics
		on, onAdmin bool
	}{
		{"absent", "upstreams: []\n", config.Metrics{}, false, false},
		{"on the admin listener", "admin:\n  listen: 127.0.0.1:8081\n  api_keys: [{name: ops, hash: \"" + testAdminHash + "\"}]\nmetrics:\n  enabled: true\nupstreams: []\n",
			config.Metrics{Enabled: true, File: "gw.yaml", Line: 5}, true, true},
		{"a listener of its own", "metrics: {listen: 127.0.0.1:9464}\nupstreams: []\n",
			config.Metrics{Listen: "127.0.0.1:9464", File: "gw.yaml", Line: 1}, true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := config.Parse("gw.yaml", []byte(tt.yaml), env(nil))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, c.Metrics); diff != "" {
				t.Errorf("metrics (-want +got):\n%s", diff)
			}
			if c.Metrics.On() != tt.on || c.Metrics.OnAdmin() != tt.onAdmin {
				t.Errorf("On() = %v, OnAdmin() = %v; want %v, %v", c.Metrics.On(), c.Metrics.OnAdmin(), tt.on, tt.onAdmin)
			}
		})
	}
}

func TestMetricsProblems(t *testing.T) {
	p := func(line int, field, msg string) config.Problem {
		return config.Problem{File: "gw.yaml", Line: line, Field: field, Message: msg}
	}
	for _, tt := range []struct {
		name string
		yaml string
		want []config.Problem
	}{
		{"enabled without an admin listener", "metrics:\n  enabled: true\nupstreams: []\n", []config.Problem{
			p(2, "metrics.enabled", "serves /metrics on the admin listener, and there is none: set admin.listen, or metrics.listen for a listener of its own, like 127.0.0.1:9464"),
		}},
		{"not host:port", "metrics:\n  listen: 9464\nupstreams: []\n", []config.Problem{
			p(2, "metrics.listen", `"9464" is not host:port: write e.g. 127.0.0.1:8080, or :8080 for all interfaces`),
		}},
		{"the MCP listener's address", "listen: 127.0.0.1:8080\nmetrics:\n  listen: 127.0.0.1:8080\nupstreams: []\n", []config.Problem{
			p(3, "metrics.listen", "is the MCP listener's address too: metrics need a port of their own, like 127.0.0.1:9464"),
		}},
		{"the admin listener's address", "admin:\n  listen: 127.0.0.1:8081\n  api_keys: [{name: ops, hash: \"" + testAdminHash + "\"}]\nmetrics:\n  listen: 127.0.0.1:8081\nupstreams: []\n", []config.Problem{
			p(5, "metrics.listen", "is the admin listener's address too: leave metrics.listen out and set metrics.enabled to serve /metrics there"),
		}},
		{"not a boolean", "metrics:\n  enabled: sometimes\nupstreams: []\n", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.Parse("gw.yaml", []byte(tt.yaml), env(nil))
			if tt.want == nil {
				// A value of the wrong type is the decoder's problem, named by its line.
				var cerr *config.Error
				if !errors.As(err, &cerr) || len(cerr.Problems) != 1 || cerr.Problems[0].Line != 2 || cerr.Problems[0].Field != "metrics.enabled" {
					t.Errorf("Parse = %v, want one problem at gw.yaml:2 metrics.enabled", err)
				}
				return
			}
			checkProblems(t, "Parse", err, tt.want)
		})
	}
}
