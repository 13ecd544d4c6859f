package config_test

import (
	"testing"

	"github.com/manifold-mcp/manifold/internal/config"
)

func TestOriginAllowed(t *testing.T) {
	loopback := []string{
		"http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*",
		"https://localhost:*", "https://127.0.0.1:*", "https://[::1]:*",
	}
	tests := []struct {
		name    string
		allowed []string
		origin  string
		want    bool
	}{
		{"any port, with a port", loopback, "http://localhost:3000", true},
		{"any port, without a port", loopback, "http://localhost", true},
		{"any port, https", loopback, "https://127.0.0.1:8443", true},
		{"IPv6 loopback", loopback, "http://[::1]:5173", true},
		{"IPv6 loopback, long form", loopback, "http://[0:0:0:0:0:0:0:1]:5173", true},
		{"case-insensitive scheme and host", loopback, "HTTP://LocalHost:3000", true},
		{"other host", loopback, "http://evil.example.com", false},
		{"host that starts like an allowed one", loopback, "http://localhost.evil.example.com", false},
		{"scheme must match", []string{"https://app.example.com"}, "http://app.example.com", false},
		{"exact", []string{"https://app.example.com"}, "https://app.example.com", true},
		{"exact, default port spelled out", []string{"https://app.example.com"}, "https://app.example.com:443", true},
		{"exact, pattern spells out the default port", []string{"http://app.example.com:80"}, "http://app.example.com", true},
		{"exact, other port", []string{"https://app.example.com"}, "https://app.example.com:8443", false},
		{"exact port", []string{"http://localhost:3000"}, "http://localhost:3000", true},
		{"exact port, other port", []string{"http://localhost:3000"}, "http://localhost:3001", false},
		{"exact port, no port", []string{"http://localhost:3000"}, "http://localhost", false},
		{"second pattern matches", []string{"https://a.example.com", "https://b.example.com"}, "https://b.example.com", true},
		{"empty list", []string{}, "http://localhost", false},
		{"nil list", nil, "http://localhost", false},
		{"empty origin", loopback, "", false},
		{"null origin", loopback, "null", false},
		{"origin with a path", loopback, "http://localhost:3000/", false},
		{"origin with user info", loopback, "http://user@localhost", false},
		{"origin with wildcard port", loopback, "http://localhost:*", false},
		{"origin with port 0", loopback, "http://localhost:0", false},
		{"origin with a bad port", loopback, "http://localhost:99999", false},
		{"malformed pattern matches nothing", []string{"localhost:*", "http://*"}, "http://localhost", false},
		{"IPv6 zone", loopback, "http://[::1%25eth0]:80", false},
		{"IPv4 in brackets", []string{"http://[127.0.0.1]:*"}, "http://127.0.0.1", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := config.OriginAllowed(tt.allowed, tt.origin); got != tt.want {
				t.Errorf("OriginAllowed(%q, %q) = %v, want %v", tt.allowed, tt.origin, got, tt.want)
			}
		})
	}
}
