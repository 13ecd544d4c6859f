package testupstream

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Environment variables of the "modern" flavor served by Main.
const (
	// EnvModernTTL is the ttlMs of the flavor's list results (default 0).
	EnvModernTTL = "MANIFOLD_TEST_MODERN_TTL_MS"
	// EnvModernStatic, when set, makes the flavor declare no listChanged capability.
	EnvModernStatic = "MANIFOLD_TEST_MODERN_STATIC"
)

// ModernOptions shape a Modern server.
type ModernOptions struct {
	// TTLMs is the ttlMs of its list results; 0 is the go-sdk default.
	TTLMs int
	// Static declares tools, prompts and resources without listChanged: changes are then
	// announced to no one.
	Static bool
}

// Modern is a go-sdk v1.8 server for 2026-07-28 clients (it serves 2025 sessions as well)
// that records what it is asked. Serve it statelessly over HTTP
// (mcp.StreamableHTTPOptions{Stateless: true}) or over stdio (the "modern" flavor of Main):
// it then speaks the era of its first message.
//
// Its tools:
//   - "echo" {text}: answers the text;
//   - "lookup" {repo, q}: repo is annotated x-mcp-header "Repo" (mirrored in Mcp-Param-Repo,
//     which the go-sdk checks); answers "<repo>:<q>";
//   - "add_tool": adds a tool "added_N" (list_changed, to listeners);
//   - "block": runs until cancelled, which Cancels counts;
//   - "ask": answers input_required, asking for a name by elicitation (requestState
//     "asked"), and "hello NAME" once retried with that requestState and the answer (a retry
//     without the answer is asked again);
//   - "ask_for" {what, state}: answers input_required with one input request, "q", of what:
//     "sampling", "sampling_tools" (sampling that offers a tool), "roots", "url" (URL-mode
//     elicitation) or "none" (requestState only, as a server shedding load does); with the
//     requestState "pending" unless state is false. Retried with the answer (or, for
//     "none", with the state), it tells what it got: the sampled text, the roots' URIs, the
//     elicitation's action, or "retried";
//   - "ask_twice": asks by form elicitation for a first name, then for a last name (two
//     rounds, requestStates "first" and "second"), then answers "hello FIRST LAST";
//   - "ask_forever" {nothing}: answers input_required however often it is retried, asking
//     for a name by form elicitation, or for nothing (a requestState alone) when nothing is
//     true; requestState "again";
//   - "seen": answers {"seen": Seen(), "cancels": Cancels(), "blocking": Blocking()} as JSON
//     text, for a test that runs the server as a process;
//   - "touch": announces its resource file:///watched.txt updated, to the listens subscribed
//     to it; "sub_counts" answers "subscribe=N unsubscribe=M", the resource subscriptions its
//     listens made and ended; a listen's subscription to file:///gone.txt fails, as to a
//     resource not found.
type Modern struct {
	Server *mcp.Server

	mu     sync.Mutex
	seen   []SeenRequest // guarded by mu
	states []string      // guarded by mu

	added    atomic.Int64
	cancels  atomic.Int64
	blocking atomic.Int64
	subs     atomic.Int64
	unsubs   atomic.Int64
}

// SeenRequest is one message a Modern server received: its method and its params._meta.
type SeenRequest struct {
	Method string          `json:"method"`
	Meta   json.RawMessage `json:"meta,omitempty"`
}

// Seen returns the messages the server received, in order.
func (m *Modern) Seen() []SeenRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]SeenRequest(nil), m.seen...)
}

// Count returns how many requests of method the server received.
func (m *Modern) Count(method string) int {
	n := 0
	for _, s := range m.Seen() {
		if s.Method == method {
			n++
		}
	}
	return n
}

// RequestStates returns the requestState of every call of the ask tools, in order: "" for a
// call without one.
func (m *Modern) RequestStates() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.states...)
}

func (m *Modern) recordState(state string) {
	m.mu.Lock()
	m.states = append(m.states, state)
	m.mu.Unlock()
}

// Cancels returns how many "block" calls ended by cancellation.
func (m *Modern) Cancels() int64 { return m.cancels.Load() }

// Blocking returns how many "block" calls are running.
func (m *Modern) Blocking() int64 { return m.blocking.Load() }

// AddTool adds a tool "added_N", as the tool add_tool does.
func (m *Modern) AddTool() string {
	name := fmt.Sprintf("added_%d", m.added.Add(1))
	m.Server.AddTool(&mcp.Tool{Name: name, Description: "added later", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return text(name), nil })
	return name
}

// lookupSchema is the input schema of tool "lookup".
const lookupSchema = `{"type":"object","properties":{"repo":{"type":"string","x-mcp-header":"Repo"},"q":{"type":"string"}},"required":["repo"]}`

// NewModern returns a Modern server.
func NewModern(opts ModernOptions) *Modern {
	m := &Modern{}
	serverOpts := &mcp.ServerOptions{Instructions: "instructions of modern",
		SubscribeHandler: func(_ context.Context, req *mcp.SubscribeRequest) error {
			if req.Params.URI == "file:///gone.txt" {
				return &jsonrpc.Error{Code: -32602, Message: "resource not found: file:///gone.txt", Data: json.RawMessage(`{"uri":"file:///gone.txt"}`)}
			}
			m.subs.Add(1)
			return nil
		},
		UnsubscribeHandler: func(context.Context, *mcp.UnsubscribeRequest) error { m.unsubs.Add(1); return nil },
	}
	if opts.TTLMs > 0 {
		serverOpts.SetCacheable = func(_ context.Context, _ mcp.Request, c *mcp.Cacheable) { c.TTLMs = opts.TTLMs }
	}
	if opts.Static {
		serverOpts.Capabilities = &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: false}, Resources: &mcp.ResourceCapabilities{ListChanged: false}}
	}
	m.Server = mcp.NewServer(&mcp.Implementation{Name: "test-modern", Version: "2.0.0"}, serverOpts)
	m.Server.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			m.record(method, req)
			return next(ctx, method, req)
		}
	})
	m.Server.AddTool(&mcp.Tool{Name: "echo", Description: "answers its text", InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in struct{ Text string }
			_ = json.Unmarshal(req.Params.Arguments, &in)
			return text(in.Text), nil
		})
	m.Server.AddResource(&mcp.Resource{URI: "file:///watched.txt", Name: "watched", MIMEType: "text/plain"},
		func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, MIMEType: "text/plain", Text: "watched"}}}, nil
		})
	m.Server.AddTool(&mcp.Tool{Name: "touch", Description: "announces file:///watched.txt updated", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if err := m.Server.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: "file:///watched.txt"}); err != nil {
				return nil, err
			}
			return text("touched"), nil
		})
	m.Server.AddTool(&mcp.Tool{Name: "sub_counts", Description: "resource subscriptions seen", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return text(fmt.Sprintf("subscribe=%d unsubscribe=%d", m.subs.Load(), m.unsubs.Load())), nil
		})
	m.Server.AddTool(&mcp.Tool{Name: "lookup", Description: "looks a query up in a repository", InputSchema: json.RawMessage(lookupSchema)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in struct{ Repo, Q string }
			_ = json.Unmarshal(req.Params.Arguments, &in)
			return text(in.Repo + ":" + in.Q), nil
		})
	m.Server.AddTool(&mcp.Tool{Name: "add_tool", Description: "adds a tool", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return text(m.AddTool()), nil
		})
	m.Server.AddTool(&mcp.Tool{Name: "block", Description: "runs until cancelled", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			m.blocking.Add(1)
			defer m.blocking.Add(-1)
			<-ctx.Done()
			m.cancels.Add(1)
			return nil, ctx.Err()
		})
	m.Server.AddTool(&mcp.Tool{Name: "ask", Description: "asks its client for a name, then greets it", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			m.recordState(req.Params.RequestState)
			if name, ok := elicited(req.Params.InputResponses, "name", "name"); ok && req.Params.RequestState == "asked" {
				return text("hello " + name), nil
			}
			return askName("name", "your name?", "asked"), nil
		})
	m.Server.AddTool(&mcp.Tool{Name: "ask_twice", Description: "asks its client for a first, then a last name", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			m.recordState(req.Params.RequestState)
			switch req.Params.RequestState {
			case "first":
				if first, ok := elicited(req.Params.InputResponses, "first", "name"); ok {
					return askName("last", "your last name?", "second:"+first), nil
				}
			default:
				if first, ok := strings.CutPrefix(req.Params.RequestState, "second:"); ok {
					if last, ok := elicited(req.Params.InputResponses, "last", "name"); ok {
						return text("hello " + first + " " + last), nil
					}
				}
			}
			return askName("first", "your first name?", "first"), nil
		})
	m.Server.AddTool(&mcp.Tool{Name: "ask_for", Description: "asks its client for one kind of input",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"what":{"type":"string"},"state":{"type":"boolean"}}}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			m.recordState(req.Params.RequestState)
			var in struct {
				What  string
				State *bool
			}
			_ = json.Unmarshal(req.Params.Arguments, &in)
			if got, ok := answered(in.What, req.Params.InputResponses, req.Params.RequestState); ok {
				return text(got), nil
			}
			res := &mcp.CallToolResult{RequestState: "pending"}
			if in.State != nil && !*in.State {
				res.RequestState = ""
			}
			switch in.What {
			case "sampling":
				res.InputRequests = mcp.InputRequestMap{"q": &mcp.CreateMessageParams{MaxTokens: 10,
					Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "say hi"}}}}}
			case "sampling_tools":
				res.InputRequests = mcp.InputRequestMap{"q": &mcp.CreateMessageWithToolsParams{MaxTokens: 10,
					Messages: []*mcp.SamplingMessageV2{{Role: "user", Content: []mcp.Content{&mcp.TextContent{Text: "say hi"}}}},
					Tools:    []*mcp.Tool{{Name: "t", InputSchema: json.RawMessage(`{"type":"object"}`)}}}}
			case "roots":
				res.InputRequests = mcp.InputRequestMap{"q": &mcp.ListRootsParams{}}
			case "url":
				res.InputRequests = mcp.InputRequestMap{"q": &mcp.ElicitParams{Mode: "url", Message: "sign in", URL: "https://example.com/sign-in"}}
			case "none":
				// An empty map, not nil: the go-sdk marks the result input_required only then.
				res.InputRequests, res.RequestState = mcp.InputRequestMap{}, "pending"
			default:
				return nil, fmt.Errorf("ask_for: unknown kind %q", in.What)
			}
			return res, nil
		})
	m.Server.AddTool(&mcp.Tool{Name: "ask_forever", Description: "asks its client for input however often it is answered",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"nothing":{"type":"boolean"}}}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			m.recordState(req.Params.RequestState)
			var in struct{ Nothing bool }
			_ = json.Unmarshal(req.Params.Arguments, &in)
			if in.Nothing {
				return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{}, RequestState: "again"}, nil
			}
			return askName("name", "your name, again?", "again"), nil
		})
	m.Server.AddTool(&mcp.Tool{Name: "seen", Description: "answers what the server received", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			data, err := json.Marshal(map[string]any{"seen": m.Seen(), "cancels": m.Cancels(), "blocking": m.Blocking()})
			if err != nil {
				return nil, err
			}
			return text(string(data)), nil
		})
	return m
}

// askName is an input_required result asking, under key, for a name by form elicitation.
func askName(key, message, state string) *mcp.CallToolResult {
	return &mcp.CallToolResult{
		InputRequests: mcp.InputRequestMap{key: &mcp.ElicitParams{Mode: "form", Message: message,
			RequestedSchema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}}}`)}},
		RequestState: state,
	}
}

// elicited returns the string field of the accepted elicitation answered under key.
func elicited(responses mcp.InputResponseMap, key, field string) (string, bool) {
	r, ok := responses[key].(*mcp.ElicitResult)
	if !ok || r.Action != "accept" {
		return "", false
	}
	s, ok := r.Content[field].(string)
	return s, ok
}

// answered tells what the retry of ask_for brought for the kind what, and whether it
// answers the question.
func answered(what string, responses mcp.InputResponseMap, state string) (string, bool) {
	if what == "none" {
		return "retried", state == "pending"
	}
	switch r := responses["q"].(type) {
	case *mcp.CreateMessageWithToolsResult:
		for _, c := range r.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				return tc.Text, true
			}
		}
		return "", true
	case *mcp.ListRootsResult:
		var uris []string
		for _, root := range r.Roots {
			uris = append(uris, root.URI)
		}
		return strings.Join(uris, ","), true
	case *mcp.ElicitResult:
		return r.Action, true
	}
	return "", false
}

func (m *Modern) record(method string, req mcp.Request) {
	s := SeenRequest{Method: method}
	if p := req.GetParams(); p != nil && !reflect.ValueOf(p).IsNil() {
		if meta := p.GetMeta(); meta != nil {
			s.Meta, _ = json.Marshal(meta)
		}
	}
	m.mu.Lock()
	m.seen = append(m.seen, s)
	m.mu.Unlock()
}

// modernOptionsFromEnv reads the options of the "modern" flavor served by Main.
func modernOptionsFromEnv() ModernOptions {
	ttl, _ := strconv.Atoi(os.Getenv(EnvModernTTL))
	return ModernOptions{TTLMs: ttl, Static: os.Getenv(EnvModernStatic) != ""}
}
