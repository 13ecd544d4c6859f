package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	neturl "net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/manifold-mcp/manifold/internal/admin"
	"github.com/manifold-mcp/manifold/internal/admin/adminclient"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/grants"
)

// envAdminKey names the variable whose value `gateway approvals`, `gateway pins` and
// `gateway grants` send as the admin credential.
const envAdminKey = "MANIFOLD_ADMIN_KEY"

// defaultAdminURL is the admin listener the operator commands call without -url or -config:
// the example config's.
const defaultAdminURL = "http://127.0.0.1:8081"

// adminTimeout bounds one command's requests to the admin API.
const adminTimeout = 30 * time.Second

// operatorCommand is what `gateway approvals`, `gateway pins` and `gateway grants` share: the
// flags, the verb and its operands, and the client of the admin API.
type operatorCommand struct {
	name   string
	stdout io.Writer
	stderr io.Writer
	json   bool
	url    string
	client *adminclient.Client
}

// parseOperator parses args, flags and operands in any order: `gateway NAME [VERB [OPERAND]]`
// with -url, -config, -json and the extra flags declare adds. ok=false means the caller
// returns code.
func parseOperator(name, synopsis string, args []string, stdout, stderr io.Writer, declare func(*flag.FlagSet)) (c *operatorCommand, words []string, code int, ok bool) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", "", "the admin listener's base URL; default the -config file's admin.listen, or "+defaultAdminURL)
	configPath := fs.String("config", "", "a gateway config whose admin.listen to call")
	asJSON := fs.Bool("json", false, "print the admin API's JSON instead of a table")
	if declare != nil {
		declare(fs)
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: gateway %s %s\n\nCalls a running gateway's admin API with the credential in %s (an admin API key of\nadmin.api_keys, or a token with one of admin.roles).\n\n", name, synopsis, envAdminKey)
		fs.PrintDefaults()
	}
	for {
		if err := fs.Parse(args); err != nil {
			return nil, nil, 2, false
		}
		if fs.NArg() == 0 {
			break
		}
		words, args = append(words, fs.Arg(0)), fs.Args()[1:]
	}
	target := *url
	switch {
	case target != "" && *configPath != "":
		fmt.Fprintf(stderr, "gateway %s: give -url or -config, not both\n", name)
		return nil, nil, 2, false
	case *configPath != "":
		cfg, err := config.Load(*configPath, os.LookupEnv)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return nil, nil, 2, false
		}
		if !cfg.Admin.Enabled() {
			fmt.Fprintf(stderr, "gateway %s: %s has no admin listener (admin.listen): the gateway serves no admin API to call\n", name, *configPath)
			return nil, nil, 2, false
		}
		target = listenURL(cfg.Admin.Listen)
	case target == "":
		target = defaultAdminURL
	}
	if u, err := neturl.Parse(target); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		fmt.Fprintf(stderr, "gateway %s: -url %q: want the admin listener's URL, like %s\n", name, target, defaultAdminURL)
		return nil, nil, 2, false
	}
	key := os.Getenv(envAdminKey)
	if key == "" {
		fmt.Fprintf(stderr, "gateway %s: set %s to an admin API key (an entry of admin.api_keys; `gateway apikey -name NAME` makes one) or a token with one of admin.roles\n", name, envAdminKey)
		return nil, nil, 2, false
	}
	c = &operatorCommand{name: name, stdout: stdout, stderr: stderr, json: *asJSON, url: target,
		client: &adminclient.Client{URL: target, Key: key}}
	return c, words, 0, true
}

// usageError reports a wrong verb or operand.
func (c *operatorCommand) usageError(format string, a ...any) int {
	fmt.Fprintf(c.stderr, "gateway %s: %s\n", c.name, fmt.Sprintf(format, a...))
	return 2
}

// fail prints what went wrong and what to do about it; code 1.
func (c *operatorCommand) fail(err error, notFound string) int {
	var status *adminclient.StatusError
	errors.As(err, &status)
	msg := err.Error()
	switch {
	case errors.Is(err, admin.ErrUnauthorized):
		msg = fmt.Sprintf("the admin API at %s did not accept the credential in %s (%v): use a key of admin.api_keys (client keys of auth.api_keys are not admins')", c.url, envAdminKey, status)
	case errors.Is(err, admin.ErrForbidden):
		msg = fmt.Sprintf("the admin API at %s refused: %s", c.url, status.Message)
	case errors.Is(err, admin.ErrNotFound) && notFound != "":
		msg = notFound
	case errors.Is(err, admin.ErrConflict):
		msg = fmt.Sprintf("%v: list again and decide on what is there now", err)
	case errors.Is(err, syscall.ECONNREFUSED):
		msg = fmt.Sprintf("nothing answers at %s: is the gateway running with an admin listener (admin.listen)? give its address with -url, or its config with -config", c.url)
	}
	fmt.Fprintf(c.stderr, "gateway %s: %s\n", c.name, msg)
	return 1
}

// printJSON prints v indented.
func (c *operatorCommand) printJSON(v any) int {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		fmt.Fprintf(c.stderr, "gateway %s: %v\n", c.name, err)
		return 1
	}
	return 0
}

// verbOf is the verb of an operator command's words: the first, or "list" without any.
func verbOf(words []string) string {
	if len(words) == 0 {
		return "list"
	}
	return words[0]
}

// listed prints what fetch lists: under key as JSON with -json, else with print.
func listed[T any](c *operatorCommand, ctx context.Context, key string, fetch func(context.Context) ([]T, error), print func(io.Writer, []T)) int {
	all, err := fetch(ctx)
	if err != nil {
		return c.fail(err, "")
	}
	if c.json {
		if all == nil {
			all = []T{}
		}
		return c.printJSON(map[string]any{key: all})
	}
	print(c.stdout, all)
	return 0
}

// decided prints a decision's outcome: v under key as JSON with -json, else line.
func (c *operatorCommand) decided(key string, v any, line string) int {
	if c.json {
		return c.printJSON(map[string]any{key: v})
	}
	fmt.Fprintln(c.stdout, line)
	return 0
}

// commandContext is the context of one operator command: it ends at SIGINT or SIGTERM, or
// when adminTimeout is over.
func commandContext() (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	return ctx, func() { cancel(); stop() }
}

// operate runs an operator command: it parses args (parseOperator), then has act do the verb
// within the command's context (commandContext), and returns act's exit code.
func operate(name, synopsis string, args []string, stdout, stderr io.Writer, declare func(*flag.FlagSet),
	act func(ctx context.Context, c *operatorCommand, verb string, words []string) int) int {
	c, words, code, ok := parseOperator(name, synopsis, args, stdout, stderr, declare)
	if !ok {
		return code
	}
	ctx, cancel := commandContext()
	defer cancel()
	return act(ctx, c, verbOf(words), words)
}

const approvalsSynopsis = "[list | approve ID | deny ID] [-url URL | -config FILE] [-json]"

// approvals lists the calls held for an operator's approval, or approves or denies one.
func approvals(args []string, stdout, stderr io.Writer) int {
	return operate("approvals", approvalsSynopsis, args, stdout, stderr, nil, approvalsVerb)
}

// approvalsVerb does the verb of `gateway approvals`.
func approvalsVerb(ctx context.Context, c *operatorCommand, verb string, words []string) int {
	switch {
	case verb == "list" && len(words) <= 1:
		return listed(c, ctx, "approvals", c.client.Approvals, func(w io.Writer, held []admin.Approval) { printApprovals(w, held, time.Now()) })
	case (verb == admin.Approve || verb == admin.Deny) && len(words) == 2:
		id := words[1]
		a, err := c.client.Decide(ctx, id, verb)
		if err != nil {
			return c.fail(err, fmt.Sprintf("no call %s is held: it ran, was refused or timed out, or its client went away; `gateway approvals` lists those still held", printable(id)))
		}
		return c.decided("approval", a, fmt.Sprintf("%s: %s %s of %s", verbPast(verb), a.ID, printable(a.Tool), printable(a.Principal)))
	case verb == admin.Approve || verb == admin.Deny:
		return c.usageError("%s takes the id of one held call (`gateway approvals` lists them)", verb)
	}
	return c.usageError("unexpected %q: want list, approve ID or deny ID", strings.Join(words, " "))
}

// printApprovals prints the held calls as a table, or says there are none.
func printApprovals(w io.Writer, held []admin.Approval, now time.Time) {
	if len(held) == 0 {
		fmt.Fprintln(w, "no calls are held for approval")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTOOL\tPRINCIPAL\tRULE\tLEFT\tARGUMENTS")
	for _, a := range held {
		left := "-"
		if !a.Deadline.IsZero() {
			left = max(a.Deadline.Sub(now), 0).Round(time.Second).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", printable(a.ID), printable(a.Tool), printable(a.Principal), printable(a.Rule), left, compactJSON(a.Arguments, 60))
	}
	tw.Flush()
}

const pinsSynopsis = "[list | accept UPSTREAM/TOOL | reject UPSTREAM/TOOL] [-hash H] [-url URL | -config FILE] [-json]"

// pins lists the pinned tool definitions and their pending changes, or accepts or rejects
// a change.
func pins(args []string, stdout, stderr io.Writer) int {
	var hash string
	return operate("pins", pinsSynopsis, args, stdout, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&hash, "hash", "", "accept or reject the change of this hash only (as `gateway pins` shows it, or whole from -json); default the change pending now")
	}, func(ctx context.Context, c *operatorCommand, verb string, words []string) int {
		return pinsVerb(ctx, c, verb, words, hash)
	})
}

// pinsVerb does the verb of `gateway pins`, for the change of hash ("" for the one
// pending now).
func pinsVerb(ctx context.Context, c *operatorCommand, verb string, words []string, hash string) int {
	switch {
	case verb == "list" && len(words) <= 1:
		return listed(c, ctx, "pins", c.client.Pins, printPins)
	case (verb == admin.Accept || verb == admin.Reject) && len(words) == 2:
		upstream, tool, found := strings.Cut(words[1], "/")
		if !found || upstream == "" || tool == "" {
			return c.usageError("%s takes UPSTREAM/TOOL, like github/create_issue (the tool's name at its upstream)", verb)
		}
		notFound := fmt.Sprintf("no pin of %s/%s: `gateway pins` lists the pinned tools by upstream and the tool's name there", printable(upstream), printable(tool))
		all, err := c.client.Pins(ctx)
		if err != nil {
			return c.fail(err, "")
		}
		p, ok := findPin(all, upstream, tool)
		switch {
		case !ok:
			return c.fail(fmt.Errorf("%w", admin.ErrNotFound), notFound)
		case p.Change == nil:
			fmt.Fprintf(c.stderr, "gateway pins: %s/%s has no pending change: its upstream lists it as pinned\n", printable(upstream), printable(tool))
			return 1
		}
		hash = pendingHash(p.Change.Hash, hash)
		resolved, err := c.client.Resolve(ctx, upstream, tool, hash, verb)
		if err != nil {
			return c.fail(err, notFound)
		}
		return c.decided("pin", resolved, fmt.Sprintf("%s: the change %s of %s/%s", verbPast(verb), hash, printable(upstream), printable(tool)))
	case verb == admin.Accept || verb == admin.Reject:
		return c.usageError("%s takes one UPSTREAM/TOOL (`gateway pins` lists them)", verb)
	}
	return c.usageError("unexpected %q: want list, accept UPSTREAM/TOOL or reject UPSTREAM/TOOL", strings.Join(words, " "))
}

// pendingHash is the hash to decide on: the pending change's when given is "" or a prefix of
// it at least as long as the table shows (shortHash), else given as it is, for the gateway to
// refuse as a change that is no longer pending.
func pendingHash(pending, given string) string {
	given = strings.TrimSuffix(given, "…")
	if given == "" || (len(given) >= len(shortHash(pending))-len("…") && strings.HasPrefix(pending, given)) {
		return pending
	}
	return given
}

// shortHash is a hash as the table shows it: its algorithm and 12 hex digits.
func shortHash(h string) string {
	const keep = len("sha256:") + 12
	if len(h) <= keep {
		return h
	}
	return h[:keep] + "…"
}

func findPin(all []admin.Pin, upstream, tool string) (admin.Pin, bool) {
	for _, p := range all {
		if p.Upstream == upstream && p.Tool == tool {
			return p, true
		}
	}
	return admin.Pin{}, false
}

// printPins prints the pins as a table, then each pending change's diff.
func printPins(w io.Writer, all []admin.Pin) {
	if len(all) == 0 {
		fmt.Fprintln(w, "no tool definitions are pinned (pinning is set per upstream: pinning: withhold or log)")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "UPSTREAM/TOOL\tSTATE\tPINNED\tCHANGE")
	for _, p := range all {
		state, change := "pinned", "-"
		if p.Change != nil {
			state, change = "changed", shortHash(p.Change.Hash)
			if p.Change.Rejected {
				state = "rejected"
			}
		}
		if p.Withheld {
			state += ", withheld"
		}
		if !p.Missing.IsZero() {
			state += ", missing since " + p.Missing.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%s\n", printable(p.Upstream), printable(p.Tool), state, shortHash(p.Hash), change)
	}
	tw.Flush()
	for _, p := range all {
		if p.Change == nil || p.Change.Rejected {
			continue
		}
		fmt.Fprintf(w, "\n%s/%s changed (accept or reject it with `gateway pins accept|reject %s/%s`):\n", printable(p.Upstream), printable(p.Tool), printable(p.Upstream), printable(p.Tool))
		for _, d := range p.Change.Diff {
			fmt.Fprintf(w, "  %s\n    before: %s\n    after:  %s\n", printable(d.Field), compactJSON(d.Before, 0), compactJSON(d.After, 0))
		}
	}
}

// verbPast is the past tense of a decision, for its confirmation.
func verbPast(verb string) string {
	switch verb {
	case admin.Approve:
		return "approved"
	case admin.Deny:
		return "denied"
	case admin.Accept:
		return "accepted"
	case admin.Reject:
		return "rejected"
	}
	return verb
}

// compactJSON is raw on one line, cut to limit runes with "…" (limit 0: whole); "-" when
// empty. JSON escapes every control character, so it is safe on a terminal.
func compactJSON(raw json.RawMessage, limit int) string {
	if len(raw) == 0 {
		return "-"
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return strconv.Quote(string(raw))
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // the text as it is: < and > are harmless on a terminal
	if err := enc.Encode(v); err != nil {
		return strconv.Quote(string(raw))
	}
	s := strings.TrimSuffix(b.String(), "\n")
	if r := []rune(s); limit > 0 && len(r) > limit {
		s = string(r[:limit-1]) + "…"
	}
	return s
}

// printable is s, quoted when it holds a character a terminal would act on (names and
// principals come from upstreams and clients).
func printable(s string) string {
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

const grantsSynopsis = "[list | revoke ISSUER SUBJECT UPSTREAM] [-url URL | -config FILE] [-json]"

// grantsCommand lists the grants users gave a running gateway at upstreams
// (credentials.user_oauth), or revokes one.
func grantsCommand(args []string, stdout, stderr io.Writer) int {
	return operate("grants", grantsSynopsis, args, stdout, stderr, nil, grantsVerb)
}

// grantsVerb does the verb of `gateway grants`.
func grantsVerb(ctx context.Context, c *operatorCommand, verb string, words []string) int {
	switch {
	case verb == "list" && len(words) <= 1:
		return listed(c, ctx, "grants", c.client.AllGrants, func(w io.Writer, all []grants.GrantInfo) { printGrants(w, all, time.Now()) })
	case verb == "revoke" && len(words) == 4:
		user, upstream := grants.Principal{Issuer: words[1], Subject: words[2]}, words[3]
		if err := c.client.RevokeGrant(ctx, user, upstream); err != nil {
			return c.fail(err, fmt.Sprintf("%s has no grant at upstream %s: `gateway grants` lists the grants by issuer, subject and upstream", printable(user.String()), printable(upstream)))
		}
		return c.decided("revoked", map[string]any{"principal": user, "upstream": upstream},
			fmt.Sprintf("revoked: %s's grant at %s (the user connects %s again to use it)", printable(user.String()), printable(upstream), printable(upstream)))
	case verb == "revoke":
		return c.usageError("revoke takes the ISSUER, SUBJECT and UPSTREAM of one grant, as `gateway grants` lists them")
	}
	return c.usageError("unexpected %q: want list or revoke ISSUER SUBJECT UPSTREAM", strings.Join(words, " "))
}

// printGrants prints the grants as a table, then how to revoke those that do not open, or
// says there are none.
func printGrants(w io.Writer, all []grants.GrantInfo, now time.Time) {
	if len(all) == 0 {
		fmt.Fprintln(w, "no user has connected an upstream (upstreams with credentials.user_oauth ask each user to)")
		return
	}
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return printable(s)
	}
	moment := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format(time.RFC3339)
	}
	unreadable := 0
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ISSUER\tSUBJECT\tUPSTREAM\tSCOPES\tGRANTED\tTOKEN EXPIRY\tREFRESHABLE")
	for _, g := range all {
		who := dash(g.Principal.Issuer) + "\t" + dash(g.Principal.Subject) + "\t" + dash(g.Upstream)
		if g.Unreadable {
			unreadable++
			fmt.Fprintf(tw, "%s\tunreadable\t-\t-\t-\n", who)
			continue
		}
		scopes := make([]string, len(g.Scopes))
		for i, s := range g.Scopes {
			scopes[i] = printable(s)
		}
		expiry := moment(g.Expiry)
		if !g.Expiry.IsZero() && !g.Expiry.After(now) {
			expiry += " (expired)"
		}
		refreshable := "no"
		if g.Refreshable {
			refreshable = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", who, dash(strings.Join(scopes, " ")), moment(g.Granted), expiry, refreshable)
	}
	tw.Flush()
	if unreadable > 0 {
		fmt.Fprintf(w, "\n%d grant(s) cannot be opened (changed, or sealed with a key no longer configured): revoke those that name their user with `gateway grants revoke ISSUER SUBJECT UPSTREAM`, and the user connects again\n", unreadable)
	}
}
