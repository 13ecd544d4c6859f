package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/manifold-mcp/manifold/gateway"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/upstream"
)

// catalog connects every upstream, prints the merged catalog with each item's owner and the
// name collisions, and exits: a dry run of what clients would see. It exits 1 when an upstream
// is not ready once every one has made its first attempt.
func catalog(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("catalog", flag.ContinueOnError)
	load := configFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	profile := fs.String("profile", "", "print the catalog of this profile (served at /mcp/NAME) instead of /mcp's")
	if code, ok := parse(fs, args, stderr); !ok {
		return code
	}
	cfg, code := load(stderr)
	if cfg == nil {
		return code
	}
	if *profile != "" && !slices.ContainsFunc(cfg.Profiles, func(p config.Profile) bool { return p.Name == *profile }) {
		names := make([]string, len(cfg.Profiles))
		for i, p := range cfg.Profiles {
			names[i] = p.Name
		}
		known := "it has none"
		if len(names) > 0 {
			known = "it has " + strings.Join(names, ", ")
		}
		fmt.Fprintf(stderr, "gateway catalog: no profile %q in %s: %s\n", *profile, cfg.File, known)
		return 2
	}
	logger := newLogger(cfg, stderr)
	backends, err := openBackends(cfg, logger, nil, nil)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	defer backends.Close()
	gw, err := gateway.New(cfg, &gateway.Options{Logger: logger, Version: version, Backends: backends})
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	defer gw.Close()
	gw.Start()

	// Wait until every upstream has answered or failed its first attempt.
	wait := 5 * time.Second
	for _, u := range cfg.EnabledUpstreams() {
		wait = max(wait, max(u.InitializeTimeout, u.FirstInitializeTimeout)+5*time.Second)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for !settled(gw.UpstreamStatuses()) && ctx.Err() == nil {
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
		}
	}
	view := gw.Catalog()
	if *profile != "" {
		view, _ = gw.ProfileCatalog(*profile)
	}
	statuses := gw.UpstreamStatuses()
	// An upstream that is not ready makes the exit status 1, so that a script or a CI step
	// running catalog notices; the catalog of the others is still printed.
	code = 0
	for _, st := range statuses {
		if st.State != upstream.StateReady {
			code = 1
		}
	}
	if *asJSON {
		out, _ := json.MarshalIndent(struct {
			gateway.CatalogView
			Upstreams map[string]upstream.Status `json:"upstreams"`
		}{view, statuses}, "", "  ")
		fmt.Fprintln(stdout, string(out))
		return code
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tNAME\tUPSTREAM\tORIGINAL")
	for _, it := range view.Items {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", it.Kind, it.Name, it.Upstream, it.Original)
	}
	tw.Flush()
	if len(view.Collisions) > 0 {
		fmt.Fprintln(stdout, "\ncollisions (the upstream listed first in the config wins):")
		for _, c := range view.Collisions {
			fmt.Fprintf(stdout, "  %s %s: kept from %s, dropped from %s (its %q)\n", c.Kind, c.Name, c.KeptUpstream, c.DroppedUpstream, c.DroppedOriginal)
		}
	}
	fmt.Fprintln(stdout, "\nupstreams:")
	names := make([]string, 0, len(statuses))
	for name := range statuses {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		st := statuses[name]
		line := fmt.Sprintf("  %s: %s", name, st.State)
		if st.Error != "" {
			line += " (" + st.Error + ")"
		}
		fmt.Fprintln(stdout, line)
	}
	if code != 0 {
		fmt.Fprintln(stderr, "gateway catalog: an upstream is not ready (see upstreams above, and the log)")
	}
	return code
}

// settled reports whether no upstream is still making its first attempt.
func settled(statuses map[string]upstream.Status) bool {
	for _, s := range statuses {
		if s.State == upstream.StateStarting {
			return false
		}
	}
	return true
}

// health probes a running gateway's /healthz: exit 0 when it answers 200. Container images
// without a shell or curl use it as their HEALTHCHECK.
func health(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("health", flag.ContinueOnError)
	url := fs.String("url", "", "the gateway's base URL (its /healthz, /mcp or /readyz URL also works); default http://127.0.0.1:8080, or the -config file's listen address")
	configPath := fs.String("config", "", "a gateway config whose listen address to probe (a container's HEALTHCHECK follows its port so)")
	if code, ok := parse(fs, args, stderr); !ok {
		return code
	}
	target := *url
	switch {
	case target != "" && *configPath != "":
		fmt.Fprintln(stderr, "gateway health: give -url or -config, not both")
		return 2
	case *configPath != "":
		cfg, err := config.Load(*configPath, os.LookupEnv)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 2
		}
		target = listenURL(cfg.Listen)
	case target == "":
		target = "http://127.0.0.1:8080"
	}
	probe, err := healthURL(target)
	if err != nil {
		fmt.Fprintln(stderr, "gateway health:", err)
		return 2
	}
	client := &http.Client{Timeout: 3 * time.Second}
	resp, err := client.Get(probe)
	if err != nil {
		fmt.Fprintln(stderr, "unhealthy:", err)
		return 1
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintln(stderr, "unhealthy: HTTP", resp.StatusCode)
		return 1
	}
	fmt.Fprintln(stdout, "healthy")
	return 0
}

// healthURL is the /healthz URL of the gateway that raw names: its base URL, or one of its
// endpoints (/mcp, /healthz, /readyz).
func healthURL(raw string) (string, error) {
	u, err := neturl.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("-url %q: want the gateway's URL, like http://127.0.0.1:8080", raw)
	}
	p := strings.TrimSuffix(u.Path, "/")
	for _, endpoint := range []string{"/mcp", "/healthz", "/readyz"} {
		p = strings.TrimSuffix(p, endpoint)
	}
	u.Path, u.RawQuery, u.Fragment = p+"/healthz", "", ""
	return u.String(), nil
}

// listenURL is the base URL at which a gateway listening on addr answers on this machine: a
// listener on all interfaces is probed on loopback.
func listenURL(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://" + addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}
