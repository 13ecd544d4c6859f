package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Message is one JSON-RPC 2.0 message: a *Request, a *Notification or a *Response.
type Message interface {
	isMessage()
}

// Request is a JSON-RPC request: it has an id and expects a response.
type Request struct {
	ID     ID
	Method string
	// Params is the raw params object, or nil when the request had none.
	Params json.RawMessage
}

// Notification is a JSON-RPC notification: it has no id and gets no response.
type Notification struct {
	Method string
	// Params is the raw params object, or nil when the notification had none.
	Params json.RawMessage
}

// Response answers a request: exactly one of Result and Error is set.
type Response struct {
	// ID is the id of the request answered; zero when the request's id could not be read.
	ID     ID
	Result json.RawMessage
	Error  *Error
}

func (*Request) isMessage()      {}
func (*Notification) isMessage() {}
func (*Response) isMessage()     {}

// ErrParse is wrapped by Decode when the input is not JSON; it maps to CodeParseError.
var ErrParse = errors.New("parse error")

// ErrInvalidMessage is wrapped by Decode when the input is JSON but not a valid JSON-RPC 2.0
// message for MCP; it maps to CodeInvalidRequest.
var ErrInvalidMessage = errors.New("invalid JSON-RPC message")

// IsBatch reports whether data is a JSON array (a JSON-RPC batch) rather than one message.
func IsBatch(data []byte) bool {
	data = bytes.TrimLeft(data, " \t\r\n")
	return len(data) > 0 && data[0] == '['
}

// Decode parses one JSON-RPC message. Params, results and error data are kept byte for byte;
// they share memory with data, which the caller must not modify afterwards. Member names are
// matched exactly, as JSON-RPC spells them; of a repeated member the last counts. Errors wrap
// ErrParse or ErrInvalidMessage.
func Decode(data []byte) (Message, error) {
	if !json.Valid(data) {
		var probe json.RawMessage
		err := json.Unmarshal(data, &probe)
		if err == nil {
			err = errors.New("invalid JSON")
		}
		return nil, fmt.Errorf("%w: %v", ErrParse, err)
	}
	var (
		version, rawID, rawMethod, params, result, rawError []byte
		hasResult                                           bool
	)
	err := eachMember(data, func(key []byte, escaped bool, start, end int) bool {
		v := data[start:end]
		if escaped {
			return true // no JSON-RPC member name needs escapes
		}
		switch string(key) {
		case "jsonrpc":
			version = v
		case "id":
			rawID = v
		case "method":
			rawMethod = v
		case "params":
			params = v
		case "result":
			result, hasResult = v, true
		case "error":
			rawError = v
		}
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("%w: a message must be a JSON object", ErrInvalidMessage)
	}
	if string(version) != `"2.0"` {
		return nil, fmt.Errorf("%w: \"jsonrpc\" must be \"2.0\"", ErrInvalidMessage)
	}
	hasID := len(rawID) > 0 && string(rawID) != "null"
	var id ID
	if hasID {
		if id, err = ParseID(rawID); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidMessage, err)
		}
	}
	if params, err = objectOrAbsent("params", params); err != nil {
		return nil, err
	}
	if rawMethod != nil {
		var method string
		if len(rawMethod) < 2 || rawMethod[0] != '"' {
			return nil, fmt.Errorf("%w: \"method\" must be a string", ErrInvalidMessage)
		}
		if bytes.IndexByte(rawMethod, '\\') < 0 && utf8.Valid(rawMethod) {
			method = string(rawMethod[1 : len(rawMethod)-1])
		} else if err := json.Unmarshal(rawMethod, &method); err != nil {
			return nil, fmt.Errorf("%w: \"method\" must be a string", ErrInvalidMessage)
		}
		if method == "" {
			return nil, fmt.Errorf("%w: \"method\" must not be empty", ErrInvalidMessage)
		}
		if hasResult || rawError != nil {
			return nil, fmt.Errorf("%w: a request cannot carry \"result\" or \"error\"", ErrInvalidMessage)
		}
		if len(rawID) > 0 && !hasID {
			return nil, fmt.Errorf("%w: a request id must not be null", ErrInvalidMessage)
		}
		if hasID {
			return &Request{ID: id, Method: method, Params: params}, nil
		}
		return &Notification{Method: method, Params: params}, nil
	}
	switch {
	case hasResult && rawError != nil:
		return nil, fmt.Errorf("%w: a response cannot carry both \"result\" and \"error\"", ErrInvalidMessage)
	case rawError != nil:
		var e Error
		if err := json.Unmarshal(rawError, &e); err != nil {
			return nil, fmt.Errorf("%w: malformed \"error\": %v", ErrInvalidMessage, err)
		}
		return &Response{ID: id, Error: &e}, nil
	case hasResult:
		if !hasID {
			return nil, fmt.Errorf("%w: a result response needs an id", ErrInvalidMessage)
		}
		return &Response{ID: id, Result: result}, nil
	}
	return nil, fmt.Errorf("%w: neither \"method\" nor \"result\" nor \"error\" is present", ErrInvalidMessage)
}

// objectOrAbsent checks that params is absent, null or a JSON object; null becomes absent.
func objectOrAbsent(field string, raw json.RawMessage) (json.RawMessage, error) {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		return nil, nil
	}
	if trimmed[0] != '{' {
		return nil, fmt.Errorf("%w: %q must be an object", ErrInvalidMessage, field)
	}
	return raw, nil
}

// Encode returns the compact JSON form of m, with no newline inside, as stdio framing
// requires. Raw params and results are copied as they are, compacted only when they contain
// a line break.
func Encode(m Message) ([]byte, error) {
	return AppendEncode(nil, m)
}

// AppendEncode appends the encoding of m to buf, as Encode does.
func AppendEncode(buf []byte, m Message) ([]byte, error) {
	buf = append(buf, `{"jsonrpc":"2.0"`...)
	switch m := m.(type) {
	case *Request:
		if m.ID.IsZero() {
			return nil, errors.New("encode request: missing id")
		}
		buf = append(buf, `,"id":`...)
		buf = append(buf, m.ID.raw...)
		buf = appendMethodAndParams(buf, m.Method, m.Params)
	case *Notification:
		buf = appendMethodAndParams(buf, m.Method, m.Params)
	case *Response:
		if !m.ID.IsZero() {
			buf = append(buf, `,"id":`...)
			buf = append(buf, m.ID.raw...)
		}
		if m.Error != nil {
			// Written by hand rather than with json.Marshal, which would HTML-escape and so
			// rewrite the raw data that Decode kept byte for byte.
			buf = append(buf, `,"error":{"code":`...)
			buf = strconv.AppendInt(buf, m.Error.Code, 10)
			buf = append(buf, `,"message":`...)
			buf = AppendString(buf, m.Error.Message)
			if len(m.Error.Data) > 0 {
				buf = append(buf, `,"data":`...)
				buf = appendRaw(buf, m.Error.Data, "null")
			}
			buf = append(buf, '}')
		} else {
			buf = append(buf, `,"result":`...)
			buf = appendRaw(buf, m.Result, "{}")
		}
	default:
		return nil, fmt.Errorf("encode: unknown message type %T", m)
	}
	return append(buf, '}'), nil
}

func appendMethodAndParams(buf []byte, method string, params json.RawMessage) []byte {
	buf = append(buf, `,"method":`...)
	buf = AppendString(buf, method)
	if len(params) > 0 {
		buf = append(buf, `,"params":`...)
		buf = appendRaw(buf, params, "{}")
	}
	return buf
}

// appendRaw appends raw JSON, compacted when it holds a line break; empty raw becomes def.
func appendRaw(buf []byte, raw json.RawMessage, def string) []byte {
	if len(raw) == 0 {
		return append(buf, def...)
	}
	if bytes.IndexByte(raw, '\n') < 0 && bytes.IndexByte(raw, '\r') < 0 {
		return append(buf, raw...)
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		// Raw values come from decoded messages or from json.Marshal, so they are valid;
		// keep the bytes rather than lose the message.
		return append(buf, bytes.ReplaceAll(bytes.ReplaceAll(raw, []byte("\r"), nil), []byte("\n"), nil)...)
	}
	return append(buf, b.Bytes()...)
}

// AppendString appends s as a JSON string.
func AppendString(buf []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s)
			return append(buf, b...)
		}
	}
	buf = append(buf, '"')
	buf = append(buf, s...)
	return append(buf, '"')
}
