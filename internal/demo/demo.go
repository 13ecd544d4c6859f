// Package demo is a small MCP server that needs no network: the upstream the example Manifold
// config starts (`gateway demo`, also built alone as cmd/demo-server).
//
// It offers:
//   - tools echo, add (with structured output) and current_time;
//   - the resource demo://readme and the resource template demo://notes/{id};
//   - the prompt summarize (arguments text, style), with completion for style.
package demo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	_ "time/tzdata" // current_time must not depend on the host's zoneinfo

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const version = "0.1.0"

const (
	readmeURI        = "demo://readme"
	notesTemplate    = "demo://notes/{id}"
	notesPrefix      = "demo://notes/"
	summarizePrompt  = "summarize"
	styleArgument    = "style"
	readmeMarkdown   = "text/markdown"
	notesContentType = "text/plain"
)

// styles are the accepted values of the summarize prompt's style argument, with
// the instruction each adds to the prompt.
var styles = []struct{ name, instruction string }{
	{"brief", "in one or two sentences"},
	{"detailed", "in detail, keeping every important point"},
	{"bullet", "as a short bulleted list"},
}

const readme = `# Manifold demo server

This is the demo upstream that ships with Manifold, the multiplexing MCP gateway.
It runs over stdio and needs no network.

- Tools: ` + "`echo`, `add`, `current_time`, `delete_note`" + `
- Resources: ` + "`demo://readme`" + ` (this file) and the template ` + "`demo://notes/{id}`" + `
- Prompt: ` + "`summarize`" + ` (arguments ` + "`text`, `style`" + `; ` + "`style`" + ` has completions)
`

// Serve serves the demo server named name over stdin and stdout until ctx ends or stdin
// closes.
func Serve(ctx context.Context, name string) error {
	err := NewServer(name).Run(ctx, &mcp.StdioTransport{})
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// NewServer builds the demo server; name is reported in serverInfo.
func NewServer(name string) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: name, Title: "Manifold demo server", Version: version},
		&mcp.ServerOptions{
			Instructions:      "Demo upstream for Manifold: a few simple tools, resources and a prompt.",
			CompletionHandler: complete,
		})

	mcp.AddTool(s, &mcp.Tool{
		Name:        "echo",
		Description: "Return the given text unchanged.",
	}, echo)
	mcp.AddTool(s, &mcp.Tool{
		Name:        "add",
		Description: "Add two numbers and return their sum (also as structured output).",
	}, add)
	mcp.AddTool(s, &mcp.Tool{
		Name:        "current_time",
		Description: "Return the current time in RFC 3339 format, in the given IANA time zone (default UTC).",
	}, currentTime)
	mcp.AddTool(s, &mcp.Tool{
		Name:        "delete_note",
		Description: "Delete a demo note for good (the demo keeps nothing: it only says what it would delete). A destructive tool, for trying the gateway's approval of risky calls.",
		Annotations: &mcp.ToolAnnotations{Title: "Delete a note", DestructiveHint: ptr(true), IdempotentHint: true},
	}, deleteNote)

	s.AddResource(&mcp.Resource{
		URI:         readmeURI,
		Name:        "readme",
		Title:       "About the demo server",
		Description: "A few lines about Manifold's demo server.",
		MIMEType:    readmeMarkdown,
	}, readReadme)
	s.AddResourceTemplate(&mcp.ResourceTemplate{
		URITemplate: notesTemplate,
		Name:        "note",
		Title:       "Demo note",
		Description: "A demo note; its text names the note's id.",
		MIMEType:    notesContentType,
	}, readNote)

	s.AddPrompt(&mcp.Prompt{
		Name:        summarizePrompt,
		Title:       "Summarize text",
		Description: "Ask the model to summarize a text, optionally in a given style.",
		Arguments: []*mcp.PromptArgument{
			{Name: "text", Description: "The text to summarize.", Required: true},
			{Name: styleArgument, Description: "Summary style: brief, detailed or bullet."},
		},
	}, summarize)
	return s
}

type deleteNoteIn struct {
	ID string `json:"id" jsonschema:"the id of the note to delete"`
}

func deleteNote(_ context.Context, _ *mcp.CallToolRequest, in deleteNoteIn) (*mcp.CallToolResult, any, error) {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "deleted note " + in.ID}}}, nil, nil
}

func ptr[T any](v T) *T { return &v }

type echoIn struct {
	Text string `json:"text" jsonschema:"the text to return"`
}

func echo(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
}

type addIn struct {
	A float64 `json:"a" jsonschema:"the first addend"`
	B float64 `json:"b" jsonschema:"the second addend"`
}

type addOut struct {
	Sum float64 `json:"sum" jsonschema:"a + b"`
}

func add(_ context.Context, _ *mcp.CallToolRequest, in addIn) (*mcp.CallToolResult, addOut, error) {
	// Content is left empty: the SDK fills it with the JSON of the structured output.
	return nil, addOut{Sum: in.A + in.B}, nil
}

type timeIn struct {
	Timezone string `json:"timezone,omitempty" jsonschema:"IANA time zone name, such as Europe/Paris (default UTC)"`
}

// now is replaced in tests.
var now = time.Now

func currentTime(_ context.Context, _ *mcp.CallToolRequest, in timeIn) (*mcp.CallToolResult, any, error) {
	loc := time.UTC
	if in.Timezone != "" {
		l, err := time.LoadLocation(in.Timezone)
		if err != nil || in.Timezone == "Local" {
			// Returned errors become tool errors (isError: true).
			return nil, nil, fmt.Errorf("unknown time zone %q: use an IANA name such as UTC or America/New_York", in.Timezone)
		}
		loc = l
	}
	t := now().In(loc).Format(time.RFC3339)
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: t}}}, nil, nil
}

func readReadme(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{
		{URI: req.Params.URI, MIMEType: readmeMarkdown, Text: readme},
	}}, nil
}

func readNote(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	id, ok := strings.CutPrefix(uri, notesPrefix)
	if !ok || id == "" || strings.ContainsAny(id, "/?#") {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{
		{URI: uri, MIMEType: notesContentType, Text: "note " + id},
	}}, nil
}

func summarize(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
	text := req.Params.Arguments["text"]
	if strings.TrimSpace(text) == "" {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: `summarize: argument "text" is required`}
	}
	instruction := "concisely"
	if style := req.Params.Arguments[styleArgument]; style != "" {
		i := slices.IndexFunc(styles, func(s struct{ name, instruction string }) bool { return s.name == style })
		if i < 0 {
			return nil, &jsonrpc.Error{
				Code:    jsonrpc.CodeInvalidParams,
				Message: fmt.Sprintf("summarize: unknown style %q (want brief, detailed or bullet)", style),
			}
		}
		instruction = styles[i].instruction
	}
	return &mcp.GetPromptResult{
		Description: "Summarize the given text",
		Messages: []*mcp.PromptMessage{{
			Role:    "user",
			Content: &mcp.TextContent{Text: fmt.Sprintf("Summarize the following text %s:\n\n%s", instruction, text)},
		}},
	}, nil
}

// complete offers the summarize prompt's style values that start with what the
// user typed; everything else has no completions.
func complete(_ context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
	values := []string{}
	p := req.Params
	if p.Ref != nil && p.Ref.Type == "ref/prompt" && p.Ref.Name == summarizePrompt && p.Argument.Name == styleArgument {
		for _, s := range styles {
			if strings.HasPrefix(s.name, strings.ToLower(p.Argument.Value)) {
				values = append(values, s.name)
			}
		}
	}
	return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: values, Total: len(values)}}, nil
}
