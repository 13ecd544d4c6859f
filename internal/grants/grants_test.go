package grants

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestGrantAndTokenShowNoToken: a Grant or Token logged through slog (JSON and text
// handlers), printed with fmt, or encoded with encoding/json, alone or inside another value,
// shows what it is but never its access or refresh token; only the sealed form carries them.
func TestGrantAndTokenShowNoToken(t *testing.T) {
	const at, rt = "at-secret-0123456789", "rt-secret-9876543210"
	g := Grant{Principal: Principal{Issuer: "https://idp.example.com", Subject: "alice"}, Upstream: "github",
		Token:   Token{AccessToken: at, RefreshToken: rt, TokenType: "Bearer", Expiry: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Scopes: []string{"repo"}},
		Issuer:  "https://github.com/login/oauth",
		Granted: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	wrapped := struct {
		G  Grant
		PG *Grant
		T  Token
		GS []Grant
	}{g, &g, g.Token, []Grant{g}}

	shown := map[string]string{}
	for name, h := range map[string]func(*bytes.Buffer) slog.Handler{
		"slog JSON": func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
		"slog text": func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
	} {
		for what, v := range map[string]any{"grant": g, "*grant": &g, "token": g.Token, "wrapped": wrapped} {
			var b bytes.Buffer
			slog.New(h(&b)).Info("connected", "v", v)
			shown[name+" "+what] = b.String()
		}
	}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		for what, v := range map[string]any{"grant": g, "*grant": &g, "token": g.Token, "wrapped": wrapped} {
			shown[verb+" "+what] = fmt.Sprintf(verb, v)
		}
	}
	for what, v := range map[string]any{"grant": g, "*grant": &g, "token": g.Token, "*token": &g.Token, "wrapped": wrapped} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("json.Marshal(%s): %v", what, err)
		}
		shown["json "+what] = string(b)
	}
	for how, s := range shown {
		if strings.Contains(s, "secret") {
			t.Errorf("%s shows a token: %s", how, s)
		}
		// What it is still shows: a print that shows nothing would pass the check above.
		if want := "repo"; !strings.Contains(s, want) {
			t.Errorf("%s does not show the scope %q: %s", how, want, s)
		}
	}

	// The sealed form, and it alone, keeps the tokens.
	c := newCodec(testKeys(t))
	sealed, err := c.seal(g)
	if err != nil {
		t.Fatal(err)
	}
	opened, err := c.open(g.Principal, g.Upstream, sealed)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(g.Token, opened.Token); diff != "" {
		t.Errorf("the token through seal and open (-want +got):\n%s", diff)
	}
}
