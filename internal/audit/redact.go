package audit

import (
	"encoding/json"
	"strings"
)

// Redacted replaces a redacted value in an audit record.
const Redacted = "[redacted]"

// Redaction says which argument members are redacted: the config's `audit.redact` (Names)
// and `audit.redact_defaults` (SkipDefaults is its false). The zero Redaction redacts the
// secret names only.
type Redaction struct {
	// Names are members redacted in addition to the secret names, compared
	// case-insensitively.
	Names []string
	// SkipDefaults leaves the secret names (SecretName) out: only Names are redacted.
	SkipDefaults bool
}

// RedactArguments returns args (a JSON value, typically a tools/call's arguments) as the audit
// trail keeps them under r: with the value of every object member, at any depth, whose name
// is a secret's (SecretName, unless r.SkipDefaults) or one of r.Names (compared
// case-insensitively), replaced by Redacted. The gateway redacts so what it writes to records
// and sends out of its own accord: the audit trail and the approval webhook's payload, with
//
//	audit.Redaction{Names: cfg.Audit.Redact, SkipDefaults: cfg.Audit.SkipRedactDefaults}
//
// It does not redact what the people who decide on a call are shown: the admin API and page
// show a held call's arguments whole to the operator, and a client's user asked to approve
// a call sees that call's own arguments.
//
// Arguments that are not valid JSON are replaced whole: a record must never carry what could
// not be inspected. No arguments give nil. args is not modified. Safe for concurrent use.
func RedactArguments(args json.RawMessage, r Redaction) json.RawMessage {
	return redact(args, r.Names, !r.SkipDefaults)
}

func redact(args json.RawMessage, names []string, defaults bool) json.RawMessage {
	if len(args) == 0 {
		return nil
	}
	var v any
	dec := json.NewDecoder(strings.NewReader(string(args)))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil || dec.More() {
		out, _ := json.Marshal(Redacted)
		return out
	}
	if len(names) == 0 && !defaults {
		return args
	}
	set := make(map[string]bool, len(names))
	for _, n := range names {
		set[strings.ToLower(n)] = true
	}
	secret := func(name string) bool { return set[strings.ToLower(name)] || defaults && SecretName(name) }
	out, err := json.Marshal(redactValue(v, secret))
	if err != nil {
		out, _ = json.Marshal(Redacted)
	}
	return out
}

func redactValue(v any, secret func(string) bool) any {
	switch v := v.(type) {
	case map[string]any:
		for k, member := range v {
			if secret(k) {
				v[k] = Redacted
			} else {
				v[k] = redactValue(member, secret)
			}
		}
	case []any:
		for i, e := range v {
			v[i] = redactValue(e, secret)
		}
	}
	return v
}

// The words that make a member name a secret's (SecretName), in the form names are compared
// in: lower case, without separators.
var (
	// secretWords anywhere in a name: client_secret, passwordConfirm, X-API-Key, Set-Cookie.
	secretWords = []string{"password", "passwd", "passphrase", "secret", "apikey", "privatekey",
		"accesskey", "credential", "authorization", "cookie"}
	// secretEnds at the end of a name only: access_token, idToken, basic_auth; but not
	// max_tokens or author.
	secretEnds = []string{"token", "auth", "bearer"}
)

// SecretName reports whether an argument member's name is one of the common names of secrets
// that RedactArguments redacts by default. Names are compared in lower case with the
// separators `_`, `-`, `.` and spaces left out, so that apiKey, api_key and API-KEY are one
// name: a name is a secret's when it contains password, passwd, passphrase, secret, apikey,
// privatekey, accesskey, credential (credentials too), authorization or cookie, or ends in
// token, auth or bearer.
func SecretName(name string) bool {
	var buf [64]byte
	n := buf[:0]
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '_' || c == '-' || c == '.' || c == ' ':
			continue
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		n = append(n, c)
	}
	s := string(n)
	for _, w := range secretWords {
		if strings.Contains(s, w) {
			return true
		}
	}
	for _, w := range secretEnds {
		if strings.HasSuffix(s, w) {
			return true
		}
	}
	return false
}
