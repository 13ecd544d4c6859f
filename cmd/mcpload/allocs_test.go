//go:build !race

// The race detector makes sync.Pool, which json.Valid uses, drop items at random, so
// allocations are counted only without it.

package main

import (
	"strconv"
	"testing"
)

// TestHotPathAllocs: building a request and checking a good answer allocate nothing, for
// either method and either protocol.
func TestHotPathAllocs(t *testing.T) {
	cfg, err := Config{URL: "http://x/mcp", Calls: 1, MinTools: 100}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ method, protocol string }{
		{MethodCall, ProtocolLegacy}, {MethodList, ProtocolLegacy},
		{MethodCall, ProtocolModern}, {MethodList, ProtocolModern},
	} {
		method := tc.method
		cfg.Method, cfg.Protocol = tc.method, tc.protocol
		wl := newWorkload(&cfg, 3)
		var id int64
		var seq int
		allocs := testing.AllocsPerRun(100, func() {
			seq++
			id = int64(seq)*4 + 3
			wl.build(id, seq)
		})
		if allocs != 0 {
			t.Errorf("%s %s: build allocates %v times", tc.protocol, method, allocs)
		}
		// Check answers to the last request built.
		var msg []byte
		if method == MethodList {
			msg = toolsListAnswer(id, 100)
		} else {
			msg = []byte(`{"jsonrpc":"2.0","id":` + strconv.FormatInt(id, 10) +
				`,"result":{"content":[{"type":"text","text":"hello-3-` + strconv.Itoa(seq) + `"}]}}`)
		}
		allocs = testing.AllocsPerRun(100, func() {
			if kind, err := wl.check(msg, id); kind != "" {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%s %s: check allocates %v times", tc.protocol, method, allocs)
		}
	}
}
