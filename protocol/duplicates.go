package protocol

import (
	"encoding/json"
	"strings"
)

// DuplicateMember returns the JSON pointer of a member that an object within the JSON value v
// holds twice, at any depth, or "" when none does. Parsers disagree on such a member (one
// takes the first, another the last): the gateway, which reads some members and forwards the
// bytes, must refuse it rather than decide on one value and forward another. v must be valid
// JSON. It allocates only for the member names of each object.
func DuplicateMember(v []byte) (string, error) {
	return duplicateIn(v, "")
}

func duplicateIn(v []byte, path string) (found string, err error) {
	i := skipSpace(v, 0)
	if i >= len(v) {
		return "", nil
	}
	switch v[i] {
	case '{':
		var names []string
		walkErr := eachMember(v, func(k []byte, escaped bool, start, end int) bool {
			name := string(k)
			if escaped || !isASCII(k) {
				// Read as encoding/json reads it: escapes, and invalid UTF-8 as U+FFFD.
				var s string
				if json.Unmarshal(append(append([]byte{'"'}, k...), '"'), &s) == nil {
					name = s
				}
			}
			at := path + "/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(name)
			for _, n := range names {
				if n == name {
					found = at
					return false
				}
			}
			names = append(names, name)
			found, err = duplicateIn(v[start:end], at)
			return found == "" && err == nil
		})
		if err == nil {
			err = walkErr
		}
		return found, err
	case '[':
		j := skipSpace(v, i+1)
		for n := 0; j < len(v) && v[j] != ']'; n++ {
			end, err := skipValue(v, j)
			if err != nil {
				return "", err
			}
			if d, err := duplicateIn(v[j:end], path+"/"+itoa(n)); d != "" || err != nil {
				return d, err
			}
			j = skipSpace(v, end)
			if j < len(v) && v[j] == ',' {
				j = skipSpace(v, j+1)
			}
		}
	}
	return "", nil
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for ; n > 0; n /= 10 {
		i--
		b[i] = byte('0' + n%10)
	}
	return string(b[i:])
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
}
