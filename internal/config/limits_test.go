package config_test

import (
	"net/netip"
	"testing"

	"github.com/manifold-mcp/manifold/internal/config"
)

// TestSessionsPerAddressDefault: max_sessions_per_address defaulted to 512 whatever
// max_sessions was, so two addresses filled a gateway of 1000 sessions. It defaults to an
// eighth of max_sessions, at least 1 and at most 512; a value given is kept.
func TestSessionsPerAddressDefault(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want int
	}{
		{"upstreams: []\n", 125},
		{"max_sessions: 16\nupstreams: []\n", 2},
		{"max_sessions: 5\nupstreams: []\n", 1},
		{"max_sessions: 100000\nupstreams: []\n", 512},
		{"max_sessions: 16\nauth:\n  max_sessions_per_address: 10\nupstreams: []\n", 10},
	} {
		c, err := config.Parse("gw.yaml", []byte(tc.yaml), env(nil))
		if err != nil {
			t.Fatalf("%q: %v", tc.yaml, err)
		}
		if got := c.Auth.MaxSessionsPerAddress; got != tc.want {
			t.Errorf("%q: max_sessions_per_address %d, want %d", tc.yaml, got, tc.want)
		}
	}
}

func TestSessionEvictIdleMustBePositive(t *testing.T) {
	_, err := config.Parse("gw.yaml", []byte("session_evict_idle: 0s\nupstreams: []\n"), env(nil))
	want := "gw.yaml:1: session_evict_idle: must be greater than 0, like 5m: when max_sessions is reached, a session idle this long makes room for a new one"
	if err == nil || err.Error() != want {
		t.Errorf("session_evict_idle: 0s: %v, want %q", err, want)
	}
}

func TestParseTrustedProxy(t *testing.T) {
	for _, tc := range []struct {
		in, want string
	}{
		{"10.0.0.0/8", "10.0.0.0/8"},
		{"10.1.2.3/8", "10.0.0.0/8"},
		{"192.0.2.7", "192.0.2.7/32"},
		{"::1", "::1/128"},
		{"2001:db8::/32", "2001:db8::/32"},
		{"::ffff:10.0.0.7", "10.0.0.7/32"},
		{"::ffff:10.0.0.0/104", "10.0.0.0/8"},
		{"fe80::1%eth0", "fe80::1/128"},
		{" 10.0.0.7 ", "10.0.0.7/32"},
	} {
		got, err := config.ParseTrustedProxy(tc.in)
		if err != nil || got != netip.MustParsePrefix(tc.want) {
			t.Errorf("ParseTrustedProxy(%q) = %v, %v; want %s", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "proxy.example.com", "10.0.0.0/33", "10.0.0.1:80"} {
		if _, err := config.ParseTrustedProxy(bad); err == nil {
			t.Errorf("ParseTrustedProxy(%q) succeeded, want an error", bad)
		}
	}
}
