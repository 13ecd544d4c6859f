package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
)

// ID is a JSON-RPC request id: a JSON string or integer, kept as the exact bytes the peer sent
// so that a response carries back the id it was asked with (7 stays 7, never "7" or 7.0, and
// integers beyond float64 precision survive). The zero ID means "no id".
//
// ID is comparable and may be used as a map key; two ids are equal when their bytes are.
type ID struct {
	raw string
}

// errBadID is wrapped by the decoding errors for ids that MCP does not allow.
var errBadID = errors.New("id must be a string or an integer")

// IntID returns the integer id n.
func IntID(n int64) ID { return ID{raw: strconv.FormatInt(n, 10)} }

// StringID returns the string id s.
func StringID(s string) ID {
	b, _ := json.Marshal(s) // a string always marshals
	return ID{raw: string(b)}
}

// ParseID validates raw as an MCP request id (a JSON string, or an integer without fraction or
// exponent; not null) and returns it.
func ParseID(raw []byte) (ID, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return ID{}, errBadID
	}
	switch c := raw[0]; {
	case c == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return ID{}, errBadID
		}
		return ID{raw: string(raw)}, nil
	case c == '-' || (c >= '0' && c <= '9'):
		digits := raw
		if c == '-' {
			digits = raw[1:]
		}
		if len(digits) == 0 {
			return ID{}, errBadID
		}
		for _, d := range digits {
			if d < '0' || d > '9' {
				return ID{}, errBadID
			}
		}
		return ID{raw: string(raw)}, nil
	}
	return ID{}, errBadID
}

// IsZero reports whether id is absent.
func (id ID) IsZero() bool { return id.raw == "" }

// Raw returns the id's JSON bytes, or nil for the zero ID.
func (id ID) Raw() json.RawMessage {
	if id.raw == "" {
		return nil
	}
	return json.RawMessage(id.raw)
}

// Int returns the id's value when it is an integer that fits in int64.
func (id ID) Int() (int64, bool) {
	n, err := strconv.ParseInt(id.raw, 10, 64)
	return n, err == nil
}

// String returns the id as it appears on the wire (strings keep their quotes), for logs.
func (id ID) String() string { return id.raw }

// MarshalJSON implements json.Marshaler. The zero ID marshals as null.
func (id ID) MarshalJSON() ([]byte, error) {
	if id.raw == "" {
		return []byte("null"), nil
	}
	return []byte(id.raw), nil
}

// UnmarshalJSON implements json.Unmarshaler with the rules of [ParseID].
func (id *ID) UnmarshalJSON(b []byte) error {
	v, err := ParseID(b)
	if err != nil {
		return err
	}
	*id = v
	return nil
}
