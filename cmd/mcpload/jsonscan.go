package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// This file reads JSON-RPC answers without encoding/json's reflection: a small scanner
// finds member boundaries and returns raw tokens (sub-slices of the input), so checking an
// answer allocates nothing. The scanner is bounds-safe on any input (it reports malformed
// input rather than panicking), because the stdio reader routes lines by id before they
// are validated; checks of whole answers call json.Valid first.

// skipSpace returns the index of the first byte at or after i that is not JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// skipString returns the index just past the string whose opening quote is b[i], or -1
// when it is not terminated.
func skipString(b []byte, i int) int {
	i++
	for i <= len(b) {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return -1
		}
		i += j
		// The quote is escaped when an odd number of backslashes precede it; the opening
		// quote stops the count.
		n := 0
		for k := i - 1; b[k] == '\\'; k-- {
			n++
		}
		i++
		if n%2 == 0 {
			return i
		}
	}
	return -1
}

// skipValue returns the index just past the value that starts at b[i], or -1 when there
// is none.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				if i = skipString(b, i); i < 0 {
					return -1
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return -1
	case ',', ':', '}', ']':
		return -1
	default: // number, true, false, null
		start := i
		for i < len(b) {
			switch b[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return i
			}
			i++
		}
		if i == start {
			return -1
		}
		return i
	}
}

// objectScanner walks the members of one JSON object; see newObjectScanner.
type objectScanner struct {
	b   []byte
	i   int  // index of the next member's key, or of the closing brace
	bad bool // set when the object turned out malformed
}

// newObjectScanner returns a scanner over obj and whether obj starts as an object.
func newObjectScanner(obj []byte) (objectScanner, bool) {
	i := skipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return objectScanner{}, false
	}
	return objectScanner{b: obj, i: skipSpace(obj, i+1)}, true
}

// next returns the next member: its key as a raw string token (quotes included) and its
// raw value. ok is false after the last member or at malformed input (then s.bad is set).
func (s *objectScanner) next() (key, val []byte, ok bool) {
	b, i := s.b, s.i
	if i >= len(b) || b[i] != '"' {
		s.bad = i >= len(b) || b[i] != '}'
		return nil, nil, false
	}
	end := skipString(b, i)
	if end < 0 {
		s.bad = true
		return nil, nil, false
	}
	key = b[i:end]
	i = skipSpace(b, end)
	if i >= len(b) || b[i] != ':' {
		s.bad = true
		return nil, nil, false
	}
	i = skipSpace(b, i+1)
	end = skipValue(b, i)
	if end < 0 {
		s.bad = true
		return nil, nil, false
	}
	val = b[i:end]
	i = skipSpace(b, end)
	if i < len(b) && b[i] == ',' {
		i = skipSpace(b, i+1)
	}
	s.i = i
	return key, val, true
}

// member returns the raw value of the member name of the object obj, or nil.
func member(obj []byte, name string) []byte {
	s, ok := newObjectScanner(obj)
	if !ok {
		return nil
	}
	for {
		k, v, ok := s.next()
		if !ok {
			return nil
		}
		if keyIs(k, name) {
			return v
		}
	}
}

// firstElement returns the raw first element of the JSON array arr, or nil.
func firstElement(arr []byte) []byte {
	i := skipSpace(arr, 0)
	if i >= len(arr) || arr[i] != '[' {
		return nil
	}
	i = skipSpace(arr, i+1)
	end := skipValue(arr, i)
	if end < 0 {
		return nil
	}
	return arr[i:end]
}

// countElements returns the number of elements of the JSON array arr, and false when arr
// is not an array. arr must be valid JSON (as it is after readResponse).
func countElements(arr []byte) (int, bool) {
	i := skipSpace(arr, 0)
	if i >= len(arr) || arr[i] != '[' {
		return 0, false
	}
	n := 0
	for i = skipSpace(arr, i+1); i < len(arr) && arr[i] != ']'; n++ {
		end := skipValue(arr, i)
		if end < 0 {
			return n, false
		}
		i = skipSpace(arr, end)
		if i < len(arr) && arr[i] == ',' {
			i = skipSpace(arr, i+1)
		}
	}
	return n, i < len(arr)
}

// keyIs reports whether the raw key token names name.
func keyIs(key []byte, name string) bool {
	if len(key) == len(name)+2 && string(key[1:len(key)-1]) == name {
		return true
	}
	return bytes.IndexByte(key, '\\') >= 0 && stringEquals(key, []byte(name))
}

// stringEquals reports whether the raw token is a JSON string whose value is want. It
// allocates only when the token holds escapes.
func stringEquals(tok, want []byte) bool {
	if len(tok) < 2 || tok[0] != '"' {
		return false
	}
	if bytes.IndexByte(tok, '\\') < 0 {
		return bytes.Equal(tok[1:len(tok)-1], want)
	}
	var s string
	return json.Unmarshal(tok, &s) == nil && s == string(want)
}

// intIs reports whether the raw token is the integer n.
func intIs(tok []byte, n int64) bool {
	var buf [20]byte
	return bytes.Equal(tok, strconv.AppendInt(buf[:0], n, 10))
}

// response is a JSON-RPC message read as raw tokens; the fields are nil when absent.
type response struct {
	id, result, err []byte
	method          bool // the message is a request or notification, not a response
}

// errDecode reports an answer that is not a JSON-RPC message.
var errDecode = errors.New("answer is not a JSON-RPC message")

// readResponse splits msg into a response. It validates msg first.
func readResponse(msg []byte) (response, error) {
	var r response
	if !json.Valid(msg) {
		return r, errDecode
	}
	s, ok := newObjectScanner(msg)
	if !ok {
		return r, errDecode
	}
	for {
		k, v, ok := s.next()
		if !ok {
			break
		}
		switch {
		case keyIs(k, "id"):
			r.id = v
		case keyIs(k, "result"):
			r.result = v
		case keyIs(k, "error"):
			r.err = v
		case keyIs(k, "method"):
			r.method = true
		}
	}
	return r, nil
}

// routeID returns the integer id of a response line, for the stdio reader to route it
// before it is validated. ok is false for lines that are not responses with an integer
// id (requests and notifications from the server, non-JSON noise).
func routeID(line []byte) (id int64, ok bool) {
	s, ok := newObjectScanner(line)
	if !ok {
		return 0, false
	}
	var raw []byte
	for {
		k, v, more := s.next()
		if !more {
			break
		}
		switch {
		case keyIs(k, "id"):
			raw = v
		case keyIs(k, "method"):
			return 0, false
		}
	}
	if len(raw) == 0 || len(raw) > 18 {
		return 0, false
	}
	for _, c := range raw {
		if c < '0' || c > '9' {
			return 0, false
		}
		id = id*10 + int64(c-'0')
	}
	return id, true
}

// Error kinds, as reported in Result.Errors. HTTP statuses and JSON-RPC error codes make
// further kinds: "http-<status>" (e.g. "http-500") and "rpc<signed code>" (e.g.
// "rpc-32601"; see rpcKind).
const (
	kindWrongEcho = "wrong-echo" // the answer is for another id, has no result, echoes other text, or lists no tools array
	kindShortList = "short-list" // a tools/list answer lists fewer tools than required
	kindTransport = "transport"  // connection-level failure
	kindTimeout   = "timeout"    // no answer within the per-call timeout
	kindDecode    = "decode"     // the answer is not a JSON-RPC message (or not where it should be)
)

// checkResult checks that msg answers request id with a result. On failure it returns the
// error kind and a description.
func checkResult(msg []byte, id int64) (response, string, error) {
	r, err := readResponse(msg)
	switch {
	case err != nil:
		return r, kindDecode, fmt.Errorf("%w: %.200q", err, msg)
	case r.err != nil:
		code := member(r.err, "code")
		if _, err := strconv.Atoi(string(code)); err != nil {
			return r, kindDecode, fmt.Errorf("error without an integer code: %.200s", msg)
		}
		return r, rpcKind(code), fmt.Errorf("error response: %.200s", msg)
	case !intIs(r.id, id):
		return r, kindWrongEcho, fmt.Errorf("answer has id %s, want %d", r.id, id)
	case r.result == nil:
		return r, kindWrongEcho, fmt.Errorf("answer has no result: %.200s", msg)
	}
	return r, "", nil
}

// checkEcho checks that msg answers the tools/call id with a result whose first content
// block's text is text. On failure it returns the error kind and a description.
func checkEcho(msg []byte, id int64, text []byte) (string, error) {
	r, kind, err := checkResult(msg, id)
	if kind != "" {
		return kind, err
	}
	got := member(firstElement(member(r.result, "content")), "text")
	if !stringEquals(got, text) {
		return kindWrongEcho, fmt.Errorf("echoed %.100s, want %.100q", got, text)
	}
	return "", nil
}

// checkList checks that msg answers the tools/list id with a result whose tools member is
// an array of at least `least` elements. On failure it returns the error kind and a
// description.
func checkList(msg []byte, id int64, least int) (string, error) {
	r, kind, err := checkResult(msg, id)
	if kind != "" {
		return kind, err
	}
	n, ok := countElements(member(r.result, "tools"))
	switch {
	case !ok:
		return kindWrongEcho, fmt.Errorf("result has no tools array: %.200s", r.result)
	case n < least:
		return kindShortList, fmt.Errorf("listed %d tools, want at least %d", n, least)
	}
	return "", nil
}

// rpcKind returns the error kind of a JSON-RPC error code token: "rpc" and the signed code,
// so the usual negative codes read "rpc-32601" and a positive one "rpc+7".
func rpcKind(code []byte) string {
	if len(code) > 0 && code[0] == '-' {
		return "rpc" + string(code)
	}
	return "rpc+" + string(code)
}
