package protocol

import "encoding/json"

// MapContentBlocks applies f to every content block of a result that carries them: content[]
// of a tools/call result (and of a tasks/result answer, which is one) and messages[].content of
// a prompts/get result. f returns the block to put in its place and whether it changed it.
// Members that f does not change keep their bytes; a result without these members, or whose
// members do not parse, comes back as it was.
func MapContentBlocks(result json.RawMessage, f func(block json.RawMessage) (json.RawMessage, bool)) json.RawMessage {
	if content, ok, _ := Member(result, "content"); ok {
		var blocks []json.RawMessage
		if json.Unmarshal(content, &blocks) == nil {
			changed := false
			for i, b := range blocks {
				if out, ok := f(b); ok {
					blocks[i], changed = out, true
				}
			}
			if changed {
				result = setMarshalled(result, "content", blocks)
			}
		}
	}
	if messages, ok, _ := Member(result, "messages"); ok {
		var msgs []json.RawMessage
		if json.Unmarshal(messages, &msgs) == nil {
			changed := false
			for i, m := range msgs {
				block, ok, _ := Member(m, "content")
				if !ok {
					continue
				}
				if out, ok := f(block); ok {
					if nm, err := SetMember(m, "content", out); err == nil {
						msgs[i], changed = nm, true
					}
				}
			}
			if changed {
				result = setMarshalled(result, "messages", msgs)
			}
		}
	}
	return result
}

// setMarshalled sets obj's member key to v, marshalled; on failure obj is returned unchanged.
func setMarshalled(obj json.RawMessage, key string, v any) json.RawMessage {
	raw, err := json.Marshal(v)
	if err != nil {
		return obj
	}
	out, err := SetMember(obj, key, raw)
	if err != nil {
		return obj
	}
	return out
}
