package gateway

import (
	"bytes"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestReadEvents: the data of every event with data, lines of one event joined; priming
// events, comments and a last event cut off by the end of the stream give nothing.
func TestReadEvents(t *testing.T) {
	stream := "id: 1\ndata:\n\n" + // a priming event
		": keep-alive\n\n" +
		"event: message\nid: 2\ndata: {\"a\":\r\ndata: 1}\r\n\r\n" +
		"data:{\"b\":2}\n\n" +
		"data: {\"cut\":"
	var got []string
	err := readEvents(strings.NewReader(stream), func(data []byte) { got = append(got, string(data)) })
	if err != io.EOF {
		t.Errorf("readEvents ended with %v, want io.EOF", err)
	}
	want := []string{"{\"a\":\n1}", `{"b":2}`}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events mismatch (-want +got):\n%s", diff)
	}
}

// TestLineWriterOneMessageALine: a message with line breaks goes out compacted on one line; one
// that is not JSON is dropped rather than break the framing.
func TestLineWriterOneMessageALine(t *testing.T) {
	var out bytes.Buffer
	lw := &lineWriter{w: &out, logger: slog.New(slog.DiscardHandler)}
	lw.write([]byte("{\"a\":\n 1,\r\n\"b\":\"x\\ny\"}"))
	lw.write([]byte("not\njson"))
	lw.write([]byte(`{"c":3}`))
	if got, want := out.String(), "{\"a\":1,\"b\":\"x\\ny\"}\n{\"c\":3}\n"; got != want {
		t.Errorf("written %q, want %q", got, want)
	}
}
