package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// envAPIKey names the variable whose value `gateway call` sends as its bearer credential.
const envAPIKey = "MANIFOLD_API_KEY"

// defaultMCPURL is the endpoint `gateway call` connects to without -url: the one a gateway
// serves with the default listen address.
const defaultMCPURL = "http://127.0.0.1:8080/mcp"

// call is a small MCP client of a running gateway: without a tool it lists the tools, with
// one it calls it and prints the result. It exits 1 when the tool reports an error or the
// gateway refuses the call, printing the message as the gateway gave it.
func call(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("call", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", defaultMCPURL, "the gateway's MCP endpoint: /mcp, or /mcp/NAME for a profile")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: gateway call [-url URL] [TOOL [ARGS_JSON]]\n\n"+
			"Without TOOL, list the tools; with it, call TOOL with the arguments ARGS_JSON (default {}).\n"+
			"If %s is set, it is sent as the bearer credential (an API key or a token).\n\n", envAPIKey)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	for _, arg := range fs.Args() {
		if strings.HasPrefix(arg, "-") {
			fmt.Fprintf(stderr, "gateway call: flag %s after the tool's name: put the flags first, like gateway call -url URL TOOL ARGS_JSON\n", arg)
			return 2
		}
	}
	if fs.NArg() > 2 {
		fmt.Fprintf(stderr, "gateway call: unexpected argument %q: quote the arguments as one JSON object, like '{\"text\": \"hi\"}'\n", fs.Arg(2))
		return 2
	}
	if u, err := neturl.Parse(*url); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		fmt.Fprintf(stderr, "gateway call: -url %q: want the gateway's MCP endpoint, like %s\n", *url, defaultMCPURL)
		return 2
	}
	var toolArgs map[string]any
	if fs.NArg() == 2 {
		if err := json.Unmarshal([]byte(fs.Arg(1)), &toolArgs); err != nil || toolArgs == nil {
			fmt.Fprintf(stderr, "gateway call: the arguments %q are not a JSON object: write them like '{\"text\": \"hi\"}'\n", fs.Arg(1))
			return 2
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	credential := os.Getenv(envAPIKey)
	rt := &credentialTransport{base: http.DefaultTransport, credential: credential}
	transport := &mcp.StreamableClientTransport{
		Endpoint:   *url,
		HTTPClient: &http.Client{Transport: rt},
		// One request and its answer: no stream for the server's own messages, and no
		// reconnecting to a gateway that is not there.
		DisableStandaloneSSE: true,
		MaxRetries:           -1,
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "gateway-call", Version: version}, nil)
	session, err := client.Connect(ctx, transport, nil)
	if err != nil {
		fmt.Fprintln(stderr, "gateway call:", connectProblem(*url, credential != "", rt.refusal(), err))
		return 1
	}
	defer session.Close()

	if fs.NArg() == 0 {
		return listTools(ctx, session, stdout, stderr)
	}
	res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: fs.Arg(0), Arguments: toolArgs})
	if err != nil {
		fmt.Fprintln(stderr, "gateway call:", requestProblem(rt.refusal(), err))
		return 1
	}
	if res.IsError {
		printResult(stderr, res)
		return 1
	}
	printResult(stdout, res)
	return 0
}

// listTools prints each tool's name and the first line of its description.
func listTools(ctx context.Context, session *mcp.ClientSession, stdout, stderr io.Writer) int {
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	for tool, err := range session.Tools(ctx, nil) {
		if err != nil {
			tw.Flush()
			fmt.Fprintln(stderr, "gateway call: list the tools:", err)
			return 1
		}
		first, _, _ := strings.Cut(strings.TrimSpace(tool.Description), "\n")
		fmt.Fprintf(tw, "%s\t%s\n", tool.Name, first)
	}
	tw.Flush()
	return 0
}

// printResult prints a tool's result: its text as it is, one line for each other kind of
// content, and the structured content as JSON when there is no text.
func printResult(w io.Writer, res *mcp.CallToolResult) {
	hasText := false
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			hasText = true
			fmt.Fprint(w, c.Text)
			if !strings.HasSuffix(c.Text, "\n") {
				fmt.Fprintln(w)
			}
		case *mcp.ImageContent:
			fmt.Fprintf(w, "[image: %s, %d bytes]\n", c.MIMEType, len(c.Data))
		case *mcp.AudioContent:
			fmt.Fprintf(w, "[audio: %s, %d bytes]\n", c.MIMEType, len(c.Data))
		case *mcp.ResourceLink:
			fmt.Fprintf(w, "[resource link: %s]\n", c.URI)
		case *mcp.EmbeddedResource:
			if c.Resource == nil {
				fmt.Fprintln(w, "[resource]")
				continue
			}
			fmt.Fprintf(w, "[resource: %s, %s]\n", c.Resource.URI, c.Resource.MIMEType)
		default:
			fmt.Fprintf(w, "[content of type %T]\n", c)
		}
	}
	if !hasText && res.StructuredContent != nil {
		out, err := json.MarshalIndent(res.StructuredContent, "", "  ")
		if err != nil {
			fmt.Fprintf(w, "[structured content that is not JSON: %v]\n", err)
			return
		}
		fmt.Fprintln(w, string(out))
	}
}

// connectProblem says why the session could not start, and what to do about it.
func connectProblem(url string, haveCredential bool, refused *httpRefusal, err error) string {
	switch {
	case refused != nil && refused.status == http.StatusUnauthorized && !haveCredential:
		return fmt.Sprintf("the gateway at %s requires a credential (HTTP 401%s): set %s to an API key (`gateway apikey -name NAME` makes one) or a token", url, refused.detail(), envAPIKey)
	case refused != nil && refused.status == http.StatusUnauthorized:
		return fmt.Sprintf("the gateway at %s did not accept the credential in %s (HTTP 401%s)", url, envAPIKey, refused.detail())
	case refused != nil && refused.status == http.StatusForbidden:
		return fmt.Sprintf("the gateway at %s refused the credential in %s (HTTP 403%s)", url, envAPIKey, refused.detail())
	case refused != nil && refused.status == http.StatusNotFound:
		return fmt.Sprintf("no MCP endpoint at %s (HTTP 404): the gateway serves /mcp, and /mcp/NAME for each profile", url)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Sprintf("nothing answers at %s: is the gateway running? start it with `gateway serve -config FILE` (or -mcp-servers FILE), or give its address with -url", url)
	case refused != nil:
		return fmt.Sprintf("connect to %s: HTTP %d%s: %v", url, refused.status, refused.detail(), err)
	}
	return fmt.Sprintf("connect to %s: %v", url, err)
}

// requestProblem is the message of a request that failed once the session had started: a
// JSON-RPC error's message as the gateway wrote it (a policy's reason is in it).
func requestProblem(refused *httpRefusal, err error) string {
	var rpcErr *jsonrpc.Error
	if errors.As(err, &rpcErr) {
		return rpcErr.Message
	}
	if refused != nil {
		return fmt.Sprintf("HTTP %d%s: %v", refused.status, refused.detail(), err)
	}
	return err.Error()
}

// credentialTransport sends the credential, if any, as a bearer token with every request,
// and keeps the first answer that refused one (status 400 or more).
type credentialTransport struct {
	base       http.RoundTripper
	credential string // "" sends none

	mu sync.Mutex
	// refused is the first refusal; nil until there is one.
	refused *httpRefusal
}

// httpRefusal is an HTTP answer with an error status.
type httpRefusal struct {
	status int
	// description is the error_description of the answer's WWW-Authenticate challenge, if any.
	description string
}

// detail is the description for a message, after a colon; "" without one.
func (r *httpRefusal) detail() string {
	if r.description == "" {
		return ""
	}
	return ": " + r.description
}

func (t *credentialTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.credential != "" {
		req = req.Clone(req.Context())
		req.Header.Set("Authorization", "Bearer "+t.credential)
	}
	resp, err := t.base.RoundTrip(req)
	if err == nil && resp.StatusCode >= 400 {
		t.mu.Lock()
		if t.refused == nil {
			t.refused = &httpRefusal{status: resp.StatusCode, description: challengeDescription(resp.Header.Get("WWW-Authenticate"))}
		}
		t.mu.Unlock()
	}
	return resp, err
}

// refusal is the first refusing answer; nil if there was none.
func (t *credentialTransport) refusal() *httpRefusal {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.refused
}

// challengeDescription is the error_description parameter of a Bearer challenge (RFC 6750
// §3), or "".
func challengeDescription(challenge string) string {
	_, rest, ok := strings.Cut(challenge, `error_description="`)
	if !ok {
		return ""
	}
	desc, _, _ := strings.Cut(rest, `"`)
	return desc
}
