package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The values of Config.LogFormat.
const (
	LogFormatText = "text"
	LogFormatJSON = "json"
)

// Tracing configures OpenTelemetry traces: one span per client request, with children for
// the policy chain's steps and the upstream call, exported over OTLP/HTTP.
type Tracing struct {
	// Endpoint is the OTLP/HTTP URL spans are exported to (key `endpoint`), like
	// http://127.0.0.1:4318: spans are posted to its path /v1/traces, or to the URL's own
	// path when it has one. Empty (the default): tracing is off, and costs nothing.
	Endpoint string

	// SampleRatio is the share of the traces the gateway starts that it records (key
	// `sample_ratio`), from 0 to 1. A request whose client sent W3C trace context is
	// recorded as its parent was (parent-based sampling). Defaults to 1.
	SampleRatio float64

	// ServiceName names the gateway in its traces (key `service_name`, the service.name of
	// the spans). Defaults to "manifold".
	ServiceName string

	// Headers are sent with every export to Endpoint (key `headers`), typically an
	// authorization whose value comes from ${ENV}. Nil when absent. Names are HTTP tokens,
	// values hold no CR, LF or NUL. Messages never quote values.
	Headers map[string]string
}

// defaultServiceName is the default of Tracing.ServiceName.
const defaultServiceName = "manifold"

// tracingSettings decodes the `tracing` mapping.
func tracingSettings(t *Tracing) decodeFunc {
	return func(d *decoder, n *yaml.Node, path string) bool {
		return d.mapping(n, path, "a mapping with `endpoint:` the OTLP/HTTP URL of a collector", []field{
			{key: "endpoint", decode: str(&t.Endpoint)},
			{key: "sample_ratio", decode: fraction(&t.SampleRatio)},
			{key: "service_name", decode: str(&t.ServiceName)},
			{key: "headers", decode: strMap(&t.Headers)},
		})
	}
}

// fraction decodes a number like 0.25.
func fraction(dst *float64) decodeFunc {
	return func(d *decoder, n *yaml.Node, path string) bool {
		s, ok := d.scalar(n, path, "a number")
		if !ok {
			return false
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			d.problemf(n.Line, path, "want a number like 0.25, got %s", quote(s))
			return false
		}
		*dst = f
		return true
	}
}

// applyTracingDefaults fills the log format and the tracing settings left out.
func applyTracingDefaults(c *Config, ix *index) {
	if !ix.has("log_format") {
		c.LogFormat = LogFormatText
	}
	if !ix.has("tracing.sample_ratio") {
		c.Tracing.SampleRatio = 1
	}
	if !ix.has("tracing.service_name") {
		c.Tracing.ServiceName = defaultServiceName
	}
}

// tracing checks the log format and the tracing settings.
func (v *validator) tracing(c *Config, w where) {
	switch c.LogFormat {
	case LogFormatText, LogFormatJSON:
	default:
		v.check(w, "log_format", fmt.Sprintf("%s is not a log format: use text or json", quote(c.LogFormat)))
	}
	t := &c.Tracing
	if t.Endpoint != "" {
		v.check(w, "tracing.endpoint", checkURL(t.Endpoint))
	}
	if t.SampleRatio < 0 || t.SampleRatio > 1 {
		v.check(w, "tracing.sample_ratio", "must be from 0 to 1: the share of the traces the gateway starts that it records (default 1)")
	}
	if strings.TrimSpace(t.ServiceName) == "" {
		v.check(w, "tracing.service_name", "must not be empty: it names the gateway in its traces (default manifold)")
	}
	for _, name := range sortedKeys(t.Headers) {
		p := join("tracing.headers", name)
		if !validToken(name) {
			v.check(w, p, fmt.Sprintf("%s is not a valid header name: use letters, digits and !#$%%&'*+-.^_`|~", quote(name)))
		}
		if strings.ContainsAny(t.Headers[name], "\r\n\x00") {
			v.check(w, p, "the value holds a line break or NUL, which an HTTP header cannot carry (the value is not shown)")
		}
	}
}
