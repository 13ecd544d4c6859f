package main

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/manifold-mcp/manifold/plugin/sdk"
)

func configured(t *testing.T, config string) *guard {
	t.Helper()
	g := &guard{}
	if err := g.Configure(json.RawMessage(config)); err != nil {
		t.Fatalf("Configure(%s): %v", config, err)
	}
	return g
}

func TestConfigure(t *testing.T) {
	for _, bad := range []string{`{"block":["("]}`, `{"blocks":["x"]}`, `{"block":"x"}`, `[]`} {
		if err := (&guard{}).Configure(json.RawMessage(bad)); err == nil {
			t.Errorf("Configure(%s) accepted it", bad)
		}
	}
	configured(t, `null`) // no config: allows everything
}

func TestDecide(t *testing.T) {
	g := configured(t, `{"block":["(?i)drop\\s+table","^rm -rf"],"defaults":{"limit":10}}`)
	tests := []struct {
		name string
		args string
		want *sdk.Decision
	}{
		{"a top-level string", `{"sql":"DROP TABLE users","limit":1}`, sdk.Deny(`the argument "/sql" matches the blocked pattern "(?i)drop\\s+table"`)},
		{"deep in arrays and objects", `{"limit":1,"a":[{"b":{"c/d~e":["ok","rm -rf /"]}}]}`, sdk.Deny(`the argument "/a/0/b/c~1d~0e/1" matches the blocked pattern "^rm -rf"`)},
		{"keys are not values", `{"drop table":"fine","limit":1}`, sdk.Allow()},
		{"numbers and booleans are not strings", `{"n":12345678901234567890,"b":true,"limit":1}`, sdk.Allow()},
		{"a missing default is added", `{"q":"go"}`, sdk.Rewrite(json.RawMessage(`{"limit":10,"q":"go"}`))},
		{"no arguments get the defaults", ``, sdk.Rewrite(json.RawMessage(`{"limit":10}`))},
		{"null arguments get the defaults", `null`, sdk.Rewrite(json.RawMessage(`{"limit":10}`))},
		{"a present default is kept", `{"q":"go","limit":3}`, sdk.Allow()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := g.Decide(context.Background(), &sdk.Call{Arguments: json.RawMessage(tt.args)})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Decide (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := g.Decide(context.Background(), &sdk.Call{Arguments: json.RawMessage(`{"q":`)}); err == nil {
		t.Error("Decide accepted arguments that are not JSON")
	}
}

func TestInspect(t *testing.T) {
	g := configured(t, `{}`)
	tests := []struct {
		name, method, in, want string
	}{
		{
			"text content", "tools/call",
			`{"content":[{"type":"text","text":"write to a.b+c@x.example.co.uk, not a@b"},{"type":"image","data":"x@y.zz"}],"isError":false}`,
			// Objects that changed are re-encoded, with their keys sorted.
			`{"content":[{"text":"write to [redacted email], not a@b","type":"text"},{"data":"x@y.zz","type":"image"}],"isError":false}`,
		},
		{
			"structured content at any depth", "tasks/result",
			`{"content":[],"structuredContent":{"a":[{"who":"me@example.com"},7,"x"],"n":12345678901234567890,"k":"<b>&</b>"}}`,
			`{"content":[],"structuredContent":{"a":[{"who":"[redacted email]"},7,"x"],"k":"<b>&</b>","n":12345678901234567890}}`,
		},
		{
			"nothing to redact leaves the result as it was", "",
			`{"content":[{"type":"text","text":"hi"}], "_meta":{"who":"me@example.com"}}`,
			`{"content":[{"type":"text","text":"hi"}], "_meta":{"who":"me@example.com"}}`,
		},
		{
			"a resource's texts", "resources/read",
			`{"contents":[{"uri":"a+file:///c.txt","mimeType":"text/plain","text":"ann@example.com, bob"},{"uri":"a+file:///d.bin","blob":"eEB5Lnp6"}]}`,
			`{"contents":[{"mimeType":"text/plain","text":"[redacted email], bob","uri":"a+file:///c.txt"},{"blob":"eEB5Lnp6","uri":"a+file:///d.bin"}]}`,
		},
		{
			"a prompt's messages", "prompts/get",
			`{"description":"to ann@example.com","messages":[{"role":"user","content":{"type":"text","text":"write to ann@example.com"}},{"role":"user","content":{"type":"image","data":"x"}}]}`,
			`{"description":"to ann@example.com","messages":[{"content":{"text":"write to [redacted email]","type":"text"},"role":"user"},{"content":{"data":"x","type":"image"},"role":"user"}]}`,
		},
		{
			"a completion's values", "completion/complete",
			`{"completion":{"values":["ann@example.com","bob"],"total":2,"hasMore":false}}`,
			`{"completion":{"hasMore":false,"total":2,"values":["[redacted email]","bob"]}}`,
		},
		{
			"a resource without addresses passes as it was", "resources/read",
			`{"contents":[{"uri":"a+file:///c.txt", "text":"bob"}]}`,
			`{"contents":[{"uri":"a+file:///c.txt", "text":"bob"}]}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := g.Inspect(context.Background(), &sdk.Call{Method: tt.method}, json.RawMessage(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("Inspect =\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
	if _, err := g.Inspect(context.Background(), &sdk.Call{}, json.RawMessage(`{"content":"x"}`)); err == nil {
		t.Error("Inspect accepted content that is not a list")
	}
}
