package modern

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestHeaderParams(t *testing.T) {
	tests := []struct {
		name   string
		schema string
		want   []Param
	}{
		{"nil schema", ``, nil},
		{"null schema", `null`, nil},
		{"no annotation", `{"type":"object","properties":{"q":{"type":"string"}}}`, nil},
		{"one string", `{"type":"object","properties":{"repo":{"type":"string","x-mcp-header":"Repo"},"q":{"type":"string"}}}`,
			[]Param{{Header: "Repo", Path: []string{"repo"}, Type: "string"}}},
		{"each scalar type, ordered by path", `{"type":"object","properties":{
			"z":{"type":"boolean","x-mcp-header":"Z"},
			"count":{"type":"integer","x-mcp-header":"Count"},
			"opts":{"type":"object","properties":{"region":{"type":["string","null"],"x-mcp-header":"Region"}}}}}`,
			[]Param{
				{Header: "Count", Path: []string{"count"}, Type: "integer"},
				{Header: "Region", Path: []string{"opts", "region"}, Type: "string"},
				{Header: "Z", Path: []string{"z"}, Type: "boolean"},
			}},
		{"token characters", `{"properties":{"a":{"type":"string","x-mcp-header":"A-b_c.d~e!#$%&'*+^` + "`" + `|9"}}}`,
			[]Param{{Header: "A-b_c.d~e!#$%&'*+^`|9", Path: []string{"a"}, Type: "string"}}},
		{"a property named x-mcp-header is not an annotation", `{"properties":{"x-mcp-header":{"type":"object"}}}`, nil},
		{"an annotation in a default value is data", `{"properties":{"a":{"type":"object","default":{"x-mcp-header":"A"}}}}`, nil},
		{"an escaped annotation key", `{"properties":{"a":{"type":"string","x\u002dmcp-header":"A"}}}`,
			[]Param{{Header: "A", Path: []string{"a"}, Type: "string"}}},
		{"an annotation in an enum is data", `{"properties":{"a":{"type":"string","enum":[{"x-mcp-header":"A"}]}}}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := HeaderParams(json.RawMessage(tt.schema))
			if err != nil {
				t.Fatalf("HeaderParams: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("params (-want +got):\n%s", diff)
			}
		})
	}
}

func TestHeaderParamsInvalid(t *testing.T) {
	tests := []struct {
		name   string
		schema string
	}{
		{"number type", `{"properties":{"n":{"type":"number","x-mcp-header":"N"}}}`},
		{"object type", `{"properties":{"o":{"type":"object","x-mcp-header":"O"}}}`},
		{"array type", `{"properties":{"a":{"type":"array","x-mcp-header":"A"}}}`},
		{"no type", `{"properties":{"a":{"x-mcp-header":"A"}}}`},
		{"two types", `{"properties":{"a":{"type":["string","integer"],"x-mcp-header":"A"}}}`},
		{"only null", `{"properties":{"a":{"type":["null"],"x-mcp-header":"A"}}}`},
		{"empty value", `{"properties":{"a":{"type":"string","x-mcp-header":""}}}`},
		{"value not a string", `{"properties":{"a":{"type":"string","x-mcp-header":true}}}`},
		{"space in the name", `{"properties":{"a":{"type":"string","x-mcp-header":"A B"}}}`},
		{"colon in the name", `{"properties":{"a":{"type":"string","x-mcp-header":"A:B"}}}`},
		{"line break in the name", `{"properties":{"a":{"type":"string","x-mcp-header":"A\r\nX-Evil"}}}`},
		{"non-ASCII name", `{"properties":{"a":{"type":"string","x-mcp-header":"Région"}}}`},
		{"duplicate, case-insensitively", `{"properties":{"a":{"type":"string","x-mcp-header":"Repo"},"b":{"type":"string","x-mcp-header":"repo"}}}`},
		{"duplicate across nesting", `{"properties":{"a":{"type":"string","x-mcp-header":"R"},"o":{"properties":{"b":{"type":"string","x-mcp-header":"R"}}}}}`},
		{"at the root", `{"type":"string","x-mcp-header":"Root"}`},
		{"under items", `{"properties":{"list":{"type":"array","items":{"type":"string","x-mcp-header":"Item"}}}}`},
		{"under items of an object", `{"properties":{"list":{"type":"array","items":{"properties":{"a":{"type":"string","x-mcp-header":"A"}}}}}}`},
		{"under prefixItems", `{"properties":{"list":{"prefixItems":[{"type":"string","x-mcp-header":"Item"}]}}}`},
		{"under anyOf", `{"properties":{"a":{"anyOf":[{"type":"string","x-mcp-header":"A"}]}}}`},
		{"under oneOf at the root", `{"oneOf":[{"properties":{"a":{"type":"string","x-mcp-header":"A"}}}]}`},
		{"under allOf", `{"allOf":[{"properties":{"a":{"type":"string","x-mcp-header":"A"}}}]}`},
		{"under not", `{"properties":{"a":{"not":{"type":"string","x-mcp-header":"A"}}}}`},
		{"under if/then", `{"if":{"properties":{"a":{"const":1}}},"then":{"properties":{"a":{"type":"string","x-mcp-header":"A"}}}}`},
		{"under $defs", `{"$defs":{"repo":{"type":"string","x-mcp-header":"Repo"}},"properties":{"repo":{"$ref":"#/$defs/repo"}}}`},
		{"under additionalProperties", `{"additionalProperties":{"type":"string","x-mcp-header":"Extra"}}`},
		{"under patternProperties", `{"patternProperties":{"^a":{"type":"string","x-mcp-header":"A"}}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := HeaderParams(json.RawMessage(tt.schema))
			if !errors.Is(err, ErrInvalidAnnotation) {
				t.Errorf("HeaderParams = %v, %v; want an error wrapping ErrInvalidAnnotation", got, err)
			}
		})
	}
	if _, err := HeaderParams(json.RawMessage(`{"x-mcp-header":`)); err == nil || errors.Is(err, ErrInvalidAnnotation) {
		t.Errorf("HeaderParams of malformed JSON = %v, want a decoding error", err)
	}
}

func TestUpstreamHeaders(t *testing.T) {
	params := []Param{
		{Header: "Repo", Path: []string{"repo"}, Type: "string"},
		{Header: "Count", Path: []string{"count"}, Type: "integer"},
		{Header: "Dry-Run", Path: []string{"options", "dryRun"}, Type: "boolean"},
	}
	tests := []struct {
		name      string
		method    string
		toolName  string
		arguments string
		want      http.Header
	}{
		{"list", "tools/list", "", ``, http.Header{"Mcp-Method": {"tools/list"}}},
		{"read", "resources/read", "file:///a b", ``, http.Header{"Mcp-Method": {"resources/read"}, "Mcp-Name": {"file:///a b"}}},
		{"prompt with a non-ASCII name", "prompts/get", "grüß", ``, http.Header{"Mcp-Method": {"prompts/get"}, "Mcp-Name": {"=?base64?Z3LDvMOf?="}}},
		{"call without arguments", "tools/call", "find", ``, http.Header{"Mcp-Method": {"tools/call"}, "Mcp-Name": {"find"}}},
		{"call mirrors each argument", "tools/call", "find", `{"repo":" acme ","count":1e1,"options":{"dryRun":false},"q":"x"}`,
			http.Header{
				"Mcp-Method":        {"tools/call"},
				"Mcp-Name":          {"find"},
				"Mcp-Param-Repo":    {"=?base64?IGFjbWUg?="},
				"Mcp-Param-Count":   {"10"},
				"Mcp-Param-Dry-Run": {"false"},
			}},
		{"null and absent arguments are not mirrored", "tools/call", "find", `{"repo":null,"options":{}}`,
			http.Header{"Mcp-Method": {"tools/call"}, "Mcp-Name": {"find"}}},
		{"a fraction is sent as written", "tools/call", "find", `{"count":2.5}`,
			http.Header{"Mcp-Method": {"tools/call"}, "Mcp-Name": {"find"}, "Mcp-Param-Count": {"2.5"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var args json.RawMessage
			if tt.arguments != "" {
				args = json.RawMessage(tt.arguments)
			}
			got, err := UpstreamHeaders(tt.method, tt.toolName, args, params)
			if err != nil {
				t.Fatalf("UpstreamHeaders: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("headers (-want +got):\n%s", diff)
			}
			// What the gateway sends upstream passes the checks it makes downstream.
			body := map[string]json.RawMessage{}
			if tt.toolName != "" {
				member := nameMember(tt.method)
				body[member], _ = json.Marshal(tt.toolName)
			}
			if args != nil {
				body["arguments"] = args
			}
			raw, _ := json.Marshal(body)
			if err := CheckHeaders(got, tt.method, raw, params); err != nil {
				t.Errorf("CheckHeaders of the upstream headers: %v", err)
			}
		})
	}
	if _, err := UpstreamHeaders("tools/call", "find", json.RawMessage(`{"repo":["a"]}`), params); err == nil {
		t.Error("UpstreamHeaders mirrored an array")
	}
}
