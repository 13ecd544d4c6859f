package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestSelectTargets: -only keeps the targets named and what their ratios need, in run order.
func TestSelectTargets(t *testing.T) {
	floor := []string{"direct", "direct-stdio"}
	all := []target{
		{name: "direct"},
		{name: "direct-stdio"},
		{name: "gateway-stdio", floor: floor},
		{name: "gateway-stdio-2026", floor: floor, versus: "gateway-stdio"},
		{name: "gateway-auth", floor: floor, versus: "gateway-stdio"},
		{name: "gateway-http", floor: []string{"direct", "direct"}},
		{name: "gateway-redis", floor: floor},
		{name: "gateway-redis-2026", floor: floor, versus: "gateway-redis"},
	}
	tests := []struct {
		name    string
		keep    []string
		want    []string
		wantErr bool
	}{
		{"the 2026 targets", []string{"gateway-stdio-2026", "gateway-redis-2026"},
			[]string{"direct", "direct-stdio", "gateway-stdio", "gateway-stdio-2026", "gateway-redis", "gateway-redis-2026"}, false},
		{"an HTTP gateway", []string{"gateway-http"}, []string{"direct", "gateway-http"}, false},
		{"spaces around names", []string{" gateway-stdio "}, []string{"direct", "direct-stdio", "gateway-stdio"}, false},
		{"no such target", []string{"gateway-nope"}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := selectTargets(all, tt.keep)
			if (err != nil) != tt.wantErr {
				t.Fatalf("selectTargets(%q): error %v, want one: %v", tt.keep, err, tt.wantErr)
			}
			var names []string
			for _, t := range got {
				names = append(names, t.name)
			}
			if diff := cmp.Diff(tt.want, names); diff != "" {
				t.Errorf("selectTargets(%q) (-want +got):\n%s", tt.keep, diff)
			}
		})
	}
}
