package modern

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/manifold-mcp/manifold/internal/protocol"
)

func TestEncodeHeaderValue(t *testing.T) {
	b64 := func(s string) string { return "=?base64?" + base64.StdEncoding.EncodeToString([]byte(s)) + "?=" }
	tests := []struct {
		in, want string
	}{
		{"search__find_issue", "search__find_issue"},
		{"acme/widgets", "acme/widgets"},
		{"two words", "two words"},
		{"", ""},
		{"test://static/a?b=c#d", "test://static/a?b=c#d"},
		{"=?BASE64?Zm9v?=", "=?BASE64?Zm9v?="}, // not the exact marker
		{" leading", b64(" leading")},
		{"trailing ", b64("trailing ")},
		{"tab\tinside", b64("tab\tinside")},
		{"line\nbreak", b64("line\nbreak")},
		{"café", b64("café")},
		{"日本語", b64("日本語")},
		{"del\x7f", b64("del\x7f")},
		{"=?base64?Zm9v?=", b64("=?base64?Zm9v?=")}, // looks like the encoded form
		{"=?base64?", b64("=?base64?")},
	}
	for _, tt := range tests {
		if got := EncodeHeaderValue(tt.in); got != tt.want {
			t.Errorf("EncodeHeaderValue(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestDecodeHeaderValue(t *testing.T) {
	tests := []struct {
		in      string
		want    string
		wantErr bool
	}{
		{"plain", "plain", false},
		{"  spaced\t ", "spaced", false},
		{"inner space", "inner space", false},
		{"=?base64?Y2Fmw6k=?=", "café", false},
		{" =?base64?Y2Fmw6k=?=\t", "café", false},
		{"=?base64??=", "", false},
		{"café", "café", false}, // raw UTF-8, as go-sdk clients send it
		{"=?BASE64?Y2Fmw6k=?=", "=?BASE64?Y2Fmw6k=?=", false},
		{"=?base64?Y2Fmw6k=", "=?base64?Y2Fmw6k=", false}, // no closing marker: literal
		{"Y2Fmw6k=?=", "Y2Fmw6k=?=", false},
		{"=?base64?!!!?=", "", true},
		{"=?base64?Y2Fmw6k?=", "", true}, // padding missing
		{"=?base64?Y2Fm w6k=?=", "", true},
		{"nul\x00", "", true},
		{"bell\a", "", true},
		{"del\x7f", "", true},
		{"line\r\nbreak", "", true},
	}
	for _, tt := range tests {
		got, err := DecodeHeaderValue(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("DecodeHeaderValue(%q) = %q, %v; want %q, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

// FuzzHeaderValue: decoding never panics, encoding gives a plain visible-ASCII value, and
// decoding it gives the input back.
func FuzzHeaderValue(f *testing.F) {
	for _, s := range []string{"", "plain", " x ", "café", "=?base64?Zm9v?=", "=?base64?!?=", "\x00\xff", "\t"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		_, _ = DecodeHeaderValue(s)
		enc := EncodeHeaderValue(s)
		if !isPlainHeaderValue(enc) && !strings.HasPrefix(enc, sentinelPrefix) {
			t.Fatalf("EncodeHeaderValue(%q) = %q, not a plain header value", s, enc)
		}
		for i := 0; i < len(enc); i++ {
			if enc[i] < 0x20 || enc[i] > 0x7e {
				t.Fatalf("EncodeHeaderValue(%q) = %q holds byte %#x", s, enc, enc[i])
			}
		}
		got, err := DecodeHeaderValue(enc)
		if err != nil || got != s {
			t.Fatalf("DecodeHeaderValue(EncodeHeaderValue(%q)) = %q, %v", s, got, err)
		}
	})
}

func TestCheckHeaders(t *testing.T) {
	repo := []Param{
		{Header: "Repo", Path: []string{"repo"}, Type: "string"},
		{Header: "Count", Path: []string{"count"}, Type: "integer"},
		{Header: "Dry-Run", Path: []string{"options", "dryRun"}, Type: "boolean"},
	}
	call := func(args string) json.RawMessage {
		return json.RawMessage(`{"name":"find","arguments":` + args + `}`)
	}
	std := func(more ...string) http.Header {
		return headers(append([]string{"Mcp-Method", "tools/call", "Mcp-Name", "find"}, more...)...)
	}
	tests := []struct {
		name       string
		header     http.Header
		method     string
		params     json.RawMessage
		toolParams []Param
		wantCode   int64 // 0: accepted
	}{
		{"list needs only Mcp-Method", headers("Mcp-Method", "tools/list"), "tools/list", nil, nil, 0},
		{"completion needs no Mcp-Name", headers("Mcp-Method", "completion/complete"), "completion/complete", json.RawMessage(`{"ref":{"type":"ref/prompt","name":"p"}}`), nil, 0},
		{"listen needs no Mcp-Name", headers("Mcp-Method", "subscriptions/listen"), "subscriptions/listen", json.RawMessage(`{}`), nil, 0},
		{"Mcp-Method missing", headers("Mcp-Name", "find"), "tools/list", nil, nil, protocol.CodeHeaderMismatch},
		{"Mcp-Method empty is not the method", headers("Mcp-Method", ""), "tools/list", nil, nil, protocol.CodeHeaderMismatch},
		{"Mcp-Method twice", headers("Mcp-Method", "tools/list", "Mcp-Method", "tools/list"), "tools/list", nil, nil, protocol.CodeHeaderMismatch},
		{"Mcp-Method base64", headers("Mcp-Method", EncodeHeaderValue("=?base64?x")), "=?base64?x", nil, nil, 0},
		{"notification without Mcp-Method", headers(), "notifications/cancelled", nil, nil, 0},
		{"notification with a wrong Mcp-Method", headers("Mcp-Method", "tools/list"), "notifications/cancelled", nil, nil, protocol.CodeHeaderMismatch},

		{"tools/call name", std(), "tools/call", call(`{}`), nil, 0},
		{"tools/call name missing", headers("Mcp-Method", "tools/call"), "tools/call", call(`{}`), nil, protocol.CodeHeaderMismatch},
		{"tools/call name case differs", headers("Mcp-Method", "tools/call", "Mcp-Name", "FIND"), "tools/call", call(`{}`), nil, protocol.CodeHeaderMismatch},
		{"tools/call name base64", headers("Mcp-Method", "tools/call", "Mcp-Name", "=?base64?ZmluZA==?="), "tools/call", call(`{}`), nil, 0},
		{"tools/call non-ASCII name base64", headers("Mcp-Method", "tools/call", "Mcp-Name", EncodeHeaderValue("café")), "tools/call", json.RawMessage(`{"name":"café"}`), nil, 0},
		{"tools/call non-ASCII name raw (go-sdk)", headers("Mcp-Method", "tools/call", "Mcp-Name", "café"), "tools/call", json.RawMessage(`{"name":"café"}`), nil, 0},
		{"tools/call non-ASCII name escaped in the body", headers("Mcp-Method", "tools/call", "Mcp-Name", "café"), "tools/call", json.RawMessage(`{"name":"caf\u00e9"}`), nil, 0},
		{"tools/call name with bad base64", headers("Mcp-Method", "tools/call", "Mcp-Name", "=?base64?%%%?="), "tools/call", call(`{}`), nil, protocol.CodeHeaderMismatch},
		{"tools/call name with a control character", headers("Mcp-Method", "tools/call", "Mcp-Name", "fi\x01nd"), "tools/call", call(`{}`), nil, protocol.CodeHeaderMismatch},
		{"tools/call name upper-case markers are literal", headers("Mcp-Method", "tools/call", "Mcp-Name", "=?BASE64?ZmluZA==?="), "tools/call", call(`{}`), nil, protocol.CodeHeaderMismatch},
		{"tools/call body name not a string", std(), "tools/call", json.RawMessage(`{"name":7}`), nil, protocol.CodeInvalidParams},
		{"tools/call without params", std(), "tools/call", nil, nil, protocol.CodeInvalidParams},
		{"prompts/get name", headers("Mcp-Method", "prompts/get", "Mcp-Name", "greet"), "prompts/get", json.RawMessage(`{"name":"greet"}`), nil, 0},
		{"prompts/get name differs", headers("Mcp-Method", "prompts/get", "Mcp-Name", "greet"), "prompts/get", json.RawMessage(`{"name":"Greet"}`), nil, protocol.CodeHeaderMismatch},
		{"resources/read uri", headers("Mcp-Method", "resources/read", "Mcp-Name", "file:///tmp/a b.txt"), "resources/read", json.RawMessage(`{"uri":"file:///tmp/a b.txt"}`), nil, 0},
		{"resources/read uri missing", headers("Mcp-Method", "resources/read"), "resources/read", json.RawMessage(`{"uri":"test://x"}`), nil, protocol.CodeHeaderMismatch},
		{"resources/read name is not the uri", headers("Mcp-Method", "resources/read", "Mcp-Name", "x"), "resources/read", json.RawMessage(`{"name":"x","uri":"test://x"}`), nil, protocol.CodeHeaderMismatch},

		{"params all mirrored", std("Mcp-Param-Repo", "acme/widgets", "Mcp-Param-Count", "10", "Mcp-Param-Dry-Run", "true"), "tools/call", call(`{"repo":"acme/widgets","count":10,"options":{"dryRun":true}}`), repo, 0},
		{"param header name in any case", std("mcp-param-repo", "acme/widgets"), "tools/call", call(`{"repo":"acme/widgets"}`), repo, 0},
		{"param value with OWS", std("Mcp-Param-Repo", " acme/widgets\t"), "tools/call", call(`{"repo":"acme/widgets"}`), repo, 0},
		{"param base64", std("Mcp-Param-Repo", EncodeHeaderValue("über/straße")), "tools/call", call(`{"repo":"über/straße"}`), repo, 0},
		{"param bad base64", std("Mcp-Param-Repo", "=?base64?***?="), "tools/call", call(`{"repo":"x"}`), repo, protocol.CodeHeaderMismatch},
		{"param unwrapped value is literal", std("Mcp-Param-Repo", "=?base64?eA==?"), "tools/call", call(`{"repo":"=?base64?eA==?"}`), repo, 0},
		{"param value differs", std("Mcp-Param-Repo", "acme/gadgets"), "tools/call", call(`{"repo":"acme/widgets"}`), repo, protocol.CodeHeaderMismatch},
		{"param value case differs", std("Mcp-Param-Repo", "Acme/Widgets"), "tools/call", call(`{"repo":"acme/widgets"}`), repo, protocol.CodeHeaderMismatch},
		{"param header missing for a given argument", std(), "tools/call", call(`{"repo":"acme/widgets"}`), repo, protocol.CodeHeaderMismatch},
		{"param header for an absent argument", std("Mcp-Param-Repo", "acme/widgets"), "tools/call", call(`{}`), repo, protocol.CodeHeaderMismatch},
		{"param header for a null argument", std("Mcp-Param-Repo", "acme/widgets"), "tools/call", call(`{"repo":null}`), repo, protocol.CodeHeaderMismatch},
		{"null argument, no header", std(), "tools/call", call(`{"repo":null}`), repo, 0},
		{"no arguments, no header", std(), "tools/call", json.RawMessage(`{"name":"find"}`), repo, 0},
		{"empty string argument", std("Mcp-Param-Repo", ""), "tools/call", call(`{"repo":""}`), repo, 0},
		{"integer compared by value", std("Mcp-Param-Count", "10"), "tools/call", call(`{"count":1e1}`), repo, 0},
		{"integer header with leading zero", std("Mcp-Param-Count", "010"), "tools/call", call(`{"count":10}`), repo, protocol.CodeHeaderMismatch},
		{"integer differs", std("Mcp-Param-Count", "11"), "tools/call", call(`{"count":10}`), repo, protocol.CodeHeaderMismatch},
		{"integer header not a number", std("Mcp-Param-Count", "ten"), "tools/call", call(`{"count":10}`), repo, protocol.CodeHeaderMismatch},
		{"integer negative", std("Mcp-Param-Count", "-9007199254740991"), "tools/call", call(`{"count":-9007199254740991}`), repo, 0},
		{"boolean false", std("Mcp-Param-Dry-Run", "false"), "tools/call", call(`{"options":{"dryRun":false}}`), repo, 0},
		{"boolean case differs", std("Mcp-Param-Dry-Run", "True"), "tools/call", call(`{"options":{"dryRun":true}}`), repo, protocol.CodeHeaderMismatch},
		{"nested parent not an object", std(), "tools/call", call(`{"options":"none"}`), repo, 0},
		{"object where a scalar is annotated", std("Mcp-Param-Repo", "{}"), "tools/call", call(`{"repo":{}}`), repo, protocol.CodeHeaderMismatch},
		{"unrecognized param header ignored", std("Mcp-Param-Other", "anything"), "tools/call", call(`{}`), repo, 0},
		{"param headers ignored for a tool without annotations", std("Mcp-Param-Repo", "x"), "tools/call", call(`{}`), nil, 0},
		{"param headers ignored off tools/call", headers("Mcp-Method", "prompts/get", "Mcp-Name", "p", "Mcp-Param-Repo", "x"), "prompts/get", json.RawMessage(`{"name":"p","arguments":{}}`), repo, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckHeaders(tt.header, tt.method, tt.params, tt.toolParams)
			if tt.wantCode == 0 {
				if err != nil {
					t.Fatalf("CheckHeaders: %v", err)
				}
				return
			}
			f := refusal(t, err)
			if f.Err.Code != tt.wantCode || f.Status != http.StatusBadRequest {
				t.Errorf("refusal = HTTP %d, code %d (%s); want HTTP 400, code %d", f.Status, f.Err.Code, f.Err.Message, tt.wantCode)
			}
		})
	}
}

func TestCheckHeadersMessages(t *testing.T) {
	repo := []Param{{Header: "Repo", Path: []string{"repo"}, Type: "string"}}
	tests := []struct {
		name   string
		header http.Header
		params string
		want   string
	}{
		{"name", headers("Mcp-Method", "tools/call", "Mcp-Name", "a__x"), `{"name":"a__y"}`,
			"Header mismatch: Mcp-Name is 'a__x' but params.name is 'a__y'"},
		{"non-printable name", headers("Mcp-Method", "tools/call", "Mcp-Name", "é"), `{"name":"e\n"}`,
			`Header mismatch: Mcp-Name is '\u00e9' but params.name is 'e\n'`},
		{"param", headers("Mcp-Method", "tools/call", "Mcp-Name", "f", "Mcp-Param-Repo", "a"), `{"name":"f","arguments":{"repo":"b"}}`,
			"Header mismatch: Mcp-Param-Repo is 'a' but arguments.repo is 'b'"},
		{"param missing", headers("Mcp-Method", "tools/call", "Mcp-Name", "f"), `{"name":"f","arguments":{"repo":"b"}}`,
			"Header mismatch: the Mcp-Param-Repo header is required when arguments.repo is given"},
		{"long value cut", headers("Mcp-Method", "tools/call", "Mcp-Name", strings.Repeat("x", 200)), `{"name":"y"}`,
			"Header mismatch: Mcp-Name is '" + strings.Repeat("x", 96) + "...' but params.name is 'y'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckHeaders(tt.header, "tools/call", json.RawMessage(tt.params), repo)
			if got := refusal(t, err).Err.Message; got != tt.want {
				t.Errorf("message = %q\nwant        %q", got, tt.want)
			}
		})
	}
}

func TestCheckHeadersCaps(t *testing.T) {
	many := headers("Mcp-Method", "tools/list")
	for i := range MaxMCPHeaders {
		many.Set(fmt.Sprintf("Mcp-Param-P%d", i), "x")
	}
	big := headers("Mcp-Method", "tools/list", "Mcp-Param-Big", strings.Repeat("x", MaxMCPHeaderBytes))
	atCap := headers("Mcp-Method", "tools/list")
	for i := range MaxMCPHeaders - 1 {
		atCap.Set(fmt.Sprintf("Mcp-Param-P%d", i), "x")
	}
	others := headers("Mcp-Method", "tools/list", "X-Big", strings.Repeat("x", 2*MaxMCPHeaderBytes))
	tests := []struct {
		name    string
		header  http.Header
		wantErr bool
	}{
		{"one header too many", many, true},
		{"too many bytes", big, true},
		{"at the cap", atCap, false},
		{"other headers do not count", others, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckHeaders(tt.header, "tools/list", nil, nil)
			if !tt.wantErr {
				if err != nil {
					t.Fatalf("CheckHeaders: %v", err)
				}
				return
			}
			if f := refusal(t, err); f.Err.Code != protocol.CodeHeaderMismatch {
				t.Errorf("code = %d, want %d", f.Err.Code, protocol.CodeHeaderMismatch)
			}
			if !errors.Is(err, &protocol.Error{Code: protocol.CodeHeaderMismatch}) {
				t.Error("errors.Is does not match the code")
			}
			if !utf8.ValidString(err.Error()) {
				t.Error("message is not UTF-8")
			}
		})
	}
}
