package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// cmpOpts lets cmp look inside ID, whose only field is its wire form.
var cmpOpts = cmp.AllowUnexported(ID{})

func TestDecode(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Message
		wantErr error // ErrParse or ErrInvalidMessage
	}{
		// Requests.
		{
			name: "request with integer id and params",
			in:   `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}`,
			want: &Request{ID: IntID(1), Method: "tools/call", Params: json.RawMessage(`{"name":"x"}`)},
		},
		{
			name: "request without params",
			in:   `{"jsonrpc":"2.0","id":1,"method":"ping"}`,
			want: &Request{ID: IntID(1), Method: "ping"},
		},
		{
			name: "request with null params",
			in:   `{"jsonrpc":"2.0","id":1,"method":"ping","params":null}`,
			want: &Request{ID: IntID(1), Method: "ping"},
		},
		{
			name: "request with empty params object",
			in:   `{"jsonrpc":"2.0","id":1,"method":"ping","params":{}}`,
			want: &Request{ID: IntID(1), Method: "ping", Params: json.RawMessage(`{}`)},
		},
		{
			name: "request with negative id",
			in:   `{"jsonrpc":"2.0","id":-5,"method":"ping"}`,
			want: &Request{ID: IntID(-5), Method: "ping"},
		},
		{
			name: "request with id beyond float64 precision",
			in:   `{"jsonrpc":"2.0","id":9007199254740993,"method":"ping"}`,
			want: &Request{ID: ID{raw: "9007199254740993"}, Method: "ping"},
		},
		{
			name: "request with id beyond int64",
			in:   `{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"ping"}`,
			want: &Request{ID: ID{raw: "123456789012345678901234567890"}, Method: "ping"},
		},
		{
			name: "request with string id",
			in:   `{"jsonrpc":"2.0","id":"abc","method":"ping"}`,
			want: &Request{ID: StringID("abc"), Method: "ping"},
		},
		{
			name: "request with escaped string id kept as sent",
			in:   `{"jsonrpc":"2.0","id":"a\"b\u0063\\","method":"ping"}`,
			want: &Request{ID: ID{raw: `"a\"b\u0063\\"`}, Method: "ping"},
		},
		{
			name: "request with escaped method",
			in:   `{"jsonrpc":"2.0","id":1,"method":"tools\/call"}`,
			want: &Request{ID: IntID(1), Method: "tools/call"},
		},
		{
			name: "params with unknown fields and out-of-range number kept byte for byte",
			in:   `{"jsonrpc":"2.0","id":1,"method":"x","params":{"zz":1e400, "a" : [1,2.50],"_meta":{"u":"\u00e9"}}}`,
			want: &Request{ID: IntID(1), Method: "x", Params: json.RawMessage(`{"zz":1e400, "a" : [1,2.50],"_meta":{"u":"\u00e9"}}`)},
		},
		{
			name: "pretty-printed params kept byte for byte",
			in:   "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"params\":{\n  \"a\": 1\r\n}}",
			want: &Request{ID: IntID(1), Method: "x", Params: json.RawMessage("{\n  \"a\": 1\r\n}")},
		},
		{
			name: "members in any order and surrounding whitespace",
			in:   " \n{\"params\":{\"a\":1},\"method\":\"x\",\"id\":2,\"jsonrpc\":\"2.0\"}\r\n",
			want: &Request{ID: IntID(2), Method: "x", Params: json.RawMessage(`{"a":1}`)},
		},
		{
			name: "unknown top-level members ignored",
			in:   `{"jsonrpc":"2.0","id":1,"method":"ping","extra":[1]}`,
			want: &Request{ID: IntID(1), Method: "ping"},
		},

		// Notifications.
		{
			name: "notification",
			in:   `{"jsonrpc":"2.0","method":"notifications/initialized"}`,
			want: &Notification{Method: "notifications/initialized"},
		},
		{
			name: "notification with params",
			in:   `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"x"}}`,
			want: &Notification{Method: "notifications/cancelled", Params: json.RawMessage(`{"requestId":7,"reason":"x"}`)},
		},

		// Responses.
		{
			name: "result response",
			in:   `{"jsonrpc":"2.0","id":1,"result":{"tools":[],"x":1e400}}`,
			want: &Response{ID: IntID(1), Result: json.RawMessage(`{"tools":[],"x":1e400}`)},
		},
		{
			name: "result response with string id",
			in:   `{"jsonrpc":"2.0","id":"r-1","result":{}}`,
			want: &Response{ID: StringID("r-1"), Result: json.RawMessage(`{}`)},
		},
		{
			name: "error response",
			in:   `{"jsonrpc":"2.0","id":3,"error":{"code":-32601,"message":"no such method"}}`,
			want: &Response{ID: IntID(3), Error: &Error{Code: CodeMethodNotFound, Message: "no such method"}},
		},
		{
			name: "error response with data kept byte for byte",
			in:   `{"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"bad","data":{"b": "<&>", "a":1e400}}}`,
			want: &Response{ID: IntID(3), Error: &Error{Code: CodeInvalidParams, Message: "bad", Data: json.RawMessage(`{"b": "<&>", "a":1e400}`)}},
		},
		{
			name: "error response with null id",
			in:   `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}`,
			want: &Response{Error: &Error{Code: CodeParseError, Message: "parse error"}},
		},
		{
			name: "error response without id",
			in:   `{"jsonrpc":"2.0","error":{"code":-32600,"message":"invalid"}}`,
			want: &Response{Error: &Error{Code: CodeInvalidRequest, Message: "invalid"}},
		},

		// Not JSON.
		{name: "empty input", in: ``, wantErr: ErrParse},
		{name: "whitespace only", in: " \n", wantErr: ErrParse},
		{name: "truncated", in: `{"jsonrpc":"2.0","id":1,"method":"ping"`, wantErr: ErrParse},
		{name: "garbage", in: `hello`, wantErr: ErrParse},
		{name: "trailing garbage", in: `{"jsonrpc":"2.0","method":"ping"} x`, wantErr: ErrParse},
		{name: "two messages", in: `{"jsonrpc":"2.0","method":"a"}{"jsonrpc":"2.0","method":"b"}`, wantErr: ErrParse},
		{name: "trailing comma", in: `{"jsonrpc":"2.0","method":"ping",}`, wantErr: ErrParse},
		{name: "single quotes", in: `{'jsonrpc':'2.0','method':'ping'}`, wantErr: ErrParse},

		// JSON, but not a valid message.
		{name: "top-level array", in: `[{"jsonrpc":"2.0","method":"ping"}]`, wantErr: ErrInvalidMessage},
		{name: "top-level string", in: `"ping"`, wantErr: ErrInvalidMessage},
		{name: "top-level number", in: `1`, wantErr: ErrInvalidMessage},
		{name: "top-level null", in: `null`, wantErr: ErrInvalidMessage},
		{name: "empty object", in: `{}`, wantErr: ErrInvalidMessage},
		{name: "missing jsonrpc", in: `{"id":1,"method":"ping"}`, wantErr: ErrInvalidMessage},
		{name: "wrong jsonrpc version", in: `{"jsonrpc":"1.0","id":1,"method":"ping"}`, wantErr: ErrInvalidMessage},
		{name: "jsonrpc as number", in: `{"jsonrpc":2.0,"id":1,"method":"ping"}`, wantErr: ErrInvalidMessage},
		{name: "method as number", in: `{"jsonrpc":"2.0","id":1,"method":1}`, wantErr: ErrInvalidMessage},
		{name: "empty method", in: `{"jsonrpc":"2.0","id":1,"method":""}`, wantErr: ErrInvalidMessage},
		{name: "request id null", in: `{"jsonrpc":"2.0","id":null,"method":"ping"}`, wantErr: ErrInvalidMessage},
		{name: "request id float", in: `{"jsonrpc":"2.0","id":1.5,"method":"ping"}`, wantErr: ErrInvalidMessage},
		{name: "request id integral float", in: `{"jsonrpc":"2.0","id":1.0,"method":"ping"}`, wantErr: ErrInvalidMessage},
		{name: "request id exponent", in: `{"jsonrpc":"2.0","id":1e3,"method":"ping"}`, wantErr: ErrInvalidMessage},
		{name: "request id bool", in: `{"jsonrpc":"2.0","id":true,"method":"ping"}`, wantErr: ErrInvalidMessage},
		{name: "request id object", in: `{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`, wantErr: ErrInvalidMessage},
		{name: "request id array", in: `{"jsonrpc":"2.0","id":[1],"method":"ping"}`, wantErr: ErrInvalidMessage},
		{name: "params array", in: `{"jsonrpc":"2.0","id":1,"method":"x","params":[1,2]}`, wantErr: ErrInvalidMessage},
		{name: "params string", in: `{"jsonrpc":"2.0","id":1,"method":"x","params":"{}"}`, wantErr: ErrInvalidMessage},
		{name: "params number", in: `{"jsonrpc":"2.0","id":1,"method":"x","params":1}`, wantErr: ErrInvalidMessage},
		{name: "params bool", in: `{"jsonrpc":"2.0","id":1,"method":"x","params":false}`, wantErr: ErrInvalidMessage},
		{name: "notification params array", in: `{"jsonrpc":"2.0","method":"x","params":[]}`, wantErr: ErrInvalidMessage},
		{name: "request carrying result", in: `{"jsonrpc":"2.0","id":1,"method":"x","result":{}}`, wantErr: ErrInvalidMessage},
		{name: "request carrying error", in: `{"jsonrpc":"2.0","id":1,"method":"x","error":{"code":1,"message":"m"}}`, wantErr: ErrInvalidMessage},
		{name: "result and error", in: `{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"m"}}`, wantErr: ErrInvalidMessage},
		{name: "result without id", in: `{"jsonrpc":"2.0","result":{}}`, wantErr: ErrInvalidMessage},
		{name: "result with null id", in: `{"jsonrpc":"2.0","id":null,"result":{}}`, wantErr: ErrInvalidMessage},
		{name: "result with float id", in: `{"jsonrpc":"2.0","id":2.5,"result":{}}`, wantErr: ErrInvalidMessage},
		{name: "error with bool id", in: `{"jsonrpc":"2.0","id":false,"error":{"code":1,"message":"m"}}`, wantErr: ErrInvalidMessage},
		{name: "error not an object", in: `{"jsonrpc":"2.0","id":1,"error":"boom"}`, wantErr: ErrInvalidMessage},
		{name: "error code not an integer", in: `{"jsonrpc":"2.0","id":1,"error":{"code":"x","message":"m"}}`, wantErr: ErrInvalidMessage},
		{name: "id only", in: `{"jsonrpc":"2.0","id":1}`, wantErr: ErrInvalidMessage},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Decode([]byte(tt.in))
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("Decode(%q) = %#v, want an error wrapping %v", tt.in, got, tt.wantErr)
				}
				if !errors.Is(err, tt.wantErr) {
					t.Errorf("Decode(%q) error %q does not wrap %v", tt.in, err, tt.wantErr)
				}
				other := ErrParse
				if tt.wantErr == ErrParse {
					other = ErrInvalidMessage
				}
				if errors.Is(err, other) {
					t.Errorf("Decode(%q) error %q also wraps %v", tt.in, err, other)
				}
				if got != nil {
					t.Errorf("Decode(%q) returned %#v along with error", tt.in, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode(%q): %v", tt.in, err)
			}
			if diff := cmp.Diff(tt.want, got, cmpOpts); diff != "" {
				t.Errorf("Decode(%q) (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestEncode(t *testing.T) {
	tests := []struct {
		name string
		msg  Message
		want string
	}{
		{
			name: "request",
			msg:  &Request{ID: IntID(1), Method: "tools/call", Params: json.RawMessage(`{"name":"x"}`)},
			want: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}`,
		},
		{
			name: "request without params",
			msg:  &Request{ID: StringID("a"), Method: "ping"},
			want: `{"jsonrpc":"2.0","id":"a","method":"ping"}`,
		},
		{
			name: "request with huge id",
			msg:  &Request{ID: ID{raw: "123456789012345678901234567890"}, Method: "ping"},
			want: `{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"ping"}`,
		},
		{
			name: "request with escaped string id kept as sent",
			msg:  &Request{ID: ID{raw: `"a\u0062"`}, Method: "ping"},
			want: `{"jsonrpc":"2.0","id":"a\u0062","method":"ping"}`,
		},
		{
			name: "method escaped",
			msg:  &Request{ID: IntID(1), Method: "a\"b<c>\n"},
			want: `{"jsonrpc":"2.0","id":1,"method":"a\"b\u003cc\u003e\n"}`,
		},
		{
			name: "params kept byte for byte",
			msg:  &Request{ID: IntID(1), Method: "x", Params: json.RawMessage(`{"zz":1e400, "a" : "<&>"}`)},
			want: `{"jsonrpc":"2.0","id":1,"method":"x","params":{"zz":1e400, "a" : "<&>"}}`,
		},
		{
			name: "pretty-printed params compacted",
			msg:  &Request{ID: IntID(1), Method: "x", Params: json.RawMessage("{\n  \"a\": [\r\n    1e400,\n    \"s p\"\n  ]\n}")},
			want: `{"jsonrpc":"2.0","id":1,"method":"x","params":{"a":[1e400,"s p"]}}`,
		},
		{
			name: "notification",
			msg:  &Notification{Method: "notifications/initialized"},
			want: `{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		},
		{
			name: "notification with params",
			msg:  &Notification{Method: "notifications/progress", Params: json.RawMessage(`{"progress":1}`)},
			want: `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}`,
		},
		{
			name: "result response",
			msg:  &Response{ID: IntID(9), Result: json.RawMessage(`{"a":1e400}`)},
			want: `{"jsonrpc":"2.0","id":9,"result":{"a":1e400}}`,
		},
		{
			name: "empty result becomes an empty object",
			msg:  &Response{ID: IntID(9)},
			want: `{"jsonrpc":"2.0","id":9,"result":{}}`,
		},
		{
			name: "pretty-printed result compacted",
			msg:  &Response{ID: IntID(9), Result: json.RawMessage("{\n\t\"a\": 1\n}")},
			want: `{"jsonrpc":"2.0","id":9,"result":{"a":1}}`,
		},
		{
			name: "error response",
			msg:  &Response{ID: IntID(2), Error: &Error{Code: CodeMethodNotFound, Message: "no such method"}},
			want: `{"jsonrpc":"2.0","id":2,"error":{"code":-32601,"message":"no such method"}}`,
		},
		{
			name: "error response without id omits it",
			msg:  &Response{Error: &Error{Code: CodeParseError, Message: "parse error"}},
			want: `{"jsonrpc":"2.0","error":{"code":-32700,"message":"parse error"}}`,
		},
		{
			name: "error data kept byte for byte",
			msg:  &Response{ID: IntID(2), Error: &Error{Code: 1, Message: "m", Data: json.RawMessage(`{"b": "<&>", "a":1e400}`)}},
			want: `{"jsonrpc":"2.0","id":2,"error":{"code":1,"message":"m","data":{"b": "<&>", "a":1e400}}}`,
		},
		{
			name: "pretty-printed error data compacted",
			msg:  &Response{ID: IntID(2), Error: &Error{Code: 1, Message: "m", Data: json.RawMessage("[\n 1,\n 2\n]")}},
			want: `{"jsonrpc":"2.0","id":2,"error":{"code":1,"message":"m","data":[1,2]}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Encode(tt.msg)
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			if diff := cmp.Diff(tt.want, string(got)); diff != "" {
				t.Errorf("Encode (-want +got):\n%s", diff)
			}
			if bytes.ContainsAny(got, "\r\n") {
				t.Errorf("Encode output %q contains a line break", got)
			}
			if !json.Valid(got) {
				t.Errorf("Encode output %q is not valid JSON", got)
			}

			prefix := []byte("data: ")
			appended, err := AppendEncode(bytes.Clone(prefix), tt.msg)
			if err != nil {
				t.Fatalf("AppendEncode: %v", err)
			}
			if diff := cmp.Diff("data: "+tt.want, string(appended)); diff != "" {
				t.Errorf("AppendEncode (-want +got):\n%s", diff)
			}
		})
	}
}

// TestEncodeDecodeRoundTrip decodes what Encode wrote for every message kind, including params
// that were pretty-printed on the way in.
func TestEncodeDecodeRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		in   string
	}{
		{name: "request", in: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","unknown":{"deep":[1e400]}}}`},
		{name: "request with huge id", in: `{"jsonrpc":"2.0","id":-123456789012345678901234567890,"method":"ping"}`},
		{name: "request with escaped string id", in: `{"jsonrpc":"2.0","id":"\u00e9\n\"","method":"ping"}`},
		{name: "request with pretty params", in: "{\n  \"jsonrpc\": \"2.0\",\n  \"id\": 1,\n  \"method\": \"x\",\n  \"params\": {\n    \"a\": \"line\\nbreak\",\r\n    \"b\": 1e400\n  }\n}"},
		{name: "notification", in: `{"jsonrpc":"2.0","method":"notifications/initialized"}`},
		{name: "notification with pretty params", in: "{\"jsonrpc\":\"2.0\",\"method\":\"n\",\"params\":{\n\"a\":[\n1\n]\n}}"},
		{name: "result", in: `{"jsonrpc":"2.0","id":"x","result":{"content":[{"type":"text","text":"<b>&amp;</b>"}]}}`},
		{name: "pretty result", in: "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\n\"a\":1\n}}"},
		{name: "error", in: `{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"<bad> & \u2028","data":{"why":"<&>"}}}`},
		{name: "pretty error data", in: "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":1,\"message\":\"m\",\"data\":{\n\"a\":1\n}}}"},
		{name: "error with null id", in: `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}`},
		{name: "error without id", in: `{"jsonrpc":"2.0","error":{"code":-32600,"message":"invalid"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			first, err := Decode([]byte(tt.in))
			if err != nil {
				t.Fatalf("Decode(%q): %v", tt.in, err)
			}
			enc, err := Encode(first)
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			if bytes.ContainsAny(enc, "\r\n") {
				t.Errorf("Encode output %q contains a line break", enc)
			}
			second, err := Decode(enc)
			if err != nil {
				t.Fatalf("Decode(Encode(...)) of %q: %v", enc, err)
			}
			if diff := cmp.Diff(normalize(first), second, cmpOpts); diff != "" {
				t.Errorf("Decode(Encode(m)) differs from m (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEncodeErrors(t *testing.T) {
	tests := []struct {
		name string
		msg  Message
	}{
		{name: "request without id", msg: &Request{Method: "ping"}},
		{name: "nil message", msg: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, err := Encode(tt.msg); err == nil {
				t.Errorf("Encode(%#v) = %q, want an error", tt.msg, got)
			}
			if got, err := AppendEncode([]byte("x"), tt.msg); err == nil {
				t.Errorf("AppendEncode(%#v) = %q, want an error", tt.msg, got)
			}
		})
	}
}

func TestIsBatch(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want bool
	}{
		{name: "array", in: `[{"jsonrpc":"2.0","method":"a"}]`, want: true},
		{name: "empty array", in: `[]`, want: true},
		{name: "array after whitespace", in: " \t\r\n[1]", want: true},
		{name: "object", in: `{"jsonrpc":"2.0","method":"a"}`},
		{name: "object after whitespace", in: " \n{}"},
		{name: "empty", in: ``},
		{name: "whitespace only", in: " \n\t"},
		{name: "string holding a bracket", in: `"["`},
		{name: "garbage", in: `x[`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := IsBatch([]byte(tt.in)); got != tt.want {
				t.Errorf("IsBatch(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

func TestAppendString(t *testing.T) {
	tests := []struct {
		name string
		in   string
	}{
		{name: "empty", in: ""},
		{name: "plain", in: "tools/call"},
		{name: "space and punctuation", in: "a b/c:d-e_f.g~!@#$%^*()"},
		{name: "quote", in: `a"b`},
		{name: "backslash", in: `a\b`},
		{name: "newline and tab", in: "a\nb\tc\r"},
		{name: "control characters", in: "\x00\x01\x1f"},
		{name: "DEL", in: "\x7f"},
		{name: "html characters", in: "<script>&amp;</script>"},
		{name: "non-ASCII", in: "héllo 世界 🙂"},
		{name: "line and paragraph separators", in: "a\u2028b\u2029c"},
		{name: "invalid UTF-8", in: "a\xffb\xc3"},
		{name: "escape at the end", in: "abc\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, err := json.Marshal(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			got := AppendString([]byte("prefix:"), tt.in)
			if diff := cmp.Diff("prefix:"+string(want), string(got)); diff != "" {
				t.Errorf("AppendString(%q) (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"a":1e400}}}`,
		`{"jsonrpc":"2.0","id":"a\"b","method":"ping"}`,
		`{"jsonrpc":"2.0","id":-123456789012345678901234567890,"method":"ping","params":null}`,
		`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":1}}`,
		`{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"<&>"}]}}`,
		`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error","data":{"x":"<&>"}}}`,
		`{"jsonrpc":"2.0","error":{"code":-32600,"message":"m"}}`,
		"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"params\":{\n \"a\": [1,\r\n2]\n}}",
		`{"jsonrpc":"2.0","id":1.5,"method":"ping"}`,
		`[{"jsonrpc":"2.0","method":"a"}]`,
		`{"jsonrpc":"2.0"`,
		``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		first, err := Decode(data)
		if err != nil {
			if !errors.Is(err, ErrParse) && !errors.Is(err, ErrInvalidMessage) {
				t.Fatalf("Decode(%q) error %q wraps neither ErrParse nor ErrInvalidMessage", data, err)
			}
			if first != nil {
				t.Fatalf("Decode(%q) returned %#v along with error", data, first)
			}
			return
		}
		enc, err := Encode(first)
		if err != nil {
			t.Fatalf("Encode of Decode(%q) = %#v: %v", data, first, err)
		}
		if bytes.ContainsAny(enc, "\r\n") {
			t.Fatalf("Encode output %q contains a line break", enc)
		}
		if !json.Valid(enc) {
			t.Fatalf("Encode output %q is not valid JSON", enc)
		}
		second, err := Decode(enc)
		if err != nil {
			t.Fatalf("Decode(Encode(Decode(%q))) of %q: %v", data, enc, err)
		}
		if diff := cmp.Diff(normalize(first), second, cmpOpts); diff != "" {
			t.Fatalf("Decode(%q), Encode %q, Decode differs (-want +got):\n%s", data, enc, diff)
		}
	})
}

// normalize returns m as Encode is documented to write it: raw values holding a line break
// compacted, an absent result as {}.
func normalize(m Message) Message {
	compact := func(raw json.RawMessage) json.RawMessage {
		if !bytes.ContainsAny(raw, "\r\n") {
			return raw
		}
		var b bytes.Buffer
		if err := json.Compact(&b, raw); err != nil {
			return raw
		}
		return b.Bytes()
	}
	switch m := m.(type) {
	case *Request:
		return &Request{ID: m.ID, Method: m.Method, Params: compact(m.Params)}
	case *Notification:
		return &Notification{Method: m.Method, Params: compact(m.Params)}
	case *Response:
		r := &Response{ID: m.ID, Result: compact(m.Result)}
		if m.Error != nil {
			e := *m.Error
			e.Data = compact(e.Data)
			r.Error = &e
		} else if len(r.Result) == 0 {
			r.Result = json.RawMessage(`{}`)
		}
		return r
	}
	return m
}
