package protocol

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
)

// DuplicateMember returns the JSON pointer of a member that an object within the JSON value v
// holds twice, at any depth, or "" when none does. Parsers disagree on such a member (one
// takes the first, another the last): the gateway, which reads some members and forwards the
// bytes, must refuse it rather than decide on one value and forward another. v must be valid
// JSON. It runs on every request's params: for the usual small objects of plain names it
// allocates nothing; the pointer is built only for a duplicate found.
func DuplicateMember(v []byte) (string, error) {
	path, err := duplicateIn(v)
	if len(path) == 0 || err != nil {
		return "", err
	}
	var b strings.Builder
	esc := strings.NewReplacer("~", "~0", "/", "~1")
	for _, seg := range slices.Backward(path) {
		b.WriteByte('/')
		b.WriteString(esc.Replace(seg))
	}
	return b.String(), nil
}

// duplicateIn returns the path to a member given twice within v, innermost segment first,
// or nil.
func duplicateIn(v []byte) (path []string, err error) {
	i := skipSpace(v, 0)
	if i >= len(v) {
		return nil, nil
	}
	switch v[i] {
	case '{':
		var buf [16][]byte
		names := buf[:0]
		walkErr := eachMember(v, func(k []byte, escaped bool, start, end int) bool {
			name := k
			if escaped || !isASCII(k) {
				// Read as encoding/json reads it: escapes, and invalid UTF-8 as U+FFFD.
				var s string
				if json.Unmarshal(append(append([]byte{'"'}, k...), '"'), &s) == nil {
					name = []byte(s)
				}
			}
			for _, n := range names {
				if bytes.Equal(n, name) {
					path = []string{string(name)}
					return false
				}
			}
			names = append(names, name)
			if path, err = duplicateIn(v[start:end]); len(path) > 0 || err != nil {
				path = append(path, string(name))
				return false
			}
			return true
		})
		if err == nil {
			err = walkErr
		}
		return path, err
	case '[':
		j := skipSpace(v, i+1)
		for n := 0; j < len(v) && v[j] != ']'; n++ {
			end, err := skipValue(v, j)
			if err != nil {
				return nil, err
			}
			if path, err := duplicateIn(v[j:end]); len(path) > 0 || err != nil {
				return append(path, strconv.Itoa(n)), err
			}
			j = skipSpace(v, end)
			if j < len(v) && v[j] == ',' {
				j = skipSpace(v, j+1)
			}
		}
	}
	return nil, nil
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
}
