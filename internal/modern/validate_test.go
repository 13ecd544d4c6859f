package modern

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/manifold-mcp/manifold/internal/protocol"
)

// headers builds an http.Header from name/value pairs, keeping each name exactly as given
// (a server canonicalizes names; a test may not).
func headers(pairs ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(pairs); i += 2 {
		h[pairs[i]] = append(h[pairs[i]], pairs[i+1])
	}
	return h
}

// meta returns params holding a _meta of the given members (raw JSON text each) and the
// other params members given after it.
func meta(members string, rest ...string) json.RawMessage {
	s := `{"_meta":{` + members + `}`
	for _, r := range rest {
		s += "," + r
	}
	return json.RawMessage(s + "}")
}

const (
	pv26 = `"io.modelcontextprotocol/protocolVersion":"2026-07-28"`
	cc   = `"io.modelcontextprotocol/clientCapabilities":{}`
)

// refusal returns the *Failure err holds, failing the test when it holds none.
func refusal(t *testing.T, err error) *Failure {
	t.Helper()
	var f *Failure
	if !errors.As(err, &f) {
		t.Fatalf("error = %v, want a *Failure", err)
	}
	return f
}

func TestValidateRefusals(t *testing.T) {
	std := func(method string, more ...string) http.Header {
		return headers(append([]string{"Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", method}, more...)...)
	}
	tests := []struct {
		name       string
		header     http.Header
		method     string
		params     json.RawMessage
		wantStatus int
		wantCode   int64
	}{
		// Step 3.
		{"version header missing", headers("Mcp-Method", "tools/list"), "tools/list", meta(pv26 + "," + cc), 400, protocol.CodeHeaderMismatch},
		{"version header empty", headers("Mcp-Protocol-Version", " ", "Mcp-Method", "tools/list"), "tools/list", meta(pv26 + "," + cc), 400, protocol.CodeHeaderMismatch},
		{"version header twice", headers("Mcp-Protocol-Version", "2026-07-28", "Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/list"), "tools/list", meta(pv26 + "," + cc), 400, protocol.CodeHeaderMismatch},
		// Step 4 (server-stateless: request-meta-invalid-*).
		{"no params", std("tools/list"), "tools/list", nil, 400, protocol.CodeInvalidParams},
		{"params null", std("tools/list"), "tools/list", json.RawMessage(`null`), 400, protocol.CodeInvalidParams},
		{"params an array", std("tools/list"), "tools/list", json.RawMessage(`[]`), 400, protocol.CodeInvalidParams},
		{"no _meta", std("tools/list"), "tools/list", json.RawMessage(`{}`), 400, protocol.CodeInvalidParams},
		{"_meta null", std("tools/list"), "tools/list", json.RawMessage(`{"_meta":null}`), 400, protocol.CodeInvalidParams},
		{"_meta a string", std("tools/list"), "tools/list", json.RawMessage(`{"_meta":"x"}`), 400, protocol.CodeInvalidParams},
		{"version missing under a modern header", std("tools/list"), "tools/list", meta(cc), 400, protocol.CodeInvalidParams},
		{"version a number", std("tools/list"), "tools/list", meta(`"io.modelcontextprotocol/protocolVersion":20260728,` + cc), 400, protocol.CodeInvalidParams},
		{"version empty", std("tools/list"), "tools/list", meta(`"io.modelcontextprotocol/protocolVersion":"",` + cc), 400, protocol.CodeInvalidParams},
		{"capabilities missing", std("tools/list"), "tools/list", meta(pv26), 400, protocol.CodeInvalidParams},
		{"capabilities null", std("tools/list"), "tools/list", meta(pv26 + `,"io.modelcontextprotocol/clientCapabilities":null`), 400, protocol.CodeInvalidParams},
		{"capabilities an array", std("tools/list"), "tools/list", meta(pv26 + `,"io.modelcontextprotocol/clientCapabilities":[]`), 400, protocol.CodeInvalidParams},
		{"sampling capability a string", std("tools/list"), "tools/list", meta(pv26 + `,"io.modelcontextprotocol/clientCapabilities":{"sampling":"yes"}`), 400, protocol.CodeInvalidParams},
		{"client info a string", std("tools/list"), "tools/list", meta(pv26 + "," + cc + `,"io.modelcontextprotocol/clientInfo":"probe"`), 400, protocol.CodeInvalidParams},
		{"meta checked before Mcp-Method", headers("Mcp-Protocol-Version", "2026-07-28"), "tools/list", meta(cc), 400, protocol.CodeInvalidParams},
		// Step 5.
		{"header and version differ", std("tools/list"), "tools/list", meta(`"io.modelcontextprotocol/protocolVersion":"v999.0.0",` + cc), 400, protocol.CodeHeaderMismatch},
		{"legacy header, modern version", headers("Mcp-Protocol-Version", "2025-11-25", "Mcp-Method", "tools/list"), "tools/list", meta(pv26 + "," + cc), 400, protocol.CodeHeaderMismatch},
		{"header value case differs", headers("Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/list"), "tools/list", meta(`"io.modelcontextprotocol/protocolVersion":"2026-07-28 ",` + cc), 400, protocol.CodeHeaderMismatch},
		// Step 6.
		{"unknown version", headers("Mcp-Protocol-Version", "v999.0.0", "Mcp-Method", "tools/list"), "tools/list", meta(`"io.modelcontextprotocol/protocolVersion":"v999.0.0",` + cc), 400, protocol.CodeUnsupportedProtocolVersion},
		{"session-based version without a session", headers("Mcp-Protocol-Version", "2025-11-25", "Mcp-Method", "tools/list"), "tools/list", meta(`"io.modelcontextprotocol/protocolVersion":"2025-11-25",` + cc), 400, protocol.CodeUnsupportedProtocolVersion},
		{"version checked before Mcp-Method", headers("Mcp-Protocol-Version", "v999.0.0"), "tools/list", meta(`"io.modelcontextprotocol/protocolVersion":"v999.0.0",` + cc), 400, protocol.CodeUnsupportedProtocolVersion},
		// Step 7.
		{"Mcp-Method missing", headers("Mcp-Protocol-Version", "2026-07-28"), "tools/list", meta(pv26 + "," + cc), 400, protocol.CodeHeaderMismatch},
		{"Mcp-Method differs", std("tools/call"), "tools/list", meta(pv26 + "," + cc), 400, protocol.CodeHeaderMismatch},
		{"Mcp-Method value case differs", std("TOOLS/LIST"), "tools/list", meta(pv26 + "," + cc), 400, protocol.CodeHeaderMismatch},
		{"Mcp-Name missing on tools/call", std("tools/call"), "tools/call", meta(pv26+","+cc, `"name":"test_simple_text"`), 400, protocol.CodeHeaderMismatch},
		{"Mcp-Name differs", std("tools/call", "Mcp-Name", "other"), "tools/call", meta(pv26+","+cc, `"name":"test_simple_text"`), 400, protocol.CodeHeaderMismatch},
		{"headers checked before the method", headers("Mcp-Protocol-Version", "2026-07-28"), "unknown/method", meta(pv26 + "," + cc), 400, protocol.CodeHeaderMismatch},
		{"Mcp-Param of the called tool", std("tools/call", "Mcp-Name", "find"), "tools/call", meta(pv26+","+cc, `"name":"find"`, `"arguments":{"repo":"acme/widgets"}`), 400, protocol.CodeHeaderMismatch},
		// Step 8 (server-stateless: each probed with valid _meta).
		{"initialize", std("initialize"), "initialize", meta(pv26 + "," + cc), 404, protocol.CodeMethodNotFound},
		{"ping", std("ping"), "ping", meta(pv26 + "," + cc), 404, protocol.CodeMethodNotFound},
		{"logging/setLevel", std("logging/setLevel"), "logging/setLevel", meta(pv26+","+cc, `"level":"debug"`), 404, protocol.CodeMethodNotFound},
		{"resources/subscribe", std("resources/subscribe"), "resources/subscribe", meta(pv26+","+cc, `"uri":"test://x"`), 404, protocol.CodeMethodNotFound},
		{"resources/unsubscribe", std("resources/unsubscribe"), "resources/unsubscribe", meta(pv26+","+cc, `"uri":"test://x"`), 404, protocol.CodeMethodNotFound},
		{"tasks/result", std("tasks/result"), "tasks/result", meta(pv26 + "," + cc), 404, protocol.CodeMethodNotFound},
		{"tasks/list", std("tasks/list"), "tasks/list", meta(pv26 + "," + cc), 404, protocol.CodeMethodNotFound},
		{"tasks/get, not advertised", std("tasks/get"), "tasks/get", meta(pv26 + "," + cc), 404, protocol.CodeMethodNotFound},
		{"notifications/initialized", std("notifications/initialized"), "notifications/initialized", meta(pv26 + "," + cc), 404, protocol.CodeMethodNotFound},
		{"unknown method", std("unknown/method"), "unknown/method", meta(pv26 + "," + cc), 404, protocol.CodeMethodNotFound},
		{"method checked before the log level", std("ping"), "ping", meta(pv26 + "," + cc + `,"io.modelcontextprotocol/logLevel":"verbose"`), 404, protocol.CodeMethodNotFound},
		// Step 9.
		{"log level unknown", std("tools/list"), "tools/list", meta(pv26 + "," + cc + `,"io.modelcontextprotocol/logLevel":"verbose"`), 400, protocol.CodeInvalidParams},
		{"log level case differs", std("tools/list"), "tools/list", meta(pv26 + "," + cc + `,"io.modelcontextprotocol/logLevel":"DEBUG"`), 400, protocol.CodeInvalidParams},
		{"log level a number", std("tools/list"), "tools/list", meta(pv26 + "," + cc + `,"io.modelcontextprotocol/logLevel":7`), 400, protocol.CodeInvalidParams},
		{"progress token an object", std("tools/list"), "tools/list", meta(pv26 + "," + cc + `,"progressToken":{}`), 400, protocol.CodeInvalidParams},
		{"traceparent a number", std("tools/list"), "tools/list", meta(pv26 + "," + cc + `,"traceparent":1`), 400, protocol.CodeInvalidParams},
	}
	toolParams := func(name string) []Param {
		if name == "find" {
			return []Param{{Header: "Repo", Path: []string{"repo"}, Type: "string"}}
		}
		return nil
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := Validate(tt.header, tt.method, tt.params, toolParams)
			if req != nil {
				t.Errorf("Validate returned a request %+v with its error", req)
			}
			f := refusal(t, err)
			if f.Status != tt.wantStatus || f.Err.Code != tt.wantCode {
				t.Errorf("refusal = HTTP %d, code %d (%s); want HTTP %d, code %d", f.Status, f.Err.Code, f.Err.Message, tt.wantStatus, tt.wantCode)
			}
			if !errors.Is(err, &protocol.Error{Code: tt.wantCode}) {
				t.Errorf("errors.Is(err, code %d) = false", tt.wantCode)
			}
		})
	}
}

// TestValidateUnsupportedVersionData: -32022 echoes the version asked for and lists only
// modern versions, each of which server/discover lists too (conformance server-stateless).
func TestValidateUnsupportedVersionData(t *testing.T) {
	for _, requested := range []string{"v999.0.0", "2025-11-25", "2024-11-05"} {
		t.Run(requested, func(t *testing.T) {
			h := headers("Mcp-Protocol-Version", requested, "Mcp-Method", "tools/list")
			_, err := Validate(h, "tools/list", meta(`"io.modelcontextprotocol/protocolVersion":"`+requested+`",`+cc), nil)
			f := refusal(t, err)
			var data struct {
				Supported []string `json:"supported"`
				Requested string   `json:"requested"`
			}
			if err := json.Unmarshal(f.Err.Data, &data); err != nil {
				t.Fatalf("data %s: %v", f.Err.Data, err)
			}
			if data.Requested != requested {
				t.Errorf("data.requested = %q, want %q", data.Requested, requested)
			}
			if diff := cmp.Diff(protocol.ModernVersions, data.Supported); diff != "" {
				t.Errorf("data.supported (-want +got):\n%s", diff)
			}
			for _, v := range data.Supported {
				if !slices.Contains(SupportedVersions(), v) {
					t.Errorf("data.supported names %q, which server/discover does not list", v)
				}
			}
		})
	}
}

func TestValidateMessages(t *testing.T) {
	h := headers("Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/call", "Mcp-Name", "a__x")
	_, err := Validate(h, "tools/call", meta(pv26+","+cc, `"name":"a__y"`), nil)
	const want = "Header mismatch: Mcp-Name is 'a__x' but params.name is 'a__y'"
	if got := refusal(t, err).Err.Message; got != want {
		t.Errorf("message = %q, want %q", got, want)
	}
}

func TestValidateAccepts(t *testing.T) {
	tests := []struct {
		name   string
		header http.Header
		method string
		params json.RawMessage
		want   *Request
	}{
		{
			name:   "client info missing is served",
			header: headers("Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/list"),
			method: "tools/list",
			params: meta(pv26 + "," + cc),
			want:   &Request{Version: "2026-07-28", Capabilities: ClientCapabilities{Raw: json.RawMessage(`{}`)}},
		},
		{
			name:   "whitespace around header values",
			header: headers("Mcp-Protocol-Version", " 2026-07-28\t", "Mcp-Method", "\ttools/call ", "Mcp-Name", "  test_simple_text\t"),
			method: "tools/call",
			params: meta(pv26+","+cc, `"name":"test_simple_text"`),
			want:   &Request{Version: "2026-07-28", Capabilities: ClientCapabilities{Raw: json.RawMessage(`{}`)}},
		},
		{
			name:   "header names in any case",
			header: headers("mcp-protocol-version", "2026-07-28", "MCP-METHOD", "prompts/get", "mCp-NaMe", "test_simple_prompt"),
			method: "prompts/get",
			params: meta(pv26+","+cc, `"name":"test_simple_prompt"`),
			want:   &Request{Version: "2026-07-28", Capabilities: ClientCapabilities{Raw: json.RawMessage(`{}`)}},
		},
		{
			name:   "everything declared",
			header: headers("Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", "resources/read", "Mcp-Name", "test://static"),
			method: "resources/read",
			params: meta(pv26+
				`,"io.modelcontextprotocol/clientCapabilities":{"sampling":{"tools":{},"context":{}},"elicitation":{"url":{}},"roots":{},"extensions":{"io.example/b":{},"io.example/a":{"x":1}},"experimental":{}}`+
				`,"io.modelcontextprotocol/clientInfo":{"name":"probe","version":"1.0"}`+
				`,"io.modelcontextprotocol/logLevel":"warning","progressToken":"p7","traceparent":"00-abc-def-01","baggage":"k=v"`,
				`"uri":"test://static"`),
			want: &Request{
				Version: "2026-07-28",
				Capabilities: ClientCapabilities{
					Raw:             json.RawMessage(`{"sampling":{"tools":{},"context":{}},"elicitation":{"url":{}},"roots":{},"extensions":{"io.example/b":{},"io.example/a":{"x":1}},"experimental":{}}`),
					Sampling:        true,
					SamplingTools:   true,
					SamplingContext: true,
					ElicitationURL:  true,
					Roots:           true,
					Extensions:      []string{"io.example/a", "io.example/b"},
				},
				ClientInfo:    &protocol.Implementation{Name: "probe", Version: "1.0"},
				LogLevel:      "warning",
				ProgressToken: json.RawMessage(`"p7"`),
				Trace:         map[string]json.RawMessage{"traceparent": json.RawMessage(`"00-abc-def-01"`), "baggage": json.RawMessage(`"k=v"`)},
			},
		},
		{
			name:   "empty elicitation means form; null members are not declared",
			header: headers("Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/list"),
			method: "tools/list",
			params: meta(pv26 + `,"io.modelcontextprotocol/clientCapabilities":{"elicitation":{},"sampling":null,"roots":null},"progressToken":12,"io.modelcontextprotocol/logLevel":null,"io.modelcontextprotocol/clientInfo":null,"tracestate":null`),
			want: &Request{
				Version:       "2026-07-28",
				Capabilities:  ClientCapabilities{Raw: json.RawMessage(`{"elicitation":{},"sampling":null,"roots":null}`), ElicitationForm: true},
				ProgressToken: json.RawMessage(`12`),
			},
		},
		{
			name:   "both elicitation modes",
			header: headers("Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", "server/discover"),
			method: "server/discover",
			params: meta(pv26 + `,"io.modelcontextprotocol/clientCapabilities":{"elicitation":{"form":{},"url":{}}}`),
			want: &Request{
				Version:      "2026-07-28",
				Capabilities: ClientCapabilities{Raw: json.RawMessage(`{"elicitation":{"form":{},"url":{}}}`), ElicitationForm: true, ElicitationURL: true},
			},
		},
		{
			name:   "a notification may omit Mcp-Method",
			header: headers("Mcp-Protocol-Version", "2026-07-28"),
			method: "notifications/cancelled",
			params: meta(pv26+","+cc, `"requestId":3`),
			want:   &Request{Version: "2026-07-28", Capabilities: ClientCapabilities{Raw: json.RawMessage(`{}`)}},
		},
		{
			name:   "a session id is no concern of the modern path",
			header: headers("Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", "subscriptions/listen", "Mcp-Session-Id", "abc"),
			method: "subscriptions/listen",
			params: meta(pv26+","+cc, `"filter":{}`),
			want:   &Request{Version: "2026-07-28", Capabilities: ClientCapabilities{Raw: json.RawMessage(`{}`)}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Validate(tt.header, tt.method, tt.params, nil)
			if err != nil {
				t.Fatalf("Validate: %v", err)
			}
			m, _, _ := protocol.Member(tt.params, "_meta")
			tt.want.Meta = m
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("request (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSupportedVersions(t *testing.T) {
	got := SupportedVersions()
	want := []string{"2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("SupportedVersions (-want +got):\n%s", diff)
	}
	got[0] = "changed"
	if SupportedVersions()[0] != "2026-07-28" || protocol.ModernVersions[0] != "2026-07-28" {
		t.Error("changing the returned slice changed the package's versions")
	}
}

func TestHTTPStatus(t *testing.T) {
	tests := []struct {
		code int64
		want int
	}{
		{protocol.CodeMethodNotFound, http.StatusNotFound},
		{protocol.CodeInvalidParams, http.StatusBadRequest},
		{protocol.CodeHeaderMismatch, http.StatusBadRequest},
		{protocol.CodeMissingRequiredClientCapability, http.StatusBadRequest},
		{protocol.CodeUnsupportedProtocolVersion, http.StatusBadRequest},
		{protocol.CodeInternalError, http.StatusOK},
		{protocol.CodeUpstreamTimeout, http.StatusOK},
		{protocol.CodeParseError, http.StatusOK},
	}
	for _, tt := range tests {
		if got := HTTPStatus(tt.code); got != tt.want {
			t.Errorf("HTTPStatus(%d) = %d, want %d", tt.code, got, tt.want)
		}
	}
}

func TestFailureError(t *testing.T) {
	f := &Failure{Status: 400, Err: protocol.Errorf(protocol.CodeHeaderMismatch, "Header mismatch: x")}
	if !strings.Contains(f.Error(), "400") || !errors.Is(f, &protocol.Error{Code: protocol.CodeHeaderMismatch}) {
		t.Errorf("Failure %q does not name its status or match its code", f.Error())
	}
	if errors.Is(f, &protocol.Error{Code: protocol.CodeInvalidParams}) {
		t.Error("Failure matches a code it does not carry")
	}
}

// TestValidateWithoutHeaders: a request of a transport with no header layer (stdio) is read
// from its body alone, where the same body over HTTP without headers is refused; what the body
// itself gets wrong is refused either way.
func TestValidateWithoutHeaders(t *testing.T) {
	call := meta(pv26+","+cc, `"name":"echo"`, `"arguments":{"text":"hi"}`)
	withParam := func(string) []Param { return []Param{{Header: "Text", Path: []string{"text"}}} }
	req, err := Validate(nil, protocol.MethodCallTool, call, withParam)
	if err != nil {
		t.Fatalf("Validate without headers: %v", err)
	}
	if req.Version != "2026-07-28" {
		t.Errorf("version %q, want 2026-07-28", req.Version)
	}
	var failure *Failure
	if _, err := Validate(http.Header{}, protocol.MethodCallTool, call, withParam); !errors.As(err, &failure) || failure.Err.Code != protocol.CodeHeaderMismatch {
		t.Errorf("Validate over HTTP without headers = %v, want -32020", err)
	}
	for name, params := range map[string]json.RawMessage{
		"no capabilities":    meta(pv26),
		"a legacy version":   meta(`"io.modelcontextprotocol/protocolVersion":"2025-11-25",` + cc),
		"a bad log level":    meta(pv26 + "," + cc + `,"io.modelcontextprotocol/logLevel":"loud"`),
		"a session's method": meta(pv26 + "," + cc),
	} {
		method := protocol.MethodListTools
		if name == "a session's method" {
			method = protocol.MethodInitialize
		}
		if _, err := Validate(nil, method, params, nil); !errors.As(err, &failure) {
			t.Errorf("%s: Validate without headers = %v, want a refusal", name, err)
		}
	}
}
