package modern

import (
	"encoding/json"
	"testing"
)

func TestWithResultType(t *testing.T) {
	tests := []struct {
		name, in, resultType, want string
	}{
		{"added", `{"tools":[]}`, "complete", `{"tools":[],"resultType":"complete"}`},
		{"added to an empty result", `{}`, "complete", `{"resultType":"complete"}`},
		{"kept when present", `{"resultType":"input_required","inputRequests":{}}`, "complete", `{"resultType":"input_required","inputRequests":{}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := WithResultType(json.RawMessage(tt.in), tt.resultType)
			if err != nil || string(got) != tt.want {
				t.Errorf("WithResultType(%s) = %s, %v; want %s", tt.in, got, err, tt.want)
			}
		})
	}
	if _, err := WithResultType(json.RawMessage(`[]`), "complete"); err == nil {
		t.Error("WithResultType accepted an array")
	}
}

func TestWithCacheHints(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		ttl   int64
		scope CacheScope
		want  string
	}{
		{"added", `{"tools":[]}`, 30000, CachePrivate, `{"tools":[],"ttlMs":30000,"cacheScope":"private"}`},
		{"replaced", `{"ttlMs":600000,"cacheScope":"public","tools":[]}`, 0, CachePrivate, `{"ttlMs":0,"cacheScope":"private","tools":[]}`},
		{"negative sent as zero", `{}`, -5, CachePublic, `{"ttlMs":0,"cacheScope":"public"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := WithCacheHints(json.RawMessage(tt.in), tt.ttl, tt.scope)
			if err != nil || string(got) != tt.want {
				t.Errorf("WithCacheHints(%s) = %s, %v; want %s", tt.in, got, err, tt.want)
			}
		})
	}
	if _, err := WithCacheHints(json.RawMessage(`"x"`), 1, CachePublic); err == nil {
		t.Error("WithCacheHints accepted a string")
	}
}

func TestMergeTTL(t *testing.T) {
	tests := []struct {
		name  string
		parts []string
		want  int64
	}{
		{"no parts", nil, 0},
		{"one part", []string{`{"ttlMs":5000}`}, 5000},
		{"the shortest", []string{`{"ttlMs":5000}`, `{"ttlMs":300}`, `{"ttlMs":90000}`}, 300},
		{"an absent one is 0", []string{`{"ttlMs":5000}`, `{"tools":[]}`}, 0},
		{"a negative one is 0", []string{`{"ttlMs":-1}`, `{"ttlMs":5000}`}, 0},
		{"a fraction is 0", []string{`{"ttlMs":1.5}`, `{"ttlMs":5000}`}, 0},
		{"a string is 0", []string{`{"ttlMs":"5000"}`}, 0},
		{"not an object is 0", []string{`[]`, `{"ttlMs":5000}`}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var parts []json.RawMessage
			for _, p := range tt.parts {
				parts = append(parts, json.RawMessage(p))
			}
			if got := MergeTTL(parts...); got != tt.want {
				t.Errorf("MergeTTL(%v) = %d, want %d", tt.parts, got, tt.want)
			}
		})
	}
}
