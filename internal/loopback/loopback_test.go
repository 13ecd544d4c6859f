package loopback

import "testing"

func TestHost(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost": true, "LOCALHOST:8080": true, "127.0.0.1": true, "127.1.2.3:80": true, "[::1]:8081": true, "::1": true,
		"evil.example": false, "localhost.evil.example": false, "10.0.0.1:80": false, "[::2]:80": false, "": false,
	} {
		if got := Host(host); got != want {
			t.Errorf("Host(%q) = %v, want %v", host, got, want)
		}
	}
}
