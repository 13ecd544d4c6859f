// Command demo-server is Manifold's demo MCP server (package internal/demo) as a program of
// its own, served over stdio; `gateway demo` serves the same. It needs no network.
//
// Flags:
//
//	-name NAME   server name reported in serverInfo (default "demo")
//
// Stdout carries the protocol; anything else goes to stderr.
package main

import (
	"context"
	"flag"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/manifold-mcp/manifold/internal/demo"
)

func main() {
	log.SetFlags(0)
	log.SetOutput(os.Stderr)
	log.SetPrefix("demo-server: ")

	name := flag.String("name", "demo", "server name reported in serverInfo")
	flag.CommandLine.SetOutput(os.Stderr)
	flag.Parse()
	if flag.NArg() > 0 {
		log.Fatalf("unexpected arguments: %q", flag.Args())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := demo.Serve(ctx, *name); err != nil {
		log.Fatal(err)
	}
}
