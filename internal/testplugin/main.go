// Command testplugin is a policy plugin for the tests of policy/plugin: it fails on demand.
// Its configuration (all fields optional; an empty config allows every call):
//
//	{
//	  "effect": "allow" | "deny" | "require_approval" | "rewrite" | "bogus",
//	  "reason": "…",            // the decision's reason
//	  "arguments": {…},         // the rewrite's arguments (raw, so invalid ones can be sent)
//	  "hang": true,             // Decide and Inspect block until the gateway gives up
//	  "crash_on": "key",        // exit with status 3 on a call whose arguments have this key
//	  "error": "…",             // Decide and Inspect return this error
//	  "fail_configure": "…",    // Configure returns this error
//	  "mark": "…",              // Inspect appends a text content item with this text
//	  "stamp": "…"              // Inspect appends "<stamp> <method> <target>" to the result's
//	                            // _meta["testplugin/seen"], whatever the result's method
//	}
//
// With TESTPLUGIN_INSPECT=1 in its environment it implements sdk.Inspector; without, not.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"

	"github.com/manifold-mcp/manifold/plugin/sdk"
)

func main() {
	p := &decider{}
	if os.Getenv("TESTPLUGIN_INSPECT") == "1" {
		sdk.Serve(&inspector{p})
		return
	}
	sdk.Serve(p)
}

type config struct {
	Effect        string          `json:"effect"`
	Reason        string          `json:"reason"`
	Arguments     json.RawMessage `json:"arguments"`
	Hang          bool            `json:"hang"`
	CrashOn       string          `json:"crash_on"`
	Error         string          `json:"error"`
	FailConfigure string          `json:"fail_configure"`
	Mark          string          `json:"mark"`
	Stamp         string          `json:"stamp"`
}

type decider struct{ c config }

type inspector struct{ *decider }

var (
	_ sdk.Configurer = (*decider)(nil)
	_ sdk.Inspector  = (*inspector)(nil)
)

func (d *decider) Configure(raw json.RawMessage) error {
	if err := json.Unmarshal(raw, &d.c); err != nil {
		return err
	}
	if d.c.FailConfigure != "" {
		return errors.New(d.c.FailConfigure)
	}
	sdk.Logger().Info("testplugin configured", "effect", d.c.Effect)
	return nil
}

// misbehave does what the config asks of every call: crash, hang, or fail.
func (d *decider) misbehave(ctx context.Context, call *sdk.Call) error {
	if d.c.CrashOn != "" {
		var args map[string]json.RawMessage
		if json.Unmarshal(call.Arguments, &args) == nil {
			if _, ok := args[d.c.CrashOn]; ok {
				os.Exit(3)
			}
		}
	}
	if d.c.Hang {
		<-ctx.Done()
		return ctx.Err()
	}
	if d.c.Error != "" {
		return errors.New(d.c.Error)
	}
	return nil
}

func (d *decider) Decide(ctx context.Context, call *sdk.Call) (*sdk.Decision, error) {
	if err := d.misbehave(ctx, call); err != nil {
		return nil, err
	}
	switch d.c.Effect {
	case "", "allow":
		return sdk.Allow(), nil
	case "deny":
		return sdk.Deny(d.c.Reason), nil
	case "require_approval":
		return sdk.RequireApproval(d.c.Reason), nil
	case "rewrite":
		return sdk.Rewrite(d.c.Arguments), nil
	}
	return &sdk.Decision{Effect: sdk.Effect(99)}, nil
}

func (i *inspector) Inspect(ctx context.Context, call *sdk.Call, result json.RawMessage) (json.RawMessage, error) {
	if err := i.misbehave(ctx, call); err != nil {
		return nil, err
	}
	if i.c.Mark == "" && i.c.Stamp == "" {
		return result, nil
	}
	var r map[string]any
	if err := json.Unmarshal(result, &r); err != nil {
		return nil, err
	}
	if i.c.Mark != "" {
		content, _ := r["content"].([]any)
		r["content"] = append(content, map[string]any{"type": "text", "text": i.c.Mark})
	}
	if i.c.Stamp != "" {
		meta, _ := r["_meta"].(map[string]any)
		if meta == nil {
			meta = map[string]any{}
		}
		seen, _ := meta["testplugin/seen"].([]any)
		meta["testplugin/seen"] = append(seen, i.c.Stamp+" "+call.Method+" "+call.Target)
		r["_meta"] = meta
	}
	return json.Marshal(r)
}
