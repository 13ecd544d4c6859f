// Command mcpload measures an MCP server: N workers call one tool (echo by default), or
// list the tools, as fast as they can and check every answer; it prints throughput,
// latency percentiles and errors by kind. It is a lean hand-written JSON-RPC client (no MCP SDK), so that its own cost
// stays small next to the server's.
//
// Usage:
//
//	mcpload -url http://127.0.0.1:8080/mcp -n 32 -duration 10s
//	mcpload -stdio "./echo-server -tools 10" -n 4 -calls 1000 -json
//	mcpload -url http://127.0.0.1:8080/mcp -method tools/list -min-tools 11 -duration 10s
//
// Flags:
//
//	-url URL        Streamable HTTP endpoint; each worker opens its own session (with
//	                -protocol 2026-07-28: none)
//	-stdio CMD      command (split on spaces) started once and driven over stdio; the
//	                workers share its one session, answers are routed back by id
//	-n N            concurrent workers, each with one call in flight (default 1)
//	-calls M        measured calls per worker
//	-duration D     measured time (with -calls too: whichever ends first)
//	-warmup D       time before measuring starts: calls are made and checked (errors
//	                count) but not measured
//	-method M       what each call is: tools/call (default) or tools/list
//	-tool NAME      tool to call (default echo); tools/call only
//	-text STRING    text argument prefix (default hello); worker w's call s sends
//	                "<text>-<w>-<s>", and the answer's first content text must equal it;
//	                tools/call only
//	-protocol V     MCP revision spoken: 2025-11-25 (default), or 2026-07-28 over HTTP:
//	                no initialize, no session; every request carries the version,
//	                capabilities and client info in params._meta, and the
//	                MCP-Protocol-Version, Mcp-Method and Mcp-Name (tools/call) headers
//	-min-tools K    least number of tools a tools/list answer must list (default 1; 0
//	                accepts an empty list)
//	-timeout D      bound on each call and initialize (default 30s)
//	-bearer TOKEN   send "Authorization: Bearer TOKEN" on every HTTP request (POST and
//	                DELETE) of every session; when empty, the token is read from the
//	                environment variable MCPLOAD_BEARER, so that it need not show in
//	                process lists (-url only; the variable is ignored with -stdio)
//	-delete         DELETE each HTTP session at the end (default true; -delete=false
//	                leaves them)
//	-json           print one JSON object instead of the summary:
//	                {"n","calls","errors":{kind:count},"duration_s","calls_per_s",
//	                "latency_us":{"p50","p95","p99","max"},"init_us":{"p50","max"}}
//
// With -method tools/list each call is {"jsonrpc":"2.0","id":N,"method":"tools/list"}:
// no params, so the first page. Its answer must be a result whose "tools" member is an
// array of at least -min-tools elements.
//
// A call's latency runs from sending the request to the end of its answer: for an SSE
// answer, the end of the stream, which the server should close after the response
// (mcp-notes §4.2). Checking the answer comes after. Only successful measured calls count
// toward latency and calls/s.
//
// Every answer is checked. Failures are counted by kind: "http-<status>", "rpc<code>" (a
// JSON-RPC error, e.g. "rpc-32601"), "wrong-echo" (another id, no result, other text,
// or for tools/list no tools array), "short-list" (a tools/list answer with fewer than
// -min-tools tools), "transport", "timeout" and "decode". The exit status is 1 when any call or
// initialize failed or the run was interrupted, 2 for bad flags, 0 otherwise, so scripts
// can assert zero errors.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// version is reported in clientInfo.
const version = "0.1.0"

// envBearer holds the bearer token when -bearer is not given.
const envBearer = "MCPLOAD_BEARER"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run parses flags, runs the load and prints the result. It returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mcpload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg Config
	var command string
	var asJSON bool
	var minTools int
	fs.StringVar(&cfg.URL, "url", "", "Streamable HTTP endpoint `URL`")
	fs.StringVar(&command, "stdio", "", "stdio server `command` and arguments, split on spaces")
	fs.IntVar(&cfg.Workers, "n", 1, "concurrent workers (sessions over HTTP)")
	fs.IntVar(&cfg.Calls, "calls", 0, "measured calls per worker")
	fs.DurationVar(&cfg.Duration, "duration", 0, "measured time")
	fs.DurationVar(&cfg.Warmup, "warmup", 0, "unmeasured time before measuring")
	fs.StringVar(&cfg.Method, "method", MethodCall, "`method` of each call: "+MethodCall+" or "+MethodList)
	fs.StringVar(&cfg.Tool, "tool", "echo", "tool to call (tools/call)")
	fs.StringVar(&cfg.Text, "text", "hello", "text argument prefix (tools/call)")
	fs.StringVar(&cfg.Protocol, "protocol", ProtocolLegacy, "MCP revision `V` spoken: "+ProtocolLegacy+", or "+ProtocolModern+" (stateless, -url only)")
	fs.IntVar(&minTools, "min-tools", 1, "least number `K` of tools a tools/list answer must list")
	fs.StringVar(&cfg.Bearer, "bearer", "", "send `TOKEN` as \"Authorization: Bearer TOKEN\" on every HTTP request (if empty, $"+envBearer+")")
	fs.DurationVar(&cfg.Timeout, "timeout", 30*time.Second, "bound on each call")
	fs.BoolVar(&cfg.Delete, "delete", true, "DELETE each HTTP session at the end")
	fs.BoolVar(&asJSON, "json", false, "print one JSON object")
	fs.BoolVar(&cfg.CoalesceWrites, "coalesce", false, "let concurrent stdio workers share one pipe write (off: one write per message, as the gateway writes)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg.Command = strings.Fields(command)
	cfg.Stderr = stderr
	var problems []string
	if fs.NArg() > 0 {
		problems = append(problems, "unexpected arguments: "+strings.Join(fs.Args(), " "))
	}
	if (cfg.URL == "") == (len(cfg.Command) == 0) {
		problems = append(problems, "give exactly one of -url and -stdio")
	}
	if cfg.Calls <= 0 && cfg.Duration <= 0 {
		problems = append(problems, "give -calls or -duration")
	}
	switch {
	case cfg.Bearer != "" && cfg.URL == "":
		problems = append(problems, "-bearer applies to -url only")
	case cfg.Bearer == "" && cfg.URL != "":
		cfg.Bearer = os.Getenv(envBearer)
	}
	if !validBearer(cfg.Bearer) {
		problems = append(problems, "the bearer token (-bearer or $"+envBearer+") must be visible ASCII without spaces")
	}
	if cfg.Workers < 1 || cfg.Calls < 0 || cfg.Duration < 0 || cfg.Warmup < 0 || cfg.Timeout <= 0 {
		problems = append(problems, "-n must be at least 1; -calls, -duration, -warmup must not be negative; -timeout must be positive")
	}
	switch cfg.Protocol {
	case ProtocolLegacy:
	case ProtocolModern:
		if cfg.URL == "" {
			problems = append(problems, "-protocol "+ProtocolModern+" applies to -url only")
		}
	default:
		problems = append(problems, "-protocol must be "+ProtocolLegacy+" or "+ProtocolModern)
	}
	switch cfg.Method {
	case MethodCall:
		if cfg.Tool == "" {
			problems = append(problems, "-tool must not be empty")
		}
	case MethodList:
	default:
		problems = append(problems, "-method must be "+MethodCall+" or "+MethodList)
	}
	switch {
	case minTools < 0:
		problems = append(problems, "-min-tools must not be negative")
	case minTools == 0:
		cfg.MinTools = -1 // Config's zero means the default, 1
	default:
		cfg.MinTools = minTools
	}
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(stderr, "mcpload:", p)
		}
		return 2
	}

	res, err := Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "mcpload:", err)
		return 1
	}
	if asJSON {
		err = writeJSON(stdout, res)
	} else {
		err = writeSummary(stdout, res)
	}
	switch {
	case err != nil:
		fmt.Fprintln(stderr, "mcpload:", err)
		return 1
	case res.ErrorCount() > 0, errors.Is(ctx.Err(), context.Canceled):
		return 1
	}
	return 0
}
