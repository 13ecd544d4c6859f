package config

import (
	"fmt"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Admin configures the admin API and page (key `admin`): a listener of its own for
// operators, who decide held calls and changed tool definitions there. Without a listen
// address there is none.
type Admin struct {
	// Listen is the admin listener's TCP address, host:port (key `listen`). Empty: no admin
	// API. Like the MCP listener, it must stay on loopback unless admins authenticate.
	Listen string
	// APIKeys are the admins' keys, by hash (key `api_keys`); the same entries as
	// auth.api_keys, made by `gateway apikey`. APIKeysFile names a file of more (key
	// `api_keys_file`).
	APIKeys     []APIKey
	APIKeysFile string
	// Roles admit a bearer token of one of auth.oidc's issuers that carries one of these
	// roles (key `roles`), as the issuer's roles claim says.
	Roles []string
	// AllowedOrigins are browser origins, besides the admin page's own, that may call the
	// admin API (key `allowed_origins`).
	AllowedOrigins []string
	// Webhook is a URL the gateway POSTs each held call to (key `webhook`), as JSON, so that
	// operators learn of it; empty: none. Held calls are also logged and listed by the API.
	Webhook string

	// File and Line say where the `admin` key is, for messages at run time.
	File string
	Line int
}

// Enabled reports whether the admin listener runs.
func (a *Admin) Enabled() bool { return a.Listen != "" }

// The values of Upstream.Pinning and of policy.approval.by.
const (
	PinningOff      = "off"
	PinningWithhold = "withhold"
	PinningLog      = "log"

	ApprovalByAuto     = "auto"
	ApprovalByOperator = "operator"
)

// adminSettings decodes the top-level `admin` mapping.
func adminSettings(a *Admin) decodeFunc {
	return func(d *decoder, n *yaml.Node, path string) bool {
		a.File, a.Line = d.file, n.Line
		return d.mapping(n, path, "a mapping with listen:, api_keys: and/or roles:", []field{
			{key: "listen", decode: str(&a.Listen)},
			{key: "api_keys", decode: listOf(&a.APIKeys, "a list of API keys (lines starting with `- name:`)", apiKey)},
			{key: "api_keys_file", decode: str(&a.APIKeysFile)},
			{key: "roles", decode: strList(&a.Roles)},
			{key: "allowed_origins", decode: strList(&a.AllowedOrigins)},
			{key: "webhook", decode: str(&a.Webhook)},
		})
	}
}

// admin checks the admin settings.
func (v *validator) admin(c *Config, w where) {
	a := &c.Admin
	if !a.Enabled() {
		for key, set := range map[string]bool{"api_keys": len(a.APIKeys) > 0, "api_keys_file": a.APIKeysFile != "", "roles": len(a.Roles) > 0, "webhook": a.Webhook != ""} {
			if set {
				v.check(w, "admin."+key, "has no effect without admin.listen: set the admin listener's address, like 127.0.0.1:8081")
			}
		}
		if c.Policy.Approval.By == ApprovalByOperator {
			v.check(w, "policy.approval.by", "operator needs the admin API, where operators decide: set admin.listen, like 127.0.0.1:8081")
		}
		return
	}
	if msg := checkListen(a.Listen); msg != "" {
		v.check(w, "admin.listen", msg)
	} else if a.Listen == c.Listen && !strings.HasSuffix(a.Listen, ":0") {
		v.check(w, "admin.listen", "is the MCP listener's address too: the admin API needs a port of its own, like 127.0.0.1:8081")
	}
	if len(a.APIKeys) == 0 && a.APIKeysFile == "" && len(a.Roles) == 0 {
		v.check(w, "admin", "admin.listen is set but nobody can sign in: add api_keys (made by `gateway apikey -name ops`) or roles (with auth.oidc)")
	}
	if len(a.Roles) > 0 && len(c.Auth.OIDC) == 0 {
		v.check(w, "admin.roles", "needs auth.oidc: the roles are read from tokens of its issuers")
	}
	v.apiKeys(w, "admin.api_keys", a.APIKeys, "the admin's name, which the audit trail shows")
	for i, o := range a.AllowedOrigins {
		v.check(w, fmt.Sprintf("admin.allowed_origins[%d]", i), checkOrigin(o))
	}
	if a.Webhook != "" {
		v.check(w, "admin.webhook", checkPublicURL(a.Webhook))
	}
}

// Pins configures the pinning of tool definitions (key `pins`), for the upstreams whose
// `pinning` is withhold or log.
type Pins struct {
	// Meta are keys of a tool's _meta that are pinned with the rest of its definition (key
	// `meta`), such as a UI a client renders from it: a change to one is withheld (or
	// logged) like a changed description. Other _meta keys may change freely. Empty: none.
	Meta []string
	// ForgetAfter is how long a pin is kept once its upstream lists its tools without it
	// (key `forget_after`); then it is removed, and the tool, if it comes back, is pinned
	// anew as at first sight. A tool that comes back sooner is checked against its pin. An
	// upstream that is down lists nothing and removes nothing. If zero, defaults to 720h
	// (30 days, DefaultPinsForgetAfter): see KeepMissing.
	ForgetAfter time.Duration
}

// DefaultPinsForgetAfter is how long the pin of a tool no longer listed is kept, unless
// pins.forget_after says otherwise.
const DefaultPinsForgetAfter = 30 * 24 * time.Hour

// KeepMissing returns how long the pin of a tool no longer listed is kept: ForgetAfter, or
// DefaultPinsForgetAfter when it is zero.
func (p *Pins) KeepMissing() time.Duration {
	if p.ForgetAfter <= 0 {
		return DefaultPinsForgetAfter
	}
	return p.ForgetAfter
}

// pinsSettings decodes the top-level `pins` mapping.
func pinsSettings(p *Pins) decodeFunc {
	return func(d *decoder, n *yaml.Node, path string) bool {
		return d.mapping(n, path, "a mapping with meta: and/or forget_after:", []field{
			{key: "meta", decode: strList(&p.Meta)},
			{key: "forget_after", decode: duration(&p.ForgetAfter)},
		})
	}
}

// pins checks the pin settings.
func (v *validator) pins(c *Config, w where) {
	p := &c.Pins
	if w.ix.present("pins.forget_after") && p.ForgetAfter <= 0 {
		v.check(w, "pins.forget_after", "must be greater than 0, like 720h: how long the pin of a tool its upstream no longer lists is kept")
	}
	for i, k := range p.Meta {
		if strings.TrimSpace(k) == "" {
			v.check(w, fmt.Sprintf("pins.meta[%d]", i), "is empty: name a key of the tools' _meta, like com.example/ui")
		}
	}
}
