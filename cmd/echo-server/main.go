// Command echo-server is a small, fast MCP server for benchmarks, written by hand (no MCP
// SDK) so that the upstream is never the bottleneck. It speaks protocol 2025-11-25 (and
// echoes 2025-06-18, 2025-03-26 or 2024-11-05 when a client asks for one of them) and has
// one useful tool:
//
//	echo {text: string} → {"content":[{"type":"text","text":<text>}]}
//
// It answers initialize, ping, tools/list and tools/call; other methods get -32601,
// malformed JSON gets -32700 without an id, and notifications are ignored.
//
// Usage:
//
//	echo-server [-tools N]                      serve stdio (newline-delimited JSON-RPC)
//	echo-server -http 127.0.0.1:PORT [-tools N] serve Streamable HTTP at /mcp
//
// Flags:
//
//	-http ADDR  serve Streamable HTTP on ADDR (host:port; port 0 picks one) instead of stdio;
//	            the listening URL is printed on stderr
//	-tools N    also list N filler tools, tool_000 …, for catalog-size benchmarks
//
// Over stdio it answers in order and exits at the end of stdin. Over HTTP, initialize
// opens a session (Mcp-Session-Id); later requests must carry a live session id (400 when
// missing, 404 when unknown); DELETE ends the session; GET is 405.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// shutdownGrace bounds the graceful part of an HTTP shutdown.
const shutdownGrace = 5 * time.Second

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run parses flags and serves until stdin ends (stdio) or a signal arrives (HTTP). It
// returns the exit status.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("echo-server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("http", "", "serve Streamable HTTP at `ADDR` (host:port) under /mcp instead of stdio")
	tools := fs.Int("tools", 0, "list `N` extra filler tools (tool_000 …) for catalog-size benchmarks")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 || *tools < 0 || *tools > 100000 {
		fmt.Fprintln(stderr, "usage: echo-server [-http ADDR] [-tools N]   (0 <= N <= 100000)")
		return 2
	}
	srv := newServer(*tools)

	if *addr == "" {
		if err := serveStdio(srv, stdin, stdout); err != nil {
			fmt.Fprintf(stderr, "echo-server: %v\n", err)
			return 1
		}
		return 0
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serveHTTP(ctx, srv, *addr, stderr); err != nil {
		fmt.Fprintf(stderr, "echo-server: %v\n", err)
		return 1
	}
	return 0
}

// serveHTTP serves srv at http://addr/mcp until ctx ends, then shuts down gracefully.
func serveHTTP(ctx context.Context, srv *server, addr string, stderr io.Writer) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", newHTTPHandler(srv))
	hs := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	fmt.Fprintf(stderr, "echo-server: listening on http://%s/mcp\n", l.Addr())

	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(l) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		hs.Close()
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
