package protocol

import (
	"encoding/json"
	"fmt"
)

// BatchEntries splits a JSON-RPC batch, a JSON array, into its entries, each as its raw JSON.
// The entries share memory with data, which the caller must not modify afterwards: a batch
// costs no copy of itself (with Decode, none of its messages' params either). It fails, with
// ErrParse, when data is not valid JSON, and with ErrInvalidMessage when it is no array.
func BatchEntries(data []byte) ([]json.RawMessage, error) {
	if !json.Valid(data) {
		return nil, fmt.Errorf("%w: invalid JSON", ErrParse)
	}
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '[' {
		return nil, fmt.Errorf("%w: a batch must be a JSON array", ErrInvalidMessage)
	}
	var entries []json.RawMessage
	// data is valid JSON: the array's values and separators are where they should be.
	for i = skipSpace(data, i+1); i < len(data) && data[i] != ']'; {
		end, err := skipValue(data, i)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrParse, err)
		}
		entries = append(entries, json.RawMessage(data[i:end:end]))
		if i = skipSpace(data, end); i < len(data) && data[i] == ',' {
			i = skipSpace(data, i+1)
		}
	}
	return entries, nil
}
