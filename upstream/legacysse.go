package upstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"sync"

	"github.com/manifold-mcp/manifold/internal/protocol"
)

// legacySSEConn is a client connection over the HTTP+SSE transport of 2024-11-05
// (mcp-notes §5.1): one long-lived GET stream whose first event names the endpoint to POST
// messages to; every message of the server arrives on that stream.
type legacySSEConn struct {
	name     string
	opts     httpOptions
	logger   *slog.Logger
	in       *inbox
	endpoint string // where messages are POSTed; same origin as opts.URL

	ctx       context.Context
	cancel    context.CancelFunc
	reader    sync.WaitGroup
	closeOnce sync.Once
}

var _ conn = (*legacySSEConn)(nil)

// dialLegacySSE opens the stream and waits for its endpoint event.
func dialLegacySSE(ctx context.Context, name string, opts httpOptions, logger *slog.Logger) (*legacySSEConn, error) {
	c := &legacySSEConn{name: name, opts: opts, logger: logger, in: newInbox()}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(c.ctx, http.MethodGet, opts.URL, nil)
	if err != nil {
		c.cancel()
		return nil, fmt.Errorf("SSE stream of %s: %w", name, err)
	}
	req.Header.Set("Accept", "text/event-stream")
	for k, v := range opts.Headers {
		req.Header.Set(k, v)
	}
	// The dial honours ctx; the stream then lives as long as the connection.
	stop := context.AfterFunc(ctx, c.cancel)
	defer stop()
	resp, err := opts.Client.Do(req)
	if err != nil {
		c.cancel()
		return nil, fmt.Errorf("SSE stream of %s: %w", name, err)
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if resp.StatusCode != http.StatusOK || mt != "text/event-stream" {
		resp.Body.Close()
		c.cancel()
		return nil, &requestError{Status: resp.StatusCode, Err: fmt.Errorf("GET %s did not open an SSE stream (Content-Type %q)", name, mt)}
	}
	sr := newSSEReader(resp.Body, opts.MaxMessageBytes)
	for c.endpoint == "" {
		ev, err := sr.Next()
		if err != nil {
			resp.Body.Close()
			c.cancel()
			return nil, fmt.Errorf("SSE stream of %s ended before its endpoint event: %w", name, err)
		}
		if ev.Event != "endpoint" {
			continue
		}
		endpoint, err := sameOriginURL(opts.URL, string(bytes.TrimSpace(ev.Data)))
		if err != nil {
			resp.Body.Close()
			c.cancel()
			return nil, fmt.Errorf("SSE stream of %s: %w", name, err)
		}
		c.endpoint = endpoint
	}
	c.reader.Add(1)
	go c.readStream(resp.Body, sr)
	return c, nil
}

// sameOriginURL resolves the endpoint event's URI against the stream's URL and refuses one on
// another origin, which would send the gateway's messages and headers elsewhere.
func sameOriginURL(base, ref string) (string, error) {
	b, err := url.Parse(base)
	if err != nil {
		return "", err
	}
	r, err := url.Parse(ref)
	if err != nil {
		return "", fmt.Errorf("endpoint %q is not a URI: %w", ref, err)
	}
	u := b.ResolveReference(r)
	if u.Scheme != b.Scheme || u.Host != b.Host {
		return "", fmt.Errorf("endpoint %q is on another origin than the stream; refused", ref)
	}
	return u.String(), nil
}

func (c *legacySSEConn) readStream(body io.ReadCloser, sr *sseReader) {
	defer c.reader.Done()
	defer body.Close()
	for {
		ev, err := sr.Next()
		if err != nil {
			c.in.fail(fmt.Errorf("SSE stream ended: %w", err))
			return
		}
		if ev.Event != "" && ev.Event != "message" {
			continue
		}
		if len(bytes.TrimSpace(ev.Data)) == 0 {
			continue
		}
		msg, err := protocol.Decode(ev.Data)
		if err != nil {
			c.logger.Warn("the upstream sent an SSE event that is not a JSON-RPC message; it was skipped", "error", err.Error())
			continue
		}
		c.in.put(c.ctx, inboundMsg{msg: msg})
	}
}

// Read implements conn. The legacy transport ties no message to a request's stream.
func (c *legacySSEConn) Read() (protocol.Message, arrival, error) { return c.in.read() }

// Write implements conn: a POST to the endpoint; the answer comes on the stream.
func (c *legacySSEConn) Write(ctx context.Context, m protocol.Message) error {
	data, err := protocol.Encode(m)
	if err != nil {
		return &requestError{Err: err}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint, bytes.NewReader(data))
	if err != nil {
		return &requestError{Err: err}
	}
	if c.opts.CallHeaders != nil {
		c.opts.CallHeaders(ctx, req.Header)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range c.opts.Headers {
		req.Header.Set(k, v)
	}
	req, wrote := traceWrite(req)
	resp, err := c.opts.Client.Do(req)
	if err != nil {
		err = fmt.Errorf("POST %s: %w", c.name, err)
		if c.ctx.Err() != nil {
			err = errors.New("connection closed")
		}
		if wrote() {
			return fmt.Errorf("%w: %w", errUnanswered, err)
		}
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		body, _ := readLimited(resp.Body, 64<<10)
		return &requestError{Status: resp.StatusCode, Err: fmt.Errorf("%s", bytes.TrimSpace(truncate(body, 200)))}
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return nil
}

// Close implements conn.
func (c *legacySSEConn) Close() error {
	c.closeOnce.Do(func() {
		c.cancel()
		c.in.fail(errors.New("connection closed"))
		c.reader.Wait()
	})
	return nil
}
