package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/manifold-mcp/manifold/internal/modern"
	"github.com/manifold-mcp/manifold/internal/protocol"
)

// The protocol eras of Spec.Protocol.
const (
	// ProtocolLegacy is the initialize handshake and a session (2025-11-25 and earlier).
	ProtocolLegacy = protocol.Version20251125
	// ProtocolModern is server/discover, then stateless requests that each carry their
	// version and the calling client's capabilities (2026-07-28).
	ProtocolModern = protocol.Version20260728
	// ProtocolAuto asks server/discover first and falls back to initialize when the answer
	// is not a 2026-07-28 one (mcp-2026-notes §1.15).
	ProtocolAuto = "auto"
)

const (
	// metaServerInfo is the _meta key of a 2026-07-28 result that names the server.
	metaServerInfo = "io.modelcontextprotocol/serverInfo"
	// notificationSubscriptionsAcknowledged opens a subscriptions/listen stream: the
	// notifications the server will send on it.
	notificationSubscriptionsAcknowledged = "notifications/subscriptions/acknowledged"
)

// emptyCapabilities are the client capabilities of a request made for no client: the
// gateway's own discover and list fetches, and calls whose context carries none.
var emptyCapabilities = json.RawMessage(`{}`)

type clientCapabilitiesKey struct{}

// WithClientCapabilities returns a context whose calls to a 2026-07-28 upstream declare
// caps, a JSON object, as the client capabilities of the request
// (_meta["io.modelcontextprotocol/clientCapabilities"]): the capabilities the calling client
// declared, which the upstream may rely on and nothing more (mcp-2026-notes §2.4). A call
// whose context has none declares {}. Calls to a 2025 upstream ignore it: their
// capabilities are the ones declared at initialize (Options.Capabilities).
func WithClientCapabilities(ctx context.Context, caps json.RawMessage) context.Context {
	return context.WithValue(ctx, clientCapabilitiesKey{}, caps)
}

// clientCapabilitiesOf returns the client capabilities ctx carries, or {}.
func clientCapabilitiesOf(ctx context.Context) json.RawMessage {
	if caps, ok := ctx.Value(clientCapabilitiesKey{}).(json.RawMessage); ok && len(caps) > 0 {
		return caps
	}
	return emptyCapabilities
}

// errCapabilitiesNotObject fails a call whose context carries client capabilities that are
// not a JSON object.
var errCapabilitiesNotObject = errors.New("the client capabilities of the call are not a JSON object")

// withModernMeta returns params with the _meta members a 2026-07-28 request needs: the
// protocol version and the client capabilities, always set to version and caps, and the
// client's identity (info) unless the caller put one there. Every other member of params
// and of its _meta (progressToken, logLevel, trace context) keeps its bytes.
func withModernMeta(params json.RawMessage, version string, caps json.RawMessage, info protocol.Implementation) (json.RawMessage, error) {
	caps = bytes.TrimSpace(caps)
	if len(caps) == 0 || caps[0] != '{' || !json.Valid(caps) {
		return nil, errCapabilitiesNotObject
	}
	if p := bytes.TrimSpace(params); len(p) == 0 || string(p) == "null" {
		params = json.RawMessage(`{}`)
	}
	meta, ok, err := protocol.Member(params, "_meta")
	if err != nil {
		return nil, fmt.Errorf("read params._meta: %w", err)
	}
	if !ok || len(meta) == 0 || meta[0] != '{' {
		meta = []byte(`{}`)
	}
	meta, err = protocol.SetMember(meta, protocol.MetaProtocolVersion, protocol.AppendString(nil, version))
	if err == nil {
		meta, err = protocol.SetMember(meta, protocol.MetaClientCapabilities, caps)
	}
	if err != nil {
		return nil, fmt.Errorf("set params._meta: %w", err)
	}
	if _, has, _ := protocol.Member(meta, protocol.MetaClientInfo); !has {
		ci, err := json.Marshal(info)
		if err != nil {
			return nil, fmt.Errorf("set params._meta: %w", err)
		}
		if meta, err = protocol.SetMember(meta, protocol.MetaClientInfo, ci); err != nil {
			return nil, fmt.Errorf("set params._meta: %w", err)
		}
	}
	out, err := protocol.SetMember(params, "_meta", meta)
	if err != nil {
		return nil, fmt.Errorf("set params._meta: %w", err)
	}
	return out, nil
}

// modernVersionIn returns the newest version of versions that Manifold speaks statelessly,
// or "".
func modernVersionIn(versions []string) string {
	for _, v := range protocol.ModernVersions {
		if slices.Contains(versions, v) {
			return v
		}
	}
	return ""
}

// discoverResult is what the gateway reads of a DiscoverResult (mcp-2026-notes §1.4).
type discoverResult struct {
	SupportedVersions []string                    `json:"supportedVersions"`
	Capabilities      protocol.ServerCapabilities `json:"capabilities"`
	Instructions      string                      `json:"instructions"`
	Meta              map[string]json.RawMessage  `json:"_meta"`
}

// eraAnswer is what one answer to server/discover says of the upstream's era.
type eraAnswer struct {
	// version is the stateless version to speak, "" for the session-based era.
	version string
	// server is what the gateway reads of the upstream, from a DiscoverResult; nil when the
	// answer was a -32022 naming version, which discover must then be asked at.
	server *protocol.InitializeResult
	// why says, for the log, why the answer means the session-based era.
	why string
	// unanswered is set when no answer came at all: the transport failed, or time ran out.
	unanswered error
}

// judgeDiscover reads the outcome of a server/discover call (mcp-2026-notes §1.15): a
// DiscoverResult listing a stateless version means that era; so does a -32022 refusal whose
// supported versions list one (discover is then asked again at it). Any other answer (a
// result listing only session-based versions, another error, an HTTP error without a
// JSON-RPC body) means the session-based era: the fallback never keys on one error code.
func judgeDiscover(raw json.RawMessage, err error) eraAnswer {
	var rpcErr *protocol.Error
	var reqErr *requestError
	switch {
	case err == nil:
		var res discoverResult
		if err := json.Unmarshal(raw, &res); err != nil {
			return eraAnswer{why: "its answer to server/discover is malformed: " + err.Error()}
		}
		v := modernVersionIn(res.SupportedVersions)
		if v == "" {
			return eraAnswer{why: fmt.Sprintf("server/discover lists only versions %v", res.SupportedVersions)}
		}
		server := &protocol.InitializeResult{ProtocolVersion: v, Capabilities: res.Capabilities, Instructions: res.Instructions}
		if info, ok := res.Meta[metaServerInfo]; ok {
			_ = json.Unmarshal(info, &server.ServerInfo) // self-reported, for display only
		}
		return eraAnswer{version: v, server: server}
	case errors.As(err, &rpcErr):
		if rpcErr.Code == protocol.CodeUnsupportedProtocolVersion {
			var data struct {
				Supported []string `json:"supported"`
			}
			_ = json.Unmarshal(rpcErr.Data, &data)
			if v := modernVersionIn(data.Supported); v != "" {
				return eraAnswer{version: v}
			}
			return eraAnswer{why: fmt.Sprintf("server/discover was refused (-32022), naming only versions %v", data.Supported)}
		}
		return eraAnswer{why: fmt.Sprintf("server/discover was answered with error %d", rpcErr.Code)}
	case errors.As(err, &reqErr):
		return eraAnswer{why: "server/discover was answered with " + reqErr.Error()}
	}
	return eraAnswer{unanswered: err}
}

// probeWait is how long a stdio upstream under protocol auto has to answer server/discover,
// in a start bounded by limit, before initialize is sent as well (the first answer then
// decides): a third of the start's time, so that a server slow to start (one fetched on
// first use) is not asked both questions, whose answers may then come in either order,
// while a legacy server that never answers discover still has the rest to initialize.
func probeWait(limit time.Duration) time.Duration {
	if stdioProbeWait > 0 {
		return stdioProbeWait
	}
	return limit / 3
}

// stdioProbeWait, when set (by tests only), replaces probeWait's share of the start.
var stdioProbeWait time.Duration

// askDiscover sends server/discover at version on cn and waits for the answer, at most
// limit. With raceInitialize (a stdio upstream under protocol auto), initialize follows on
// the same process when no answer came within probeWait, and the first of the two
// answers decides; initialized reports that initialize won, and the connection is then
// initialized. err is the failure of that initialize.
func (c *Client) askDiscover(ctx context.Context, cn *connection, version string, raceInitialize bool, limit time.Duration) (ans eraAnswer, initialized bool, err error) {
	params, err := withModernMeta(nil, version, emptyCapabilities, c.opts.ClientInfo)
	if err != nil {
		return eraAnswer{}, false, fmt.Errorf("server/discover: %w", err)
	}
	if mc, ok := cn.conn.(modernConn); ok {
		mc.speakModern(version, nil)
	}
	type outcome struct {
		raw json.RawMessage
		err error
	}
	probeCtx, cancelProbe := context.WithCancel(ctx)
	initCtx, cancelInit := context.WithCancel(ctx)
	var wg sync.WaitGroup
	// The loser of the race is given up (the upstream is told), and both calls have ended
	// before the connection is used further.
	defer func() {
		cancelProbe()
		cancelInit()
		wg.Wait()
	}()
	discovered := make(chan outcome, 1)
	wg.Go(func() {
		raw, err := cn.call(probeCtx, protocol.MethodDiscover, params, limit)
		discovered <- outcome{raw, err}
	})
	if !raceInitialize {
		o := <-discovered
		return judgeDiscover(o.raw, o.err), false, nil
	}
	t := time.NewTimer(probeWait(limit))
	defer t.Stop()
	select {
	case o := <-discovered:
		return judgeDiscover(o.raw, o.err), false, nil
	case <-t.C:
	}
	c.logger.Info("no answer to server/discover yet; sending initialize as well, and the first answer decides the protocol")
	initDone := make(chan error, 1)
	wg.Go(func() { initDone <- cn.initialize(initCtx, limit) })
	for {
		select {
		case o := <-discovered:
			if ans := judgeDiscover(o.raw, o.err); ans.server != nil {
				return ans, false, nil
			}
			discovered = nil // not a 2026-07-28 answer: initialize decides
		case err := <-initDone:
			// discover's answer, when it came first on the stream, is read already: the
			// probe is given up, and then returns it if it came (a 2026-07-28 one wins).
			if discovered != nil {
				cancelProbe()
				if o := <-discovered; o.err == nil {
					if ans := judgeDiscover(o.raw, o.err); ans.server != nil {
						return ans, false, nil
					}
				}
			}
			if err != nil {
				return eraAnswer{}, false, err
			}
			return eraAnswer{why: "initialize was answered before server/discover"}, true, nil
		}
	}
}

// handshake finds out which era the upstream speaks, as Spec.Protocol says, and makes cn
// ready to serve calls in it: a 2026-07-28 upstream is discovered, a 2025 one initialized.
// It returns the connection to use (under auto, a stdio process that ended during the probe
// is started again for initialize) and the method a failure concerns. On failure, the
// returned connection is still to be closed.
func (c *Client) handshake(ctx context.Context, cn *connection, transport string, limit time.Duration) (*connection, string, error) {
	mode := c.spec.Protocol
	if mode == ProtocolLegacy || transport == TransportSSE {
		return cn, protocol.MethodInitialize, cn.initialize(ctx, limit)
	}
	stdio := transport == TransportStdio
	version := protocol.ModernVersions[0]
	ans, initialized, err := c.askDiscover(ctx, cn, version, stdio && mode == ProtocolAuto, limit)
	if err != nil {
		return cn, protocol.MethodInitialize, err
	}
	if ans.version != "" && ans.server == nil {
		// A -32022 that names a version it speaks: ask again at that one, once.
		version = ans.version
		if ans, _, err = c.askDiscover(ctx, cn, version, false, limit); err != nil {
			return cn, protocol.MethodDiscover, err
		}
		if ans.server == nil && ans.why == "" && ans.unanswered == nil {
			ans.why = fmt.Sprintf("server/discover at %s was refused as well", version)
		}
	}
	if ans.server != nil {
		cn.modernVersion = ans.version
		cn.server = ans.server
		if mc, ok := cn.conn.(modernConn); ok {
			mc.speakModern(ans.version, func(tool string) []modern.Param { return c.catalog.Load().toolHeaderParams(tool) })
		}
		c.logger.Info("the upstream speaks 2026-07-28: no initialize; every request carries its version and its client's capabilities",
			"protocol_version", ans.version, "mode", mode)
		return cn, protocol.MethodDiscover, nil
	}
	if mode == ProtocolModern {
		why := ans.why
		if ans.unanswered != nil {
			return cn, protocol.MethodDiscover, fmt.Errorf("server/discover: %w (protocol is 2026-07-28; set protocol: auto or 2025-11-25 for an upstream that does not speak it)", ans.unanswered)
		}
		return cn, protocol.MethodDiscover, fmt.Errorf("the upstream does not speak 2026-07-28: %s (set protocol: auto or 2025-11-25 for it)", why)
	}
	if ans.unanswered != nil {
		if !stdio {
			// Nothing answered over HTTP at all (the upstream is unreachable): initialize
			// would meet the same.
			return cn, protocol.MethodDiscover, ans.unanswered
		}
		ans.why = "no answer to server/discover: " + ans.unanswered.Error()
	}
	if mc, ok := cn.conn.(modernConn); ok {
		mc.speakModern("", nil)
	}
	if initialized {
		c.logger.Info("the upstream speaks 2025-11-25 or earlier: initialized", "why", ans.why)
		return cn, protocol.MethodInitialize, nil
	}
	if cn.failure() != nil {
		// The process ended over the probe (some legacy servers exit on a method they do not
		// know): a new one is initialized.
		cn.close()
		raw, err := c.dial(ctx, transport)
		if err != nil {
			return cn, protocol.MethodInitialize, err
		}
		cn = newConnection(c, raw)
	}
	c.logger.Info("the upstream does not speak 2026-07-28; initializing", "why", ans.why)
	return cn, protocol.MethodInitialize, cn.initialize(ctx, limit)
}

// Timed refreshes of a 2026-07-28 upstream's lists (mcp-2026-notes §1.11): a list is
// refetched when its ttlMs runs out, plus up to a tenth of it as jitter, and never sooner than
// minTimedRefresh after it was fetched. A ttlMs of 0 (or none) means no timed refresh: the
// list changes the upstream announces refresh it.
const minTimedRefresh = time.Second

// freshnessPoll, when set (by tests only), caps each wait of refreshOnExpiry, so that a
// fake clock (Options.Now) moved past a deadline is noticed.
var freshnessPoll time.Duration

// scheduleRefresh notes that the list of kind k, just fetched, stays fresh for ttl.
func (cn *connection) scheduleRefresh(k Kind, ttl time.Duration) {
	cn.freshMu.Lock()
	cn.ttl[k] = ttl
	if ttl <= 0 {
		cn.dueAt[k] = time.Time{}
	} else {
		cn.dueAt[k] = cn.client.opts.Now().Add(max(ttl, minTimedRefresh) + rand.N(ttl/10+1))
	}
	cn.freshMu.Unlock()
	select {
	case cn.freshChanged <- struct{}{}:
	default:
	}
}

// dueRefreshes returns the kinds whose lists are due for a timed refresh now, and how long
// until the next one is (-1 when none is planned). A due kind is planned again one TTL
// later, in case its refetch fails; a refetch that succeeds plans it anew.
func (cn *connection) dueRefreshes() ([]Kind, time.Duration) {
	cn.freshMu.Lock()
	defer cn.freshMu.Unlock()
	now := cn.client.opts.Now()
	var due []Kind
	next := time.Duration(-1)
	for _, k := range Kinds {
		at := cn.dueAt[k]
		if at.IsZero() {
			continue
		}
		if !now.Before(at) {
			due = append(due, k)
			at = now.Add(max(cn.ttl[k], minTimedRefresh))
			cn.dueAt[k] = at
		}
		if wait := at.Sub(now); next < 0 || wait < next {
			next = wait
		}
	}
	return due, next
}

// refreshOnExpiry marks the lists of a 2026-07-28 upstream for refetching as their TTLs
// run out, until the connection ends.
func (cn *connection) refreshOnExpiry() {
	defer cn.workers.Done()
	for {
		due, wait := cn.dueRefreshes()
		for _, k := range due {
			cn.markDirty(k)
		}
		var expired <-chan time.Time
		var t *time.Timer
		if wait >= 0 {
			if freshnessPoll > 0 {
				wait = min(wait, freshnessPoll)
			}
			t = time.NewTimer(wait)
			expired = t.C
		}
		select {
		case <-cn.done:
		case <-cn.freshChanged:
		case <-expired:
		}
		if t != nil {
			t.Stop()
		}
		if cn.ctx.Err() != nil {
			return
		}
	}
}

// The waits between attempts to open subscriptions/listen again after it ended: doubling
// from the first to the last, and back to the first after a listen that held this long.
const (
	listenRetryFirst = time.Second
	listenRetryMax   = 30 * time.Second
	listenHeld       = time.Minute
)

// listenKinds returns the list kinds a 2026-07-28 upstream announces changes of, and the
// params of the subscriptions/listen request that asks for them (mcp-2026-notes §1.8).
// Resource subscriptions are not asked for.
func listenKinds(caps protocol.ServerCapabilities) ([]Kind, json.RawMessage) {
	var kinds []Kind
	var filter struct {
		Tools     bool `json:"toolsListChanged,omitempty"`
		Prompts   bool `json:"promptsListChanged,omitempty"`
		Resources bool `json:"resourcesListChanged,omitempty"`
	}
	if caps.Tools != nil && caps.Tools.ListChanged {
		filter.Tools = true
		kinds = append(kinds, Tools)
	}
	if caps.Prompts != nil && caps.Prompts.ListChanged {
		filter.Prompts = true
		kinds = append(kinds, Prompts)
	}
	if caps.Resources != nil && caps.Resources.ListChanged {
		filter.Resources = true
		kinds = append(kinds, Resources, ResourceTemplates)
	}
	if len(kinds) == 0 {
		return nil, nil
	}
	params, _ := json.Marshal(struct {
		Notifications any `json:"notifications"`
	}{filter})
	return kinds, params
}

// Listen holds a subscriptions/listen request with params open on a 2026-07-28 upstream
// until ctx ends or the upstream ends it, and returns why it ended (ctx's error when ctx
// ended it). acknowledged is called once, with the notifications the upstream honours, when
// it acknowledges this listen (its notifications/subscriptions/acknowledged naming the
// request); it runs on the connection's read loop and must not block. Listen fails at once
// with ErrUnavailable when the upstream is not connected, and with ErrNotModern when it
// speaks 2025-11-25.
func (c *Client) Listen(ctx context.Context, params json.RawMessage, acknowledged func(notifications json.RawMessage)) error {
	cn := c.live.Load()
	if cn == nil {
		return fmt.Errorf("%s %s: %w", c.spec.Name, protocol.MethodListen, ErrUnavailable)
	}
	if cn.modernVersion == "" {
		return fmt.Errorf("%s %s: %w", c.spec.Name, protocol.MethodListen, ErrNotModern)
	}
	_, err := cn.callAcknowledged(ctx, protocol.MethodListen, params, 0, acknowledged)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// ErrNotModern is returned (wrapped) by Listen for an upstream that speaks 2025-11-25, which
// has no subscriptions/listen.
var ErrNotModern = errors.New("the upstream speaks 2025-11-25, which has no subscriptions/listen")

// acknowledge hands an upstream's acknowledgement of a listen to the Listen that made it,
// found by its subscriptionId; it reports whether one took it.
func (cn *connection) acknowledge(params json.RawMessage) bool {
	var ack struct {
		Notifications json.RawMessage            `json:"notifications"`
		Meta          map[string]json.RawMessage `json:"_meta"`
	}
	if json.Unmarshal(params, &ack) != nil {
		return false
	}
	var id int64
	if json.Unmarshal(ack.Meta[protocol.MetaSubscriptionID], &id) != nil {
		return false
	}
	cn.mu.Lock()
	p, ok := cn.pending[id]
	hook := p.acknowledged
	if ok && hook != nil {
		p.acknowledged = nil
		cn.pending[id] = p
	}
	cn.mu.Unlock()
	if hook == nil {
		return false
	}
	hook(ack.Notifications)
	return true
}

// listenForChanges holds a subscriptions/listen request open on a 2026-07-28 upstream, so
// that its list changes arrive as they would from a 2025 one (handleNotification refetches
// the list). When the listen ends (the upstream ended it, or its stream dropped), it is
// opened again after a backoff, and the lists are refetched, since changes may have been
// missed meanwhile. It runs until the connection ends.
func (cn *connection) listenForChanges(kinds []Kind, params json.RawMessage) {
	defer cn.workers.Done()
	retry := listenRetryFirst
	for {
		began := time.Now()
		_, err := cn.call(cn.ctx, protocol.MethodListen, params, 0)
		if cn.ctx.Err() != nil {
			return
		}
		if time.Since(began) >= listenHeld {
			retry = listenRetryFirst
		}
		cn.client.logger.Warn("the upstream's subscriptions/listen ended; opening it again", "error", errString(err), "retry_in", retry.String())
		t := time.NewTimer(retry)
		select {
		case <-cn.done:
			t.Stop()
			return
		case <-t.C:
		}
		retry = min(retry*2, listenRetryMax)
		for _, k := range kinds {
			cn.markDirty(k)
		}
	}
}
