package config_test

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/manifold-mcp/manifold/internal/config"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// env returns a lookup function over vars.
func env(vars map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
}

var loopbackOrigins = []string{
	"http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*",
	"https://localhost:*", "https://127.0.0.1:*", "https://[::1]:*",
}

// configUpstream returns u, an upstream read from the config file file,
// with the defaults of the fields that are never zero after Parse filled in
// where u leaves them zero; Transport defaults to stdio. AttributionWindow
// may be 0 after Parse; a test that wants 0 sets it after this.
func configUpstream(file string, u config.Upstream) config.Upstream {
	if u.Transport == "" {
		u.Transport = "stdio"
	}
	if u.InitializeTimeout == 0 {
		u.InitializeTimeout = 30 * time.Second
	}
	if u.MaxResponseBytes == 0 {
		u.MaxResponseBytes = 16 << 20
	}
	if u.Isolation == "" {
		u.Isolation = "shared"
	}
	if u.Pinning == "" {
		u.Pinning = "off"
	}
	if u.Protocol == "" {
		u.Protocol = "2025-11-25"
	}
	if u.InputBridge == "" {
		u.InputBridge = "park"
	}
	if u.IsolationIdleTimeout == 0 {
		u.IsolationIdleTimeout = 5 * time.Minute
	}
	if u.MaxConnections == 0 {
		u.MaxConnections = 100
	}
	if u.AttributionWindow == 0 {
		u.AttributionWindow = 2 * time.Second
	}
	if u.File == "" {
		u.File = file
	}
	return u
}

// withDefaults returns a Config holding the defaults, the given upstreams
// (see configUpstream) and File "gw.yaml".
func withDefaults(ups ...config.Upstream) *config.Config {
	for i := range ups {
		ups[i] = configUpstream("gw.yaml", ups[i])
	}
	return &config.Config{
		File:                   "gw.yaml",
		Listen:                 "127.0.0.1:8080",
		Separator:              "__",
		LogLevel:               "info",
		LogFormat:              "text",
		Tracing:                config.Tracing{SampleRatio: 1, ServiceName: "manifold"},
		AllowedOrigins:         loopbackOrigins,
		MaxBodyBytes:           4194304,
		BodyReadTimeout:        30 * time.Second,
		StreamAfter:            time.Second,
		StreamRetention:        time.Minute,
		DrainTimeout:           10 * time.Second,
		FirstListWait:          5 * time.Second,
		HTTPIdleTimeout:        2 * time.Minute,
		MaxSessions:            1000,
		SessionIdleTimeout:     30 * time.Minute,
		MaxBatchEntries:        64,
		MaxCallsPerSession:     64,
		MaxCallsPerPrincipal:   256,
		MaxListensPerPrincipal: 16,
		MaxCalls:               4096,
		PageSize:               100,
		Upstreams:              ups,
		Audit:                  config.Audit{Sink: "off", Buffer: 4096},
		SessionStore:           config.SessionStore{Type: "memory", KeyPrefix: "manifold", DialTimeout: 2 * time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second},
		Auth:                   config.Auth{Resource: "http://127.0.0.1:8080/mcp", MaxSessionsPerPrincipal: 64, MaxSessionsPerAddress: 125},
		Policy:                 config.Policy{Default: "allow", SharedLimitFailure: "open", Approval: config.Approval{Timeout: 2 * time.Minute, By: "auto"}},

		MaxConnectionsPerAddress: 1000,
		SessionEvictIdle:         5 * time.Minute,

		StreamBudgetBytes:   64 << 20,
		EventLogBudgetBytes: 256 << 20,
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		env  map[string]string
		want *config.Config
	}{
		{
			name: "no upstreams",
			yaml: "upstreams: []\n",
			want: withDefaults([]config.Upstream{}...),
		},
		{
			name: "upstreams with no value",
			yaml: "upstreams:\n",
			want: withDefaults(),
		},
		{
			name: "every field",
			yaml: `
listen: ":9000"
public_url: https://mcp.example.com/
auth:
  allow_unauthenticated: true
  max_sessions_per_principal: 8
  max_sessions_per_address: 9
separator: "."
log_level: debug
allowed_origins: ["https://app.example.com", "http://localhost:3000"]
max_body_bytes: 1024
body_read_timeout: 5s
http_idle_timeout: 90s
drain_timeout: 30s
max_sessions: 5
session_idle_timeout: 1h30m
max_batch_entries: 8
max_calls_per_session: 3
max_calls_per_principal: 7
max_calls: 100
page_size: 1000
upstreams:
  - name: gh
    command: npx
    args: [-y, server]
    env: {TOKEN: abc, EMPTY: ""}
    inherit_env: [AWS_PROFILE, "AWS_*", _X1]
    dir: /tmp
    transport: stdio
    protocol: auto
    input_bridge: refuse
    prefix: github
    request_timeout: 5s
    initialize_timeout: 10s
    max_response_bytes: 1024
    isolation: session
    isolation_idle_timeout: 2m
    max_connections: 7
    attribution_window: 500ms
    enabled: false
    include_instructions: true
    broadcast_logs: true
audit:
  sink: file
  path: /var/log/manifold/audit.log
  buffer: 100
max_connections_per_address: 12
trusted_proxies: [10.0.0.0/8, 192.0.2.7, "2001:db8::/32"]
session_evict_idle: 2m
log_format: json
tracing:
  endpoint: http://127.0.0.1:4318
  sample_ratio: 0.25
  service_name: gw
  headers: {Authorization: Bearer x}
`,
			want: &config.Config{
				File:                   "gw.yaml",
				Listen:                 ":9000",
				Separator:              ".",
				LogLevel:               "debug",
				LogFormat:              "json",
				Tracing:                config.Tracing{Endpoint: "http://127.0.0.1:4318", SampleRatio: 0.25, ServiceName: "gw", Headers: map[string]string{"Authorization": "Bearer x"}},
				AllowedOrigins:         []string{"https://app.example.com", "http://localhost:3000"},
				MaxBodyBytes:           1024,
				BodyReadTimeout:        5 * time.Second,
				StreamAfter:            time.Second,
				StreamRetention:        time.Minute,
				DrainTimeout:           30 * time.Second,
				FirstListWait:          5 * time.Second,
				HTTPIdleTimeout:        90 * time.Second,
				MaxSessions:            5,
				SessionIdleTimeout:     90 * time.Minute,
				MaxBatchEntries:        8,
				MaxCallsPerSession:     3,
				MaxCallsPerPrincipal:   7,
				MaxListensPerPrincipal: 16,
				MaxCalls:               100,
				PageSize:               1000,
				Upstreams: []config.Upstream{{
					Name:                 "gh",
					Command:              "npx",
					Args:                 []string{"-y", "server"},
					Env:                  map[string]string{"TOKEN": "abc", "EMPTY": ""},
					InheritEnv:           []string{"AWS_PROFILE", "AWS_*", "_X1"},
					Dir:                  "/tmp",
					Transport:            "stdio",
					Protocol:             "auto",
					InputBridge:          "refuse",
					Prefix:               "github",
					RequestTimeout:       5 * time.Second,
					InitializeTimeout:    10 * time.Second,
					MaxResponseBytes:     1024,
					Isolation:            "session",
					IsolationIdleTimeout: 2 * time.Minute,
					MaxConnections:       7,
					Pinning:              "off",
					AttributionWindow:    500 * time.Millisecond,
					Enabled:              false,
					IncludeInstructions:  true,
					BroadcastLogs:        true,
					File:                 "gw.yaml",
					Line:                 23,
				}},
				Audit:        config.Audit{Sink: "file", Path: "/var/log/manifold/audit.log", Buffer: 100},
				SessionStore: config.SessionStore{Type: "memory", KeyPrefix: "manifold", DialTimeout: 2 * time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second},
				PublicURL:    "https://mcp.example.com/",
				Auth:         config.Auth{Resource: "https://mcp.example.com/mcp", AllowUnauthenticated: true, MaxSessionsPerPrincipal: 8, MaxSessionsPerAddress: 9},
				Policy:       config.Policy{Default: "allow", SharedLimitFailure: "open", Approval: config.Approval{Timeout: 2 * time.Minute, By: "auto"}},

				MaxConnectionsPerAddress: 12,
				TrustedProxies:           []string{"10.0.0.0/8", "192.0.2.7", "2001:db8::/32"},
				SessionEvictIdle:         2 * time.Minute,

				StreamBudgetBytes:   64 << 20,
				EventLogBudgetBytes: 256 << 20,
			},
		},
		{
			name: "prefix absent, empty and set",
			yaml: `upstreams:
  - {name: a, command: ./a}
  - {name: b, command: ./b, prefix: ""}
  - {name: c, command: ./c, prefix: see}
`,
			want: withDefaults(
				config.Upstream{Name: "a", Command: "./a", Prefix: "a", RequestTimeout: time.Minute, Enabled: true, Line: 2},
				config.Upstream{Name: "b", Command: "./b", Prefix: "", RequestTimeout: time.Minute, Enabled: true, Line: 3},
				config.Upstream{Name: "c", Command: "./c", Prefix: "see", RequestTimeout: time.Minute, Enabled: true, Line: 4},
			),
		},
		{
			name: "empty origin list",
			yaml: "allowed_origins: []\nupstreams: []\n",
			want: func() *config.Config {
				c := withDefaults([]config.Upstream{}...)
				c.AllowedOrigins = []string{}
				return c
			}(),
		},
		{
			name: "args and env with no value",
			yaml: "upstreams:\n  - name: a\n    command: ./a\n    args:\n    env:\n",
			want: withDefaults(config.Upstream{Name: "a", Command: "./a", Prefix: "a", RequestTimeout: time.Minute, Enabled: true, Line: 2}),
		},
		{
			name: "values are read by their text, not their quoting",
			yaml: `max_sessions: "7"
upstreams:
  - name: "0x1F"
    command: 123
    args: [no, 1.50, "true"]
    enabled: "TRUE"
`,
			want: func() *config.Config {
				c := withDefaults(config.Upstream{
					Name: "0x1F", Command: "123", Args: []string{"no", "1.50", "true"},
					Prefix: "0x1F", RequestTimeout: time.Minute, Enabled: true, Line: 3,
				})
				c.MaxSessions = 7
				c.Auth.MaxSessionsPerAddress = 1 // an eighth of max_sessions, at least 1
				c.MaxConnectionsPerAddress = 256 // max_sessions, at least 256
				return c
			}(),
		},
		{
			name: "aliases",
			yaml: `upstreams:
  - name: a
    command: ./a
    env: &common {REGION: eu}
  - name: b
    command: ./b
    env: *common
`,
			want: withDefaults(
				config.Upstream{Name: "a", Command: "./a", Env: map[string]string{"REGION": "eu"}, Prefix: "a", RequestTimeout: time.Minute, Enabled: true, Line: 2},
				config.Upstream{Name: "b", Command: "./b", Env: map[string]string{"REGION": "eu"}, Prefix: "b", RequestTimeout: time.Minute, Enabled: true, Line: 5},
			),
		},
		{
			name: "trailing document marker",
			yaml: "upstreams: []\n---\n",
			want: withDefaults([]config.Upstream{}...),
		},
		{
			name: "HTTP upstreams",
			yaml: `upstreams:
  - name: remote
    url: https://mcp.example.com/mcp
    headers:
      Authorization: Bearer ${TOKEN}
      X-Empty: ""
  - name: legacy
    url: http://127.0.0.1:9000/sse
    transport: sse
    initialize_timeout: 5s
    max_response_bytes: 1048576
  - name: either
    url: HTTPS://user@mcp.example.com:8443/mcp?x=1
    transport: auto
    headers:
  - name: local
    command: ./local
    transport: stdio
`,
			env: map[string]string{"TOKEN": "t0k"},
			want: withDefaults(
				config.Upstream{
					Name: "remote", URL: "https://mcp.example.com/mcp", Headers: map[string]string{"Authorization": "Bearer t0k", "X-Empty": ""},
					Transport: "streamable-http", Prefix: "remote", RequestTimeout: time.Minute, Enabled: true, Line: 2,
				},
				config.Upstream{
					Name: "legacy", URL: "http://127.0.0.1:9000/sse", Transport: "sse", InitializeTimeout: 5 * time.Second, MaxResponseBytes: 1 << 20,
					Prefix: "legacy", RequestTimeout: time.Minute, Enabled: true, Line: 7,
				},
				config.Upstream{
					Name: "either", URL: "HTTPS://user@mcp.example.com:8443/mcp?x=1", Transport: "auto",
					Prefix: "either", RequestTimeout: time.Minute, Enabled: true, Line: 12,
				},
				config.Upstream{Name: "local", Command: "./local", Prefix: "local", RequestTimeout: time.Minute, Enabled: true, Line: 16},
			),
		},
		{
			name: "inherit_env all, empty and with no value; attribution window off",
			yaml: `upstreams:
  - {name: a, command: ./a, inherit_env: all, attribution_window: 0s}
  - {name: b, command: ./b, inherit_env: []}
  - name: c
    command: ./c
    inherit_env:
`,
			want: func() *config.Config {
				c := withDefaults(
					config.Upstream{Name: "a", Command: "./a", InheritAllEnv: true, Prefix: "a", RequestTimeout: time.Minute, Enabled: true, Line: 2},
					config.Upstream{Name: "b", Command: "./b", InheritEnv: []string{}, Prefix: "b", RequestTimeout: time.Minute, Enabled: true, Line: 3},
					config.Upstream{Name: "c", Command: "./c", Prefix: "c", RequestTimeout: time.Minute, Enabled: true, Line: 4},
				)
				c.Upstreams[0].AttributionWindow = 0
				return c
			}(),
		},
		{
			name: "inherit_env from a variable",
			yaml: "upstreams:\n  - {name: a, command: ./a, inherit_env: \"${INHERIT:-all}\"}\n  - {name: b, command: ./b, inherit_env: [\"${PREFIX}_*\"]}\n",
			env:  map[string]string{"PREFIX": "AWS"},
			want: withDefaults(
				config.Upstream{Name: "a", Command: "./a", InheritAllEnv: true, Prefix: "a", RequestTimeout: time.Minute, Enabled: true, Line: 2},
				config.Upstream{Name: "b", Command: "./b", InheritEnv: []string{"AWS_*"}, Prefix: "b", RequestTimeout: time.Minute, Enabled: true, Line: 3},
			),
		},
		{
			name: "audit to stdout",
			yaml: "audit: {sink: stdout}\nupstreams: []\n",
			want: func() *config.Config {
				c := withDefaults([]config.Upstream{}...)
				c.Audit.Sink = "stdout"
				return c
			}(),
		},
		{
			name: "audit off, written out, is text and not a boolean",
			yaml: "audit:\n  sink: off\n  buffer: 1\nupstreams: []\n",
			want: func() *config.Config {
				c := withDefaults([]config.Upstream{}...)
				c.Audit.Buffer = 1
				return c
			}(),
		},
		{
			name: "audit keeps secret-named arguments only when told",
			yaml: "audit: {sink: stdout, arguments: true, redact_defaults: false, redact: [ssn]}\nupstreams: []\n",
			want: func() *config.Config {
				c := withDefaults([]config.Upstream{}...)
				c.Audit = config.Audit{Sink: "stdout", Arguments: true, SkipRedactDefaults: true, Redact: []string{"ssn"}, Buffer: 4096}
				return c
			}(),
		},
		{
			name: "audit file from a variable",
			yaml: "audit:\n  sink: ${AUDIT_SINK:-file}\n  path: ${AUDIT_LOG}\nupstreams: []\n",
			env:  map[string]string{"AUDIT_LOG": "audit.log"},
			want: func() *config.Config {
				c := withDefaults([]config.Upstream{}...)
				c.Audit = config.Audit{Sink: "file", Path: "audit.log", Buffer: 4096}
				return c
			}(),
		},
		{
			name: "IPv6 listen address and bracketed origin",
			yaml: "listen: \"[::1]:8080\"\nallowed_origins: [\"http://[::1]:*\"]\nupstreams: []\n",
			want: func() *config.Config {
				c := withDefaults([]config.Upstream{}...)
				c.Listen = "[::1]:8080"
				c.AllowedOrigins = []string{"http://[::1]:*"}
				c.Auth.Resource = "http://[::1]:8080/mcp"
				return c
			}(),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := config.Parse("gw.yaml", []byte(tt.yaml), env(tt.env))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Parse mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseProblems(t *testing.T) {
	// p builds the expected Problem in gw.yaml.
	p := func(line int, field, msg string) config.Problem {
		return config.Problem{File: "gw.yaml", Line: line, Field: field, Message: msg}
	}
	const (
		topKeys      = "unknown field (known: listen, separator, log_level, log_format, allowed_origins, max_body_bytes, body_read_timeout, http_idle_timeout, max_connections_per_address, trusted_proxies, drain_timeout, first_list_wait, modern_protocol, stream_after, stream_retention, stream_budget_bytes, event_log_budget_bytes, max_sessions, session_idle_timeout, session_evict_idle, max_batch_entries, max_calls_per_session, max_calls_per_principal, max_listens_per_principal, max_calls, page_size, roots, audit, tracing, session_store, keys, upstreams, overrides, profiles, public_url, auth, policy, admin, metrics, state_dir, pins, plugins)"
		upstreamKeys = "unknown field (known: name, command, args, env, inherit_env, dir, url, headers, credentials, trust_annotations, pinning, transport, protocol, input_bridge, prefix, request_timeout, initialize_timeout, max_response_bytes, isolation, isolation_idle_timeout, max_connections, attribution_window, enabled, include_instructions, broadcast_logs, tools, prompts, resources, resource_templates)"
		empty        = "empty config: add at least `upstreams: []` (the gateway can start with no upstreams)"
		noCommand    = "required: set command, the program to start for a stdio upstream, or url, the endpoint of an HTTP upstream"
	)
	tests := []struct {
		name string
		yaml string
		env  map[string]string
		want []config.Problem
	}{
		{"tracing values", "upstreams: []\nlog_format: yaml\ntracing:\n  endpoint: ftp://x\n  sample_ratio: 1.5\n  service_name: \"\"\n  headers: {\"a b\": c}\n", nil, []config.Problem{
			p(2, "log_format", `"yaml" is not a log format: use text or json`),
			p(4, "tracing.endpoint", `scheme "ftp" is not supported: want an absolute http or https URL, like https://mcp.example.com/mcp`),
			p(5, "tracing.sample_ratio", "must be from 0 to 1: the share of the traces the gateway starts that it records (default 1)"),
			p(6, "tracing.service_name", "must not be empty: it names the gateway in its traces (default manifold)"),
			p(7, "tracing.headers.a b", "\"a b\" is not a valid header name: use letters, digits and !#$%&'*+-.^_`|~"),
		}},
		{"tracing ratio not a number", "upstreams: []\ntracing:\n  endpoint: http://127.0.0.1:4318\n  sample_ratio: half\n", nil, []config.Problem{
			p(4, "tracing.sample_ratio", `want a number like 0.25, got "half"`),
		}},
		// The file as a whole.
		{"empty file", "", nil, []config.Problem{p(0, "", empty)}},
		{"only comments", "# nothing yet\n", nil, []config.Problem{p(0, "", empty)}},
		{"null document", "~\n", nil, []config.Problem{p(0, "", empty)}},
		{"protocol values", "upstreams:\n  - {name: a, command: x, protocol: \"2026\", input_bridge: wait}\n  - {name: b, url: \"http://127.0.0.1/mcp\", transport: sse, protocol: 2026-07-28}\n  - {name: c, url: \"http://127.0.0.1/mcp\", transport: sse, protocol: auto}\n", nil, []config.Problem{
			p(2, "upstreams[0].protocol", `"2026" is not a protocol: use 2025-11-25, 2026-07-28 or auto`),
			p(2, "upstreams[0].input_bridge", `"wait" is not an input bridge: use park or refuse`),
			p(3, "upstreams[1].protocol", `transport "sse" speaks protocol 2024-11-05 only: use protocol "2025-11-25" or "auto", or transport streamable-http`),
		}},
		{"not YAML", "upstreams:\n  - name: a\n   command: x\n", nil, []config.Problem{
			p(3, "", "not valid YAML: did not find expected '-' indicator (check indentation and quoting)"),
		}},
		{"bad indentation in a mapping", "upstreams:\n  - name: a\n    command: x\n    args: []\n   dir: /tmp\n", nil, []config.Problem{
			p(5, "", "not valid YAML: did not find expected '-' indicator (check indentation and quoting)"),
		}},
		{"missing colon", "upstreams: []\nlisten :80\n", nil, []config.Problem{
			p(2, "", "not valid YAML: could not find expected ':' (check indentation and quoting)"),
		}},
		{"unterminated quote", "upstreams:\n  - name: a\n    command: \"x\n    dir: /tmp\n", nil, []config.Problem{
			p(3, "", "not valid YAML: found unexpected end of stream (check indentation and quoting)"),
		}},
		{"unclosed flow list", "upstreams: [\n", nil, []config.Problem{
			p(1, "", "not valid YAML: did not find expected node content (check indentation and quoting)"),
		}},
		{"top level is a list", "- name: a\n", nil, []config.Problem{
			p(1, "", "want a mapping of settings such as `upstreams:`, got a list"),
		}},
		{"two documents", "upstreams: []\n---\nlisten: :80\n", nil, []config.Problem{
			p(2, "", "a second YAML document: put all settings in one document, without ---"),
		}},

		// Keys.
		{"unknown top-level key", "upstreams: []\nlisten_addr: :80\n", nil, []config.Problem{p(2, "listen_addr", topKeys)}},
		{"unknown upstream key", "upstreams:\n  - name: a\n    command: x\n    timout: 5s\n", nil, []config.Problem{
			p(4, "upstreams[0].timout", upstreamKeys),
		}},
		{"duplicate key", "upstreams: []\nlisten: 127.0.0.1:80\nlisten: 127.0.0.1:81\n", nil, []config.Problem{
			p(3, "listen", "duplicate key, first set on line 2: remove one of them"),
		}},
		{"duplicate env key", "upstreams:\n  - name: a\n    command: x\n    env:\n      A: 1\n      A: 2\n", nil, []config.Problem{
			p(6, "upstreams[0].env.A", "duplicate key, first set on line 5: remove one of them"),
		}},
		{"merge key", "base: &b\n  listen: :80\n<<: *b\nupstreams: []\n", nil, []config.Problem{
			p(1, "base", topKeys),
			p(3, "", "merge keys (<<) are not supported: write the settings out in full"),
		}},
		{"key that is a list", "[a]: 1\nupstreams: []\n", nil, []config.Problem{
			p(1, "", "a key must be a plain name, got a list"),
		}},

		// Types.
		{"string for an integer", "upstreams: []\nmax_sessions: lots\n", nil, []config.Problem{
			p(2, "max_sessions", `want a whole number like 1000, got "lots"`),
		}},
		{"integer out of range", "upstreams: []\nmax_body_bytes: 99999999999999999999\n", nil, []config.Problem{
			p(2, "max_body_bytes", `"99999999999999999999" is out of range`),
		}},
		{"duration without unit", "upstreams:\n  - name: a\n    command: x\n    request_timeout: 5\n", nil, []config.Problem{
			p(4, "upstreams[0].request_timeout", `want a duration with a unit, like 30s, 5m or 1h30m; got "5"`),
		}},
		{"scalar for a list", "upstreams:\n  - name: a\n    command: x\n    args: foo\n", nil, []config.Problem{
			p(4, "upstreams[0].args", `want a list of strings, like ["a", "b"]; got a single value`),
		}},
		{"list item that is a list", "upstreams:\n  - name: a\n    command: x\n    args: [a, [b]]\n", nil, []config.Problem{
			p(4, "upstreams[0].args[1]", "want a string, got a list"),
		}},
		{"list for env", "upstreams:\n  - name: a\n    command: x\n    env: [A=1]\n", nil, []config.Problem{
			p(4, "upstreams[0].env", "want a mapping of NAME: value, got a list"),
		}},
		{"mapping for upstreams", "upstreams:\n  a: {command: x}\n", nil, []config.Problem{
			p(2, "upstreams", "want a list of upstreams (lines starting with `- name:`), got a mapping"),
		}},
		{"upstream that is a string", "upstreams:\n  - github\n", nil, []config.Problem{
			p(2, "upstreams[0]", "want a mapping with at least `name:` and `command:` or `url:`, got a single value"),
		}},
		{"yes for a boolean", "upstreams:\n  - name: a\n    command: x\n    enabled: yes\n", nil, []config.Problem{
			p(4, "upstreams[0].enabled", `want true or false, got "yes"`),
		}},
		{"a type error is not also reported as missing", "upstreams:\n  - name: [a]\n    command: x\n", nil, []config.Problem{
			p(2, "upstreams[0].name", "want a string, got a list"),
		}},

		// No value.
		{"no value for a string", "upstreams: []\nlisten:\n", nil, []config.Problem{
			p(2, "listen", "no value: want a string (to leave the field out, remove the key)"),
		}},
		{"no value for prefix", "upstreams:\n  - name: a\n    command: x\n    prefix:\n", nil, []config.Problem{
			p(4, "upstreams[0].prefix", `no value: write prefix: "" to leave names unprefixed, or remove the key to use the name`),
		}},
		{"no value for allowed_origins", "upstreams: []\nallowed_origins:\n", nil, []config.Problem{
			p(2, "allowed_origins", "no value: write [] to accept only requests without an Origin header, or remove the key for the loopback defaults"),
		}},

		// Variables.
		{"unset variable", "upstreams:\n  - name: a\n    command: x\n    env: {TOKEN: \"Bearer ${TOKEN}\"}\n", nil, []config.Problem{
			p(4, "upstreams[0].env.TOKEN", "environment variable TOKEN is not set: set it, or give a default with ${TOKEN:-default}"),
		}},
		{"two unset variables", "upstreams: []\nlisten: ${HOST}:${PORT}\n", nil, []config.Problem{
			p(2, "listen", "environment variable HOST is not set: set it, or give a default with ${HOST:-default}"),
			p(2, "listen", "environment variable PORT is not set: set it, or give a default with ${PORT:-default}"),
		}},
		{"bad reference", "upstreams: []\nlisten: ${PORT-80}\n", nil, []config.Problem{
			p(2, "listen", `"${PORT-80}" is not a variable reference: write ${NAME} or ${NAME:-default}, or $$ for a literal $`),
		}},
		{"unterminated reference", "upstreams: []\nlisten: :${PORT\n", nil, []config.Problem{
			p(2, "listen", "unterminated ${: close it with }, or write $$ for a literal $"),
		}},
		{"nested default", "upstreams: []\nlisten: ${A:-${B}}\n", nil, []config.Problem{
			p(2, "listen", `"${A:-${B}": a default cannot refer to another variable`),
		}},
		{"variable expands to a bad number", "upstreams: []\nmax_sessions: ${MAX}\n", map[string]string{"MAX": "many"}, []config.Problem{
			p(2, "max_sessions", `want a whole number like 1000, got "many"`),
		}},

		// Top-level values.
		{"listen without port", "upstreams: []\nlisten: localhost\n", nil, []config.Problem{
			p(2, "listen", `"localhost" is not host:port: write e.g. 127.0.0.1:8080, or :8080 for all interfaces`),
		}},
		{"listen with named port", "upstreams: []\nlisten: localhost:http\n", nil, []config.Problem{
			p(2, "listen", `port "http" is not a number from 0 to 65535: write e.g. 127.0.0.1:8080`),
		}},
		{"separator", "upstreams: []\nseparator: \"/\"\n", nil, []config.Problem{
			p(2, "separator", `"/" is not a valid separator: use 1 to 4 characters from A-Z a-z 0-9 _ . -, like __`),
		}},
		{"separator too long", "upstreams: []\nseparator: _____\n", nil, []config.Problem{
			p(2, "separator", `"_____" is not a valid separator: use 1 to 4 characters from A-Z a-z 0-9 _ . -, like __`),
		}},
		{"empty separator", "upstreams: []\nseparator: \"\"\n", nil, []config.Problem{
			p(2, "separator", `"" is not a valid separator: use 1 to 4 characters from A-Z a-z 0-9 _ . -, like __`),
		}},
		{"log level", "upstreams: []\nlog_level: INFO\n", nil, []config.Problem{
			p(2, "log_level", `"INFO" is not a log level: use debug, info, warn or error`),
		}},
		{"origins", "upstreams: []\nallowed_origins:\n  - https://ok.example.com\n  - https://a.example.com/\n  - ftp://b.example.com\n  - https://*.example.com\n  - null\n", nil, []config.Problem{
			p(4, "allowed_origins[1]", `"https://a.example.com/" is not an origin: write scheme://host, scheme://host:port or scheme://host:* (any port), with scheme http or https and no path`),
			p(5, "allowed_origins[2]", `"ftp://b.example.com" is not an origin: write scheme://host, scheme://host:port or scheme://host:* (any port), with scheme http or https and no path`),
			p(6, "allowed_origins[3]", `"https://*.example.com" is not an origin: write scheme://host, scheme://host:port or scheme://host:* (any port), with scheme http or https and no path`),
			p(7, "allowed_origins[4]", "no value: want a string (to leave the field out, remove the key)"),
		}},
		{"numbers out of range", "upstreams: []\nmax_body_bytes: 0\nmax_sessions: -1\nsession_idle_timeout: 0s\npage_size: 1001\n", nil, []config.Problem{
			p(2, "max_body_bytes", "must be greater than 0: it is the largest request body accepted, in bytes (default 4194304, 4 MiB)"),
			p(3, "max_sessions", "must be greater than 0 (default 1000)"),
			p(4, "session_idle_timeout", "must be greater than 0, like 30m"),
			p(5, "page_size", "must be from 1 to 1000 (default 100)"),
		}},
		{"page size zero", "upstreams: []\npage_size: 0\n", nil, []config.Problem{
			p(2, "page_size", "must be from 1 to 1000 (default 100)"),
		}},
		{"limits of the HTTP face out of range", "upstreams: []\nbody_read_timeout: 0s\nhttp_idle_timeout: -1m\nmax_batch_entries: 0\nmax_calls_per_session: -1\nmax_calls: 0\ndrain_timeout: -1s\n", nil, []config.Problem{
			p(2, "body_read_timeout", "must be greater than 0, like 30s: it is how long a POST body may take to arrive in full"),
			p(3, "http_idle_timeout", "must be greater than 0, like 2m: an idle keep-alive connection is closed after it"),
			p(4, "max_batch_entries", "must be greater than 0: it is the most entries a JSON-RPC batch may hold (default 64)"),
			p(5, "max_calls_per_session", "must be greater than 0: it is the most requests one session may have in flight (default 64)"),
			p(6, "max_calls", "must be greater than 0: it is the most requests in flight in the whole gateway (default 4096)"),
			p(7, "drain_timeout", "must be 0 or more, like 10s: on SIGTERM, requests in flight get this long to finish"),
		}},
		{"connection cap and trusted proxies out of range", "upstreams: []\nmax_connections_per_address: 0\ntrusted_proxies: [10.0.0.0/8, 10.0.0.0/33, proxy.example.com]\n", nil, []config.Problem{
			p(2, "max_connections_per_address", "must be greater than 0, like 256: the most connections one client address may hold open at once"),
			p(3, "trusted_proxies[1]", `"10.0.0.0/33" is not a CIDR or an IP address: write the proxies' network, like 10.0.0.0/8, or one address, like 10.0.0.7`),
			p(3, "trusted_proxies[2]", `"proxy.example.com" is not a CIDR or an IP address: write the proxies' network, like 10.0.0.0/8, or one address, like 10.0.0.7`),
		}},
		{"stream budgets out of range", "upstreams: []\nstream_budget_bytes: 0\nevent_log_budget_bytes: -1\n", nil, []config.Problem{
			p(2, "stream_budget_bytes", "must be greater than 0, like 67108864 (64 MiB): the bytes a replica keeps of its streams for clients to resume"),
			p(3, "event_log_budget_bytes", "must be greater than 0, like 268435456 (256 MiB): the bytes the event logs keep in Redis for clients to resume"),
		}},
		{"limits of the HTTP face of the wrong type", "upstreams: []\nbody_read_timeout: 30\nmax_calls: many\n", nil, []config.Problem{
			p(2, "body_read_timeout", `want a duration with a unit, like 30s, 5m or 1h30m; got "30"`),
			p(3, "max_calls", `want a whole number like 1000, got "many"`),
		}},

		// Audit trail.
		{"audit file without a path", "upstreams: []\naudit:\n  sink: file\n", nil, []config.Problem{
			p(2, "audit.path", "required when sink is file: set the file to append audit records to, like /var/log/manifold/audit.log"),
		}},
		{"audit file with an empty path", "upstreams: []\naudit:\n  sink: file\n  path: \"${AUDIT_LOG:-}\"\n", nil, []config.Problem{
			p(4, "audit.path", "required when sink is file: set the file to append audit records to, like /var/log/manifold/audit.log"),
		}},
		{"audit path without the file sink", "upstreams: []\naudit:\n  path: audit.log\n", nil, []config.Problem{
			p(3, "audit.path", "only when sink is file, and it is off: set sink: file to write the audit trail to this file, or remove path"),
		}},
		{"audit path with stdout", "upstreams: []\naudit: {sink: stdout, path: audit.log}\n", nil, []config.Problem{
			p(2, "audit.path", "only when sink is file, and it is stdout: set sink: file to write the audit trail to this file, or remove path"),
		}},
		{"unknown audit sink", "upstreams: []\naudit:\n  sink: syslog\n  path: audit.log\n", nil, []config.Problem{
			p(3, "audit.sink", `"syslog" is not an audit sink: use off, stdout or file`),
		}},
		{"audit sink of the wrong type", "upstreams: []\naudit:\n  sink: [file]\n  path: audit.log\n", nil, []config.Problem{
			p(3, "audit.sink", "want a string, got a list"),
		}},
		{"audit buffer zero", "upstreams: []\naudit:\n  buffer: 0\n", nil, []config.Problem{
			p(3, "audit.buffer", "must be from 1 to 1048576: it is how many audit records may wait to be written (default 4096)"),
		}},
		{"audit buffer too large", "upstreams: []\naudit: {sink: stdout, buffer: 1048577}\n", nil, []config.Problem{
			p(2, "audit.buffer", "must be from 1 to 1048576: it is how many audit records may wait to be written (default 4096)"),
		}},
		{"audit buffer not a number", "upstreams: []\naudit:\n  buffer: 4k\n", nil, []config.Problem{
			p(3, "audit.buffer", `want a whole number like 1000, got "4k"`),
		}},
		{"unknown audit key", "upstreams: []\naudit:\n  sink: stdout\n  format: json\n", nil, []config.Problem{
			p(4, "audit.format", "unknown field (known: sink, path, buffer, arguments, redact, redact_defaults)"),
		}},
		{"audit not a mapping", "upstreams: []\naudit: stdout\n", nil, []config.Problem{
			p(2, "audit", "want a mapping with `sink:` off, stdout or file, got a single value"),
		}},
		{"audit with no value", "upstreams: []\naudit:\n", nil, []config.Problem{
			p(2, "audit", "want a mapping with `sink:` off, stdout or file, got no value"),
		}},

		// Upstreams.
		{"missing name and command", "upstreams:\n  - dir: /tmp\n", nil, []config.Problem{
			p(2, "upstreams[0].name", "required: a unique name for this upstream, like github (it is also the default prefix of its tools)"),
			p(2, "upstreams[0].command", noCommand),
		}},
		{"empty command", "upstreams:\n  - name: a\n    command: \"${CMD:-}\"\n", nil, []config.Problem{
			p(3, "upstreams[0].command", noCommand),
		}},
		{"invalid names", "upstreams:\n  - {name: \"a b\", command: x}\n  - {name: \"\", command: x}\n  - {name: " + strings.Repeat("n", 65) + ", command: x}\n", nil, []config.Problem{
			p(2, "upstreams[0].name", `"a b" is not a valid name: use 1 to 64 characters from A-Z a-z 0-9 _ -`),
			p(3, "upstreams[1].name", `"" is not a valid name: use 1 to 64 characters from A-Z a-z 0-9 _ -`),
			p(4, "upstreams[2].name", `"`+strings.Repeat("n", 65)+`" is not a valid name: use 1 to 64 characters from A-Z a-z 0-9 _ -`),
		}},
		{"duplicate names", "upstreams:\n  - {name: a, command: x}\n  - {name: b, command: x}\n  - {name: a, command: y, prefix: a2}\n", nil, []config.Problem{
			p(4, "upstreams[2].name", `"a" is also the name of upstreams[0] (line 2): names must be unique`),
		}},
		{"names are case-sensitive", "upstreams:\n  - {name: a, command: x}\n  - {name: A, command: x}\n", nil, nil},
		{"request timeout zero", "upstreams:\n  - {name: a, command: x, request_timeout: 0s}\n", nil, []config.Problem{
			p(2, "upstreams[0].request_timeout", "must be greater than 0, like 60s"),
		}},
		{"negative attribution window", "upstreams:\n  - {name: a, command: x, attribution_window: -1s}\n  - {name: b, command: x, attribution_window: 2}\n", nil, []config.Problem{
			p(2, "upstreams[0].attribution_window", "must not be negative: use a duration like 2s, or 0 to turn the window off"),
			p(3, "upstreams[1].attribution_window", `want a duration with a unit, like 30s, 5m or 1h30m; got "2"`),
		}},
		{"inherit_env names", `upstreams:
  - name: a
    command: x
    inherit_env:
      - OK_NAME
      - "AWS_*"
      - 1ABC
      - "A-B"
      - "*"
      - "A**"
      - "A*B"
      - ""
      - [NESTED]
`, nil, []config.Problem{
			p(7, "upstreams[0].inherit_env[2]", `"1ABC" is not a variable name: use A-Z a-z 0-9 _, not starting with a digit, and optionally a final * to match a prefix, like AWS_*`),
			p(8, "upstreams[0].inherit_env[3]", `"A-B" is not a variable name: use A-Z a-z 0-9 _, not starting with a digit, and optionally a final * to match a prefix, like AWS_*`),
			p(9, "upstreams[0].inherit_env[4]", `"*" is not a variable name: use A-Z a-z 0-9 _, not starting with a digit, and optionally a final * to match a prefix, like AWS_*`),
			p(10, "upstreams[0].inherit_env[5]", `"A**" is not a variable name: use A-Z a-z 0-9 _, not starting with a digit, and optionally a final * to match a prefix, like AWS_*`),
			p(11, "upstreams[0].inherit_env[6]", `"A*B" is not a variable name: use A-Z a-z 0-9 _, not starting with a digit, and optionally a final * to match a prefix, like AWS_*`),
			p(12, "upstreams[0].inherit_env[7]", `"" is not a variable name: use A-Z a-z 0-9 _, not starting with a digit, and optionally a final * to match a prefix, like AWS_*`),
			p(13, "upstreams[0].inherit_env[8]", "want a string, got a list"),
		}},
		{"inherit_env of the wrong shape", "upstreams:\n  - {name: a, command: x, inherit_env: ALL}\n  - {name: b, command: x, inherit_env: {A: b}}\n  - {name: c, command: x, inherit_env: AWS_PROFILE}\n", nil, []config.Problem{
			p(2, "upstreams[0].inherit_env", `want all, or a list of variable names like [AWS_PROFILE, "AWS_*"]; got "ALL" (a single name is written as a list: [NAME])`),
			p(3, "upstreams[1].inherit_env", `want all, or a list of variable names like [AWS_PROFILE, "AWS_*"]; got a mapping`),
			p(4, "upstreams[2].inherit_env", `want all, or a list of variable names like [AWS_PROFILE, "AWS_*"]; got "AWS_PROFILE" (a single name is written as a list: [NAME])`),
		}},
		{"inherit_env from an unset variable", "upstreams:\n  - {name: a, command: x, inherit_env: \"${INHERIT}\"}\n", nil, []config.Problem{
			p(2, "upstreams[0].inherit_env", "environment variable INHERIT is not set: set it, or give a default with ${INHERIT:-default}"),
		}},
		{"env name with =", "upstreams:\n  - name: a\n    command: x\n    env: {\"A=B\": c}\n", nil, []config.Problem{
			p(4, "upstreams[0].env.A=B", "not a valid environment variable name: it must be non-empty, without = or NUL"),
		}},
		{"invalid prefix", "upstreams:\n  - {name: a, command: x, prefix: \"a/b\"}\n  - {name: b, command: x, prefix: " + strings.Repeat("p", 33) + "}\n", nil, []config.Problem{
			p(2, "upstreams[0].prefix", `"a/b" is not a valid prefix: use up to 32 characters from A-Z a-z 0-9 _ . -, or "" for none`),
			p(3, "upstreams[1].prefix", `prefix "`+strings.Repeat("p", 33)+`" is longer than 32 characters: set a shorter prefix`),
		}},
		{"name too long to be the prefix", "upstreams:\n  - {name: " + strings.Repeat("n", 40) + ", command: x}\n", nil, []config.Problem{
			p(2, "upstreams[0].name", `prefix "`+strings.Repeat("n", 40)+`" (taken from the name) is longer than 32 characters: set a shorter prefix`),
		}},
		{"duplicate prefix, set and taken from a name", "upstreams:\n  - {name: github, command: x}\n  - {name: gh, command: y, prefix: github}\n", nil, []config.Problem{
			p(3, "upstreams[1].prefix", `prefix "github" is also the prefix of upstreams[0] "github" (line 2): give one of them a distinct prefix`),
		}},
		{"duplicate prefix taken from a name", "upstreams:\n  - {name: gh, command: y, prefix: github}\n  - {name: github, command: x}\n", nil, []config.Problem{
			p(3, "upstreams[1].name", `prefix "github" (taken from the name) is also the prefix of upstreams[0] "gh" (line 2): give one of them a distinct prefix`),
		}},
		{"two unprefixed", "upstreams:\n  - {name: a, command: x, prefix: \"\"}\n  - {name: b, command: x, enabled: false, prefix: \"\"}\n", nil, []config.Problem{
			p(3, "upstreams[1].prefix", `"" (unprefixed) is also the prefix of upstreams[0] "a" (line 2): at most one upstream can be unprefixed; give one of them a prefix`),
		}},
		{"prefix contains the separator", "upstreams:\n  - {name: my__server, command: x}\n  - {name: b, command: x, prefix: b_}\n", nil, []config.Problem{
			p(2, "upstreams[0].name", `prefix "my__server" (taken from the name) clashes with the separator "__": in "my__server__tool" the separator is found too early; choose another prefix or separator`),
			p(3, "upstreams[1].prefix", `prefix "b_" clashes with the separator "__": in "b___tool" the separator is found too early; choose another prefix or separator`),
		}},

		// HTTP upstreams.
		{"command and url", "upstreams:\n  - name: a\n    command: x\n    url: https://a.example.com/mcp\n", nil, []config.Problem{
			p(2, "upstreams[0]", "both command and url are set: keep command for a stdio upstream, or url for an HTTP one"),
		}},
		{"stdio transport with url", "upstreams:\n  - {name: a, url: \"https://a.example.com\", transport: stdio}\n", nil, []config.Problem{
			p(2, "upstreams[0].transport", `transport "stdio" needs command, and this upstream has url: use streamable-http, sse or auto, or remove transport`),
		}},
		{"HTTP transports with command", "upstreams:\n  - {name: a, command: x, transport: streamable-http}\n  - {name: b, command: x, transport: sse}\n  - {name: c, command: x, transport: auto}\n", nil, []config.Problem{
			p(2, "upstreams[0].transport", `transport "streamable-http" needs url, and this upstream has command: use stdio, or remove transport`),
			p(3, "upstreams[1].transport", `transport "sse" needs url, and this upstream has command: use stdio, or remove transport`),
			p(4, "upstreams[2].transport", `transport "auto" needs url, and this upstream has command: use stdio, or remove transport`),
		}},
		{"unknown transport", "upstreams:\n  - {name: a, url: \"https://a.example.com\", transport: http}\n  - {name: b, command: x, transport: \"\"}\n", nil, []config.Problem{
			p(2, "upstreams[0].transport", `"http" is not a transport: use stdio, streamable-http, sse or auto`),
			p(3, "upstreams[1].transport", `"" is not a transport: use stdio, streamable-http, sse or auto`),
		}},
		{"stdio fields with url", "upstreams:\n  - name: a\n    url: https://a.example.com\n    args: []\n    env: {A: b}\n    dir: /tmp\n    inherit_env: [A]\n  - {name: b, url: \"https://b.example.com\", inherit_env: all}\n", nil, []config.Problem{
			p(4, "upstreams[0].args", "only for a stdio upstream (with command): remove it from this HTTP upstream"),
			p(5, "upstreams[0].env", "only for a stdio upstream (with command): remove it from this HTTP upstream"),
			p(6, "upstreams[0].dir", "only for a stdio upstream (with command): remove it from this HTTP upstream"),
			p(7, "upstreams[0].inherit_env", "only for a stdio upstream (with command): remove it from this HTTP upstream"),
			p(8, "upstreams[1].inherit_env", "only for a stdio upstream (with command): remove it from this HTTP upstream"),
		}},
		{"headers with command", "upstreams:\n  - name: a\n    command: x\n    headers: {Authorization: secret}\n", nil, []config.Problem{
			p(4, "upstreams[0].headers", "headers are for HTTP upstreams (with url): remove them, or pass values to the command through env"),
		}},
		{"bad urls", `upstreams:
  - {name: a, url: mcp.example.com/mcp}
  - {name: b, url: "ftp://files.example.com"}
  - {name: c, url: "https:///mcp"}
  - {name: d, url: "http://a b.example.com/?token=secret"}
  - {name: e, url: "/mcp"}
  - {name: f, url: "http://:8080/mcp"}
  - {name: g, url: "localhost:8080/mcp"}
`, nil, []config.Problem{
			p(2, "upstreams[0].url", "no scheme: want an absolute http or https URL, like https://mcp.example.com/mcp"),
			p(3, "upstreams[1].url", `scheme "ftp" is not supported: want an absolute http or https URL, like https://mcp.example.com/mcp`),
			p(4, "upstreams[2].url", "no host: want an absolute http or https URL, like https://mcp.example.com/mcp"),
			p(5, "upstreams[3].url", "not a valid URL: want an absolute http or https URL, like https://mcp.example.com/mcp (the value is not shown: it may hold a secret)"),
			p(6, "upstreams[4].url", "no scheme: want an absolute http or https URL, like https://mcp.example.com/mcp"),
			p(7, "upstreams[5].url", "no host: want an absolute http or https URL, like https://mcp.example.com/mcp"),
			p(8, "upstreams[6].url", `scheme "localhost" is not supported: want an absolute http or https URL, like https://mcp.example.com/mcp`),
		}},
		{"bad headers", `upstreams:
  - name: a
    url: https://a.example.com
    headers:
      "X Token": a
      "": b
      Mcp-Session-Id: c
      host: d
      Mcp-Param-Repo: g
      X-Key: e
      x-key: f
      X-Value: "${V}"
`, map[string]string{"V": "secret\r\nInjected: yes"}, []config.Problem{
			p(5, "upstreams[0].headers.X Token", `"X Token" is not a valid header name: use letters, digits and !#$%&'*+-.^_`+"`"+`|~`),
			p(6, "upstreams[0].headers.", `"" is not a valid header name: use letters, digits and !#$%&'*+-.^_`+"`"+`|~`),
			p(7, "upstreams[0].headers.Mcp-Session-Id", `"Mcp-Session-Id" is set by the gateway's transport: remove it`),
			p(8, "upstreams[0].headers.host", `"host" is set by the gateway's transport: remove it`),
			p(9, "upstreams[0].headers.Mcp-Param-Repo", `"Mcp-Param-Repo" is set by the gateway's transport: remove it`),
			p(11, "upstreams[0].headers.x-key", `same header as "X-Key" (header names are case-insensitive): keep one`),
			p(12, "upstreams[0].headers.X-Value", "the value holds a line break or NUL, which an HTTP header cannot carry (the value is not shown)"),
		}},
		{"header list", "upstreams:\n  - name: a\n    url: https://a.example.com\n    headers: [\"Authorization: x\"]\n", nil, []config.Problem{
			p(4, "upstreams[0].headers", "want a mapping of NAME: value, got a list"),
		}},
		{"HTTP limits", "upstreams:\n  - name: a\n    url: https://a.example.com\n    initialize_timeout: 0s\n    max_response_bytes: -1\n  - {name: b, command: x, initialize_timeout: 3, max_response_bytes: 1MiB}\n", nil, []config.Problem{
			p(4, "upstreams[0].initialize_timeout", "must be greater than 0, like 30s"),
			p(5, "upstreams[0].max_response_bytes", "must be greater than 0: it is the largest message accepted from this upstream, in bytes (default 16777216, 16 MiB)"),
			p(6, "upstreams[1].initialize_timeout", `want a duration with a unit, like 30s, 5m or 1h30m; got "3"`),
			p(6, "upstreams[1].max_response_bytes", `want a whole number like 1000, got "1MiB"`),
		}},
		{"a bad url value is not also reported as missing", "upstreams:\n  - {name: a, url: [x]}\n", nil, []config.Problem{
			p(2, "upstreams[0].url", "want a string, got a list"),
		}},
		{"url from an unset variable", "upstreams:\n  - {name: a, url: \"${MCP_URL}\"}\n", nil, []config.Problem{
			p(2, "upstreams[0].url", "environment variable MCP_URL is not set: set it, or give a default with ${MCP_URL:-default}"),
		}},
		{"prefix is fine with another separator", "separator: \".\"\nupstreams:\n  - {name: my__server, command: x}\n", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.Parse("gw.yaml", []byte(tt.yaml), env(tt.env))
			checkProblems(t, "Parse", err, tt.want)
		})
	}
}

// TestParseReportsAllProblems checks that one run reports every problem of a
// file, from decoding and from validation, in line order.
func TestParseReportsAllProblems(t *testing.T) {
	const file = `upstreams:
  - name: a
    command: ./a
    timout: 5s
    request_timeout: 0s
  - name: a
    command: ""
    args: foo
listen: localhost
max_sessions: lots
`
	want := []config.Problem{
		{File: "all.yaml", Line: 4, Field: "upstreams[0].timout", Message: "unknown field (known: name, command, args, env, inherit_env, dir, url, headers, credentials, trust_annotations, pinning, transport, protocol, input_bridge, prefix, request_timeout, initialize_timeout, max_response_bytes, isolation, isolation_idle_timeout, max_connections, attribution_window, enabled, include_instructions, broadcast_logs, tools, prompts, resources, resource_templates)"},
		{File: "all.yaml", Line: 5, Field: "upstreams[0].request_timeout", Message: "must be greater than 0, like 60s"},
		{File: "all.yaml", Line: 6, Field: "upstreams[1].name", Message: `"a" is also the name of upstreams[0] (line 2): names must be unique`},
		{File: "all.yaml", Line: 7, Field: "upstreams[1].command", Message: "required: set command, the program to start for a stdio upstream, or url, the endpoint of an HTTP upstream"},
		{File: "all.yaml", Line: 8, Field: "upstreams[1].args", Message: `want a list of strings, like ["a", "b"]; got a single value`},
		{File: "all.yaml", Line: 9, Field: "listen", Message: `"localhost" is not host:port: write e.g. 127.0.0.1:8080, or :8080 for all interfaces`},
		{File: "all.yaml", Line: 10, Field: "max_sessions", Message: `want a whole number like 1000, got "lots"`},
	}
	c, err := config.Parse("all.yaml", []byte(file), nil)
	if c != nil {
		t.Errorf("Parse returned a Config along with an error")
	}
	var cerr *config.Error
	if !errors.As(err, &cerr) {
		t.Fatalf("Parse error = %v, want a *config.Error", err)
	}
	if diff := cmp.Diff(want, cerr.Problems); diff != "" {
		t.Errorf("problems mismatch (-want +got):\n%s", diff)
	}
}

// TestSyntaxErrorLine_yaml205 checks that a syntax error is reported on its
// own line, not on the line before the enclosing block as yaml gives it
// (go-yaml/yaml#205).
func TestSyntaxErrorLine_yaml205(t *testing.T) {
	var b strings.Builder
	b.WriteString("upstreams:\n")
	for i := range 300 {
		fmt.Fprintf(&b, "  - name: u%d\n    command: x\n", i)
		if i == 200 {
			b.WriteString("   dir: /tmp\n") // line 1 + 201*2 + 1
		}
	}
	_, err := config.Parse("gw.yaml", []byte(b.String()), nil)
	var cerr *config.Error
	if !errors.As(err, &cerr) {
		t.Fatalf("Parse error = %v, want a *config.Error", err)
	}
	want := []config.Problem{{File: "gw.yaml", Line: 404, Message: "not valid YAML: did not find expected '-' indicator (check indentation and quoting)"}}
	if diff := cmp.Diff(want, cerr.Problems); diff != "" {
		t.Errorf("problems mismatch (-want +got):\n%s", diff)
	}
}

func TestParseExpandsVariables(t *testing.T) {
	vars := map[string]string{
		"TOKEN": `a"b: c`,
		"EMPTY": "",
		"PORT":  "9001",
		"MAX":   "42",
		"YAML":  "x\n- injected: true",
	}
	tests := []struct {
		name  string
		value string // YAML text of env value V
		want  string
	}{
		{"plain", "${TOKEN}", `a"b: c`},
		{"inside double quotes", `"Bearer ${TOKEN}"`, `Bearer a"b: c`},
		{"inside single quotes", `'${TOKEN}'`, `a"b: c`},
		{"YAML in a value stays text", "${YAML}", "x\n- injected: true"},
		{"default when unset", "${NOPE:-fallback}", "fallback"},
		{"default when empty", "${EMPTY:-fallback}", "fallback"},
		{"empty default", "${NOPE:-}", ""},
		{"default with colon and spaces", `"${NOPE:-a: b c}"`, "a: b c"},
		{"set but empty", "${EMPTY}", ""},
		{"dollar dollar", "$$HOME", "$HOME"},
		{"escaped reference", "$${TOKEN}", "${TOKEN}"},
		{"bare dollar name stays", "$TOKEN", "$TOKEN"},
		{"lone dollar", "cost$", "cost$"},
		{"several", "${PORT}/$${PORT}/${NOPE:-x}", "9001/${PORT}/x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			yaml := "upstreams:\n  - name: a\n    command: x\n    env:\n      V: " + tt.value + "\n"
			c, err := config.Parse("gw.yaml", []byte(yaml), env(vars))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got := c.Upstreams[0].Env["V"]; got != tt.want {
				t.Errorf("env V = %q, want %q", got, tt.want)
			}
		})
	}

	t.Run("typed fields and keys", func(t *testing.T) {
		yaml := "listen: \"127.0.0.1:${PORT}\"\nmax_sessions: ${MAX}\nupstreams:\n  - name: a\n    command: x\n    env: {\"${TOKEN}\": v}\n"
		c, err := config.Parse("gw.yaml", []byte(yaml), env(vars))
		if err != nil {
			t.Fatalf("Parse: %v", err)
		}
		if c.Listen != "127.0.0.1:9001" || c.MaxSessions != 42 {
			t.Errorf("Listen, MaxSessions = %q, %d; want 127.0.0.1:9001, 42", c.Listen, c.MaxSessions)
		}
		if diff := cmp.Diff(map[string]string{"${TOKEN}": "v"}, c.Upstreams[0].Env); diff != "" {
			t.Errorf("keys must not be expanded (-want +got):\n%s", diff)
		}
	})
}

func TestLoadExample(t *testing.T) {
	path := filepath.Join("testdata", "example.yaml")
	got, err := config.Load(path, env(map[string]string{"GITHUB_TOKEN": "ghp_test", "SEARCH_TOKEN": "s3cret"}))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	want := &config.Config{
		File:                   path,
		Listen:                 "127.0.0.1:8700",
		Separator:              "__",
		LogLevel:               "info",
		LogFormat:              "text",
		Tracing:                config.Tracing{SampleRatio: 1, ServiceName: "manifold"},
		AllowedOrigins:         []string{"http://localhost:*", "https://app.example.com"},
		MaxBodyBytes:           4194304,
		BodyReadTimeout:        30 * time.Second,
		StreamAfter:            time.Second,
		StreamRetention:        time.Minute,
		DrainTimeout:           10 * time.Second,
		FirstListWait:          5 * time.Second,
		HTTPIdleTimeout:        2 * time.Minute,
		MaxSessions:            500,
		SessionIdleTimeout:     15 * time.Minute,
		MaxBatchEntries:        64,
		MaxCallsPerSession:     64,
		MaxCallsPerPrincipal:   256,
		MaxListensPerPrincipal: 16,
		MaxCalls:               4096,
		PageSize:               50,
		Audit:                  config.Audit{Sink: "file", Path: "/var/log/manifold/audit.log", Buffer: 4096},
		SessionStore:           config.SessionStore{Type: "memory", KeyPrefix: "manifold", DialTimeout: 2 * time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second},
		Auth:                   config.Auth{Resource: "http://127.0.0.1:8700/mcp", MaxSessionsPerPrincipal: 64, MaxSessionsPerAddress: 62},
		Policy:                 config.Policy{Default: "allow", SharedLimitFailure: "open", Approval: config.Approval{Timeout: 2 * time.Minute, By: "auto"}},

		MaxConnectionsPerAddress: 500, // max_sessions
		SessionEvictIdle:         5 * time.Minute,
		Upstreams: []config.Upstream{
			configUpstream(path, config.Upstream{
				Name: "github", Command: "npx", FirstInitializeTimeout: 2 * time.Minute, Args: []string{"-y", "@modelcontextprotocol/server-github"},
				Env:    map[string]string{"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_test"},
				Prefix: "github", RequestTimeout: 2 * time.Minute, Enabled: true, IncludeInstructions: true, Line: 23,
			}),
			configUpstream(path, config.Upstream{
				Name: "filesystem", Command: "npx", FirstInitializeTimeout: 2 * time.Minute, Args: []string{"-y", "@modelcontextprotocol/server-filesystem", "/srv/workspace"},
				Prefix: "fs", RequestTimeout: time.Minute, Enabled: true, Line: 32,
			}),
			configUpstream(path, config.Upstream{
				Name: "local-tools", Command: "/opt/manifold/bin/local-tools", Dir: "/opt/manifold",
				Prefix: "", RequestTimeout: time.Minute, Enabled: true, Line: 41,
			}),
			configUpstream(path, config.Upstream{
				Name: "experimental", Command: "python3", Args: []string{"-m", "experimental_server"},
				Prefix: "experimental", RequestTimeout: time.Minute, Enabled: false, Line: 47,
			}),
			configUpstream(path, config.Upstream{
				Name: "search", URL: "https://search.example.com/mcp", Transport: "auto",
				Headers:           map[string]string{"Authorization": "Bearer s3cret"},
				InitializeTimeout: 10 * time.Second, MaxResponseBytes: 8 << 20,
				Prefix: "search", RequestTimeout: time.Minute, Enabled: true, Line: 54,
			}),
		},

		StreamBudgetBytes:   64 << 20,
		EventLogBudgetBytes: 256 << 20,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Load mismatch (-want +got):\n%s", diff)
	}

	var enabled []string
	for _, u := range got.EnabledUpstreams() {
		enabled = append(enabled, u.Name)
	}
	if diff := cmp.Diff([]string{"github", "filesystem", "local-tools", "search"}, enabled); diff != "" {
		t.Errorf("EnabledUpstreams mismatch (-want +got):\n%s", diff)
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := config.Load(filepath.Join(t.TempDir(), "absent.yaml"), nil)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load error = %v, want one wrapping fs.ErrNotExist", err)
	}
	var cerr *config.Error
	if errors.As(err, &cerr) {
		t.Errorf("Load error is a *config.Error; want an I/O error")
	}
}

// TestInvalidGolden pins the text of Error for a file with many problems.
// Run with -update to rewrite testdata/invalid.golden.
func TestInvalidGolden(t *testing.T) {
	path := filepath.Join("testdata", "invalid.yaml")
	_, err := config.Load(path, nil)
	var cerr *config.Error
	if !errors.As(err, &cerr) {
		t.Fatalf("Load error = %v, want a *config.Error", err)
	}
	got := cerr.Error() + "\n"
	golden := filepath.Join("testdata", "invalid.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("Error() mismatch (-want +got):\n%s", diff)
	}
}

func TestProblemString(t *testing.T) {
	tests := []struct {
		p    config.Problem
		want string
	}{
		{config.Problem{File: "gw.yaml", Line: 12, Field: "upstreams[1].command", Message: "required"}, "gw.yaml:12: upstreams[1].command: required"},
		{config.Problem{File: "gw.yaml", Line: 3, Message: "not valid YAML"}, "gw.yaml:3: not valid YAML"},
		{config.Problem{File: "gw.yaml", Message: "empty config"}, "gw.yaml: empty config"},
	}
	for _, tt := range tests {
		if got := tt.p.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, name := range []string{"example.yaml", "invalid.yaml"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("upstreams: []\n"))
	f.Add([]byte("upstreams:\n  - &a {name: a, command: x, env: {K: ${V:-$$}}}\n  - *a\n"))
	f.Add([]byte("a: &a [*a]\nupstreams: *a\n"))
	lookup := env(map[string]string{"V": "1", "EMPTY": ""})
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := config.Parse("fuzz.yaml", data, lookup)
		if (c == nil) == (err == nil) {
			t.Fatalf("Parse returned config %v and error %v; want exactly one", c, err)
		}
		var cerr *config.Error
		if errors.As(err, &cerr) && len(cerr.Problems) == 0 {
			t.Fatalf("Parse returned an Error with no problems")
		}
	})
}

// checkProblems checks that err, from the call named what, lists want: no error for nil.
func checkProblems(t *testing.T, what string, err error, want []config.Problem) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return
	}
	var cerr *config.Error
	if !errors.As(err, &cerr) {
		t.Fatalf("%s error = %v, want a *config.Error", what, err)
	}
	if diff := cmp.Diff(want, cerr.Problems); diff != "" {
		t.Errorf("problems mismatch (-want +got):\n%s", diff)
	}
}
