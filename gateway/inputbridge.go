package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/manifold-mcp/manifold/internal/audit"
	"github.com/manifold-mcp/manifold/internal/modern"
	"github.com/manifold-mcp/manifold/internal/protocol"
)

// The input bridge for a client of a session calling a 2026-07-28 upstream (mcp-2026-notes
// §3.2, "cell B"). Such an upstream never sends its client a request: it answers a call with
// input_required, naming what it needs, and expects the call again with the answers. A client
// of a session expects the opposite, requests in the middle of its call. So the gateway
// declares to the upstream what the session's client declared it can be asked (sampling,
// elicitation, roots), and when the upstream answers input_required it asks the client
// itself, with real requests on the call's stream, and calls the upstream again with the
// answers and the upstream's requestState: the client sees one call, the upstream a
// multi-round-trip request. Everything happens inside the client's request, on the replica
// serving it: nothing is stored.

// Bounds of a bridged call, as the go-sdk's own client sets them: at most maxBridgeRounds
// calls of the upstream in all, and at most maxStateOnlyRounds in a row that ask for nothing
// (a requestState alone: "call again", as a server shedding load answers).
const (
	maxBridgeRounds    = 10
	maxStateOnlyRounds = 3
)

// bridgesInput reports whether an input_required result of an upstream to method is bridged
// for the client of rq: a client of a session, on one of the three methods that may answer
// so (mcp-2026-notes §1.7).
func bridgesInput(rq *request, method string) bool {
	if rq.declared != nil || rq.owner == nil || rq.owner.direct != nil {
		return false
	}
	switch method {
	case protocol.MethodCallTool, protocol.MethodGetPrompt, protocol.MethodReadResource:
		return true
	}
	return false
}

// sessionDeclared is what a 2026-07-28 upstream is told a session's client can be asked: the
// capabilities the client declared at initialize, as its protocol version reads them, that
// the bridge can pass on. Sampling's context member is never declared: the gateway narrows
// includeContext to "none" (narrowIncludeContext).
func sessionDeclared(o *callOwner) modern.ClientCapabilities {
	caps := o.clientCaps()
	declared := modern.ClientCapabilities{Sampling: caps.sampling, SamplingTools: caps.samplingTools,
		ElicitationForm: caps.elicitForm, ElicitationURL: caps.elicitURL, Roots: caps.roots}
	declared.Raw = declared.Object()
	return declared
}

// bridgeInput carries a call whose upstream answered input_required (result) to its end for
// the client of a session: each round's input requests are asked of the client, side by
// side, and the upstream is called again with the answers and its requestState, until it
// answers otherwise or a bound is reached. call makes one call of the upstream with the
// params given. A client's error for an input request fails the call with that error;
// decline and cancel are answers like any other, for the upstream to read.
func (g *requestPipeline) bridgeInput(ctx context.Context, rq *request, upstreamName, method string, params, result json.RawMessage,
	call func(ctx context.Context, params json.RawMessage) (json.RawMessage, error)) (json.RawMessage, error) {
	declared := sessionDeclared(rq.owner)
	if rq.Inputs == nil {
		rq.Inputs = new(audit.InputLog) // a session's request: served on this goroutine alone
	}
	stateOnly := 0
	for round := 1; asksForInput(result); round++ {
		record := func(asked []string, outcome string) {
			rq.Inputs.Add(audit.InputRound{Round: round, Asked: asked, Outcome: outcome})
		}
		if round > maxBridgeRounds {
			record(nil, "too_many_rounds")
			return nil, protocol.Errorf(protocol.CodeInternalError,
				"upstream %s still asked for input after %d rounds: the gateway gave up on the call (it may have run in part)", upstreamName, maxBridgeRounds)
		}
		ir, err := modern.ReadInputRequired(result, declared)
		var undeclared *modern.UndeclaredInputError
		switch {
		case errors.As(err, &undeclared):
			record([]string{undeclared.Method}, "not_declared")
			g.logger.Warn("an upstream asked a client for input it did not declare; the call was ended", "request_id", rq.LogID,
				"upstream", upstreamName, "method", method, "input_method", undeclared.Method)
			return nil, protocol.Errorf(protocol.CodeInternalError,
				"upstream %s answered input_required asking for %s (input request %q), which this client did not declare at initialize: the call was ended", upstreamName, undeclared.Method, undeclared.Key)
		case err != nil:
			record(nil, "malformed")
			return nil, protocol.Errorf(protocol.CodeInternalError, "upstream %s answered an input_required result the gateway cannot read: %v", upstreamName, err)
		}
		var answers json.RawMessage
		if ir.InputRequests == nil || string(ir.InputRequests) == "{}" {
			if stateOnly++; stateOnly > maxStateOnlyRounds {
				record(nil, "too_many_rounds")
				return nil, protocol.Errorf(protocol.CodeInternalError,
					"upstream %s asked to be called again %d times in a row without asking for anything: the gateway gave up on the call (it may have run in part)", upstreamName, maxStateOnlyRounds)
			}
			record(nil, "called_again")
		} else {
			stateOnly = 0
			asked, methods, err := readInputRequests(ir.InputRequests)
			if err != nil {
				record(nil, "malformed")
				return nil, err
			}
			if answers, err = g.askClient(ctx, rq, asked); err != nil {
				record(methods, "client_error")
				return nil, err
			}
			record(methods, "answered")
		}
		retry, err := retryParams(params, answers, ir)
		if err != nil {
			return nil, fmt.Errorf("call upstream %s again with its client's answers: %w", upstreamName, err)
		}
		if result, err = call(ctx, retry); err != nil {
			return nil, err
		}
	}
	return result, nil
}

// inputRequest is one of the input requests of an input_required result.
type inputRequest struct {
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

// readInputRequests reads an input_required result's inputRequests ({key: {method,
// params}}), and the methods they ask in the order of their keys.
func readInputRequests(raw json.RawMessage) (map[string]inputRequest, []string, error) {
	var asked map[string]inputRequest
	if err := json.Unmarshal(raw, &asked); err != nil {
		return nil, nil, protocol.Errorf(protocol.CodeInternalError, "read the upstream's input requests: %v", err)
	}
	var methods []string
	for _, key := range slices.Sorted(maps.Keys(asked)) {
		methods = append(methods, asked[key].Method)
	}
	return asked, methods, nil
}

// retryParams are the params of the call again: the first call's, with the client's answers
// as inputResponses (none when nil) and the upstream's requestState as it sent it (none when
// it sent none).
func retryParams(params, answers json.RawMessage, ir *modern.InputRequired) (json.RawMessage, error) {
	out, err := protocol.DeleteMember(params, "inputResponses")
	if err == nil && answers != nil {
		out, err = protocol.SetMember(out, "inputResponses", answers)
	}
	if err == nil {
		out, err = protocol.DeleteMember(out, "requestState")
	}
	if err == nil && ir.HasState {
		out, err = protocol.SetMember(out, "requestState", protocol.AppendString(nil, ir.RequestState))
	}
	return out, err
}

// askClient asks the client of rq every input request of asked side by side, on the call's stream, and returns the answers keyed alike. The first error
// ends the others.
func (g *requestPipeline) askClient(ctx context.Context, rq *request, asked map[string]inputRequest) (json.RawMessage, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		answers  = make(map[string]json.RawMessage, len(asked))
		firstErr error
		wg       sync.WaitGroup
	)
	for _, key := range slices.Sorted(maps.Keys(asked)) {
		in := asked[key]
		wg.Go(func() {
			answer, err := g.router.askOn(ctx, rq.owner, in.Method, toSessionRequest(in.Method, in.Params), "the upstream", nil)
			if err == nil {
				answer, err = protocol.DeleteMember(answer, "_meta")
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil && firstErr == nil:
				firstErr = err
				cancel()
			case err == nil:
				answers[key] = answer
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		var rpcErr *protocol.Error
		if errors.As(firstErr, &rpcErr) {
			return nil, rpcErr
		}
		return nil, protocol.Errorf(protocol.CodeInternalError, "asking the client for the upstream's input failed: %v", firstErr)
	}
	out, err := json.Marshal(answers)
	if err != nil {
		return nil, fmt.Errorf("encode the client's answers: %w", err)
	}
	return out, nil
}

// toSessionRequest turns the params of a 2026-07-28 input request into those of the request a
// client of a session gets: sampling's includeContext narrowed to "none", and a URL-mode
// elicitation given the elicitationId that 2025-11-25 requires (a 2026-07-28 one has none).
func toSessionRequest(method string, params json.RawMessage) json.RawMessage {
	if len(params) == 0 || string(params) == "null" {
		params = json.RawMessage(`{}`)
	}
	switch method {
	case protocol.MethodCreateMessage:
		return narrowIncludeContext(params)
	case protocol.MethodElicit:
		mode, _, _ := protocol.StringMember(params, "mode")
		if id, has, _ := protocol.StringMember(params, "elicitationId"); mode != "url" || has && id != "" {
			return params
		}
		var b [12]byte
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
		if out, err := protocol.SetMember(params, "elicitationId", protocol.AppendString(nil, "mf-e-"+hex.EncodeToString(b[:]))); err == nil {
			return out
		}
	}
	return params
}
