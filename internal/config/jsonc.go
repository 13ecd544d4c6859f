package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
)

// Server lists are JSON, or JSONC in VS Code: JSON with // and /* */
// comments and trailing commas. blankJSONC turns JSONC into JSON by blanking
// those out with spaces, keeping every byte offset and newline, so that the
// standard decoder reads the result and its offsets give the lines of the
// original.

// jsonKind is the kind of a JSON value.
type jsonKind uint8

const (
	jsonNull jsonKind = iota
	jsonBool
	jsonNumber
	jsonString
	jsonArray
	jsonObject
)

// jsonNode is a JSON value with the line it starts on.
type jsonNode struct {
	kind jsonKind
	line int
	// text is the value of a string, or the text of a number.
	text    string
	boolean bool
	items   []*jsonNode  // of an array
	members []jsonMember // of an object, in file order, duplicates included
}

// jsonMember is one key and value of a JSON object.
type jsonMember struct {
	key   string
	line  int // of the key
	value *jsonNode
}

// maxJSONDepth bounds the nesting of arrays and objects: server lists are
// shallow, and the reader is recursive.
const maxJSONDepth = 200

// parseJSONC parses data, JSON or JSONC, as one value. If there is nothing to
// use, it returns nil and the problem.
func parseJSONC(file string, data []byte) (*jsonNode, []Problem) {
	clean, unterminated := blankJSONC(data)
	r := &jsonReader{dec: json.NewDecoder(bytes.NewReader(clean))}
	for i, b := range clean {
		if b == '\n' {
			r.newlines = append(r.newlines, i)
		}
	}
	problem := func(off int, msg string) []Problem {
		return []Problem{{File: file, Line: r.lineAt(off), Message: msg}}
	}
	if unterminated >= 0 {
		return nil, problem(unterminated, "not valid JSON: a /* comment is not closed: end it with */")
	}
	r.dec.UseNumber()

	root, err := r.value(0)
	if err == nil {
		// Nothing but white space may follow.
		if _, terr := r.dec.Token(); !errors.Is(terr, io.EOF) {
			return nil, problem(int(r.dec.InputOffset())-1, "not valid JSON: more text after the end of the top-level value")
		}
		return root, nil
	}

	var syn *json.SyntaxError
	var deep errTooDeep
	switch {
	case errors.Is(err, io.EOF) && len(bytes.TrimSpace(clean)) == 0:
		return nil, []Problem{{File: file, Message: `empty file: want a JSON object with "mcpServers" (Claude Desktop, Cursor) or "servers" (VS Code)`}}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return nil, problem(len(clean)-1, "not valid JSON: unexpected end of file (a bracket, brace or quote is not closed)")
	case errors.As(err, &syn):
		return nil, problem(int(syn.Offset)-1, "not valid JSON: "+syn.Error()+" (check commas, quotes and brackets)")
	case errors.As(err, &deep):
		return nil, problem(int(deep), fmt.Sprintf("not valid here: arrays and objects nested more than %d deep", maxJSONDepth))
	default:
		return nil, problem(int(r.dec.InputOffset()), "not valid JSON: "+err.Error())
	}
}

// errTooDeep is the offset where arrays and objects nest more than
// maxJSONDepth deep.
type errTooDeep int

func (errTooDeep) Error() string { return "nested too deep" }

// jsonReader builds a jsonNode tree from the tokens of dec.
type jsonReader struct {
	dec      *json.Decoder
	newlines []int // offsets of the newlines in the input, in order
}

// lineAt returns the 1-based line of the byte at offset off.
func (r *jsonReader) lineAt(off int) int {
	n, _ := slices.BinarySearch(r.newlines, max(off, 0))
	return n + 1
}

// tokenLine returns the line of the token just read. No token spans lines:
// a JSON string holds no raw newline.
func (r *jsonReader) tokenLine() int {
	return r.lineAt(int(r.dec.InputOffset()) - 1)
}

// value reads one value, at the given nesting depth.
func (r *jsonReader) value(depth int) (*jsonNode, error) {
	tok, err := r.dec.Token()
	if err != nil {
		return nil, err
	}
	n := &jsonNode{line: r.tokenLine()}
	switch t := tok.(type) {
	case nil:
		n.kind = jsonNull
	case bool:
		n.kind, n.boolean = jsonBool, t
	case json.Number:
		n.kind, n.text = jsonNumber, string(t)
	case string:
		n.kind, n.text = jsonString, t
	case json.Delim:
		if depth >= maxJSONDepth {
			return nil, errTooDeep(r.dec.InputOffset() - 1)
		}
		if t == '[' {
			n.kind = jsonArray
			for r.dec.More() {
				item, err := r.value(depth + 1)
				if err != nil {
					return nil, err
				}
				n.items = append(n.items, item)
			}
		} else { // '{': the decoder accepts no other delimiter here
			n.kind = jsonObject
			for r.dec.More() {
				ktok, err := r.dec.Token()
				if err != nil {
					return nil, err
				}
				key, _ := ktok.(string) // the decoder accepts only strings here
				m := jsonMember{key: key, line: r.tokenLine()}
				if m.value, err = r.value(depth + 1); err != nil {
					return nil, err
				}
				n.members = append(n.members, m)
			}
		}
		if _, err := r.dec.Token(); err != nil { // the closing ] or }
			return nil, err
		}
	}
	return n, nil
}

// blankJSONC returns a copy of data with comments, trailing commas and a
// leading byte order mark replaced by spaces; newlines stay, so offsets and
// lines are those of data. It also returns the offset of a /* comment that is
// not closed, or -1.
func blankJSONC(data []byte) ([]byte, int) {
	out := bytes.Clone(data)
	if bytes.HasPrefix(out, []byte("\xEF\xBB\xBF")) {
		copy(out, "   ")
	}
	blank := func(from, to int) {
		for i := from; i < to; i++ {
			if out[i] != '\n' {
				out[i] = ' '
			}
		}
	}
	comma := -1 // offset of a comma followed so far only by space and comments
	for i := 0; i < len(out); i++ {
		switch c := out[i]; {
		case c == '"':
			comma = -1
			// A raw newline cannot be in a string: the decoder will
			// report it, and the newline is kept.
			for i++; i < len(out) && out[i] != '"' && out[i] != '\n'; i++ {
				if out[i] == '\\' {
					i++
				}
			}
		case c == '/' && i+1 < len(out) && out[i+1] == '/':
			end := bytes.IndexByte(out[i:], '\n')
			if end < 0 {
				end = len(out) - i
			}
			blank(i, i+end)
			i += end - 1
		case c == '/' && i+1 < len(out) && out[i+1] == '*':
			end := bytes.Index(out[i+2:], []byte("*/"))
			if end < 0 {
				return out, i
			}
			blank(i, i+2+end+2)
			i += 2 + end + 1
		case c == ',':
			comma = i
		case c == '}' || c == ']':
			if comma >= 0 {
				out[comma] = ' '
			}
			comma = -1
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
		default:
			comma = -1
		}
	}
	return out, -1
}
