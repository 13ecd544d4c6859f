package modern

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/manifold-mcp/manifold/internal/protocol"
)

// Multi-round-trip requests (MRTR, SEP-2322; mcp-2026-notes §1.7): what a gateway between a
// modern client and a modern upstream reads of an input_required result. The input requests
// themselves stay opaque JSON: only their method and the members that decide which client
// capability they need are read.

// Relayable returns the part of the capabilities c that a server may ask of the client
// through input requests, as a JSON object to declare to an upstream: sampling (with its
// tools and context members), elicitation (with its form and url members) and roots. The
// members kept keep their bytes; experimental, extensions and anything else are dropped, as
// the gateway relays none of them. {} when c declares none of these.
func (c ClientCapabilities) Relayable() json.RawMessage {
	members, _ := objectMembers(c.Raw)
	out := map[string]json.RawMessage{}
	keep := func(key string, sub ...string) {
		v, ok := members[key]
		if !ok || isNull(v) {
			return
		}
		inner, _ := objectMembers(v)
		kept := map[string]json.RawMessage{}
		for _, s := range sub {
			if w, ok := inner[s]; ok && !isNull(w) {
				kept[s] = w
			}
		}
		out[key], _ = json.Marshal(kept)
	}
	keep("sampling", "tools", "context")
	keep("elicitation", "form", "url")
	keep("roots")
	raw, _ := json.Marshal(out)
	return raw
}

// Covers reports whether c declares everything need asks for.
func (c ClientCapabilities) Covers(need ClientCapabilities) bool {
	return (!need.Sampling || c.Sampling) && (!need.SamplingTools || c.SamplingTools) &&
		(!need.SamplingContext || c.SamplingContext) && (!need.ElicitationForm || c.ElicitationForm) &&
		(!need.ElicitationURL || c.ElicitationURL) && (!need.Roots || c.Roots)
}

// Object returns the capabilities c reads as a ClientCapabilities object, such as the
// requiredCapabilities of a -32021 error: {"elicitation":{"url":{}}}, {"sampling":{"tools":{}}}.
func (c ClientCapabilities) Object() json.RawMessage {
	out := map[string]map[string]struct{}{}
	if c.Sampling || c.SamplingTools || c.SamplingContext {
		out["sampling"] = map[string]struct{}{}
		if c.SamplingTools {
			out["sampling"]["tools"] = struct{}{}
		}
		if c.SamplingContext {
			out["sampling"]["context"] = struct{}{}
		}
	}
	if c.ElicitationForm || c.ElicitationURL {
		out["elicitation"] = map[string]struct{}{}
		if c.ElicitationForm {
			out["elicitation"]["form"] = struct{}{}
		}
		if c.ElicitationURL {
			out["elicitation"]["url"] = struct{}{}
		}
	}
	if c.Roots {
		out["roots"] = map[string]struct{}{}
	}
	raw, _ := json.Marshal(out)
	return raw
}

// Required returns the client capabilities an input request of method with params needs
// (mcp-2026-notes §1.7): sampling, and sampling.tools when it offers tools, sampling.context
// when its includeContext is other than "none"; elicitation in its mode (form when none is
// given); roots. ok is false for any other method, which no client capability covers.
func Required(method string, params json.RawMessage) (need ClientCapabilities, ok bool) {
	switch method {
	case protocol.MethodCreateMessage:
		need.Sampling = true
		if tools, has, _ := protocol.Member(params, "tools"); has && !isNull(tools) {
			need.SamplingTools = true
		}
		if ic, has, _ := protocol.StringMember(params, "includeContext"); has && ic != "none" {
			need.SamplingContext = true
		}
	case protocol.MethodElicit:
		if mode, _, _ := protocol.StringMember(params, "mode"); mode == "url" {
			need.ElicitationURL = true
		} else {
			need.ElicitationForm = true
		}
	case protocol.MethodListRoots:
		need.Roots = true
	default:
		return need, false
	}
	return need, true
}

// ErrMalformedInputRequired marks an input_required result that is not one: its inputRequests
// is not an object of {method, params} objects, its requestState not a string, or it has
// neither.
var ErrMalformedInputRequired = errors.New("malformed input_required result")

// UndeclaredInputError is an input request that asks the client for what the request did not
// declare (a server MUST NOT send one, mcp-2026-notes §1.7).
type UndeclaredInputError struct {
	// Key is the input request's key in inputRequests.
	Key string
	// Method is what it asks: sampling/createMessage, elicitation/create, roots/list or
	// another method.
	Method string
	// Required is what it needs; zero for a method no capability covers.
	Required ClientCapabilities
}

func (e *UndeclaredInputError) Error() string {
	return fmt.Sprintf("input request %q asks for %s, which the request did not declare", e.Key, e.Method)
}

// InputRequired is what a gateway reads of an input_required result.
type InputRequired struct {
	// InputRequests is the inputRequests object as the server sent it; nil when absent.
	InputRequests json.RawMessage
	// RequestState is the server's requestState; HasState tells an empty one from none.
	RequestState string
	HasState     bool
}

// ReadInputRequired reads an input_required result and checks that every one of its input
// requests is allowed by declared, the capabilities of the request it answers. Errors:
// ErrMalformedInputRequired (wrapped), or an *UndeclaredInputError for the first input
// request, in key order, that declared does not cover.
func ReadInputRequired(result json.RawMessage, declared ClientCapabilities) (*InputRequired, error) {
	var ir InputRequired
	raw, has, err := protocol.Member(result, "inputRequests")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformedInputRequired, err)
	}
	if has && !isNull(raw) {
		ir.InputRequests = raw
	}
	state, hasState, err := protocol.Member(result, "requestState")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformedInputRequired, err)
	}
	if hasState && !isNull(state) {
		if json.Unmarshal(state, &ir.RequestState) != nil {
			return nil, fmt.Errorf("%w: requestState is not a string", ErrMalformedInputRequired)
		}
		ir.HasState = true
	}
	if ir.InputRequests == nil && !ir.HasState {
		return nil, fmt.Errorf("%w: it has neither inputRequests nor requestState", ErrMalformedInputRequired)
	}
	if ir.InputRequests == nil {
		return &ir, nil
	}
	requests, ok := objectMembers(ir.InputRequests)
	if !ok {
		return nil, fmt.Errorf("%w: inputRequests is not an object", ErrMalformedInputRequired)
	}
	for _, key := range slices.Sorted(maps.Keys(requests)) {
		method, ok, err := protocol.StringMember(requests[key], "method")
		if err != nil || !ok {
			return nil, fmt.Errorf("%w: input request %q has no method", ErrMalformedInputRequired, key)
		}
		params, _, _ := protocol.Member(requests[key], "params")
		need, known := Required(method, params)
		if !known || !declared.Covers(need) {
			return nil, &UndeclaredInputError{Key: key, Method: method, Required: need}
		}
	}
	return &ir, nil
}
