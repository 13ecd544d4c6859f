package protocol

import (
	"encoding/json"
	"testing"
)

var (
	benchCall     = []byte(`{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"demo__echo","arguments":{"text":"hello-7-1234"},"_meta":{"progressToken":"p-1"}}}`)
	benchResponse = &Response{ID: IntID(42), Result: json.RawMessage(`{"content":[{"type":"text","text":"hello-7-1234"}]}`)}
)

func BenchmarkDecodeRequest(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(benchCall)))
	for b.Loop() {
		if _, err := Decode(benchCall); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeResponse(b *testing.B) {
	b.ReportAllocs()
	buf := make([]byte, 0, 256)
	for b.Loop() {
		var err error
		if buf, err = AppendEncode(buf[:0], benchResponse); err != nil {
			b.Fatal(err)
		}
	}
}
