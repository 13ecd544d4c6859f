package modern

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func capsOf(t *testing.T, raw string) ClientCapabilities {
	t.Helper()
	c, f := readCapabilities(json.RawMessage(raw))
	if f != nil {
		t.Fatalf("read capabilities %s: %v", raw, f)
	}
	return c
}

func TestRelayable(t *testing.T) {
	tests := []struct{ name, caps, want string }{
		{"nothing", `{}`, `{}`},
		{"experimental and extensions dropped", `{"experimental":{"x":{}},"extensions":{"io.example/e":{}}}`, `{}`},
		{"sub-keys kept, others dropped", `{"sampling":{"tools":{},"context":{},"x":1},"elicitation":{"form":{"applyDefaults":true},"url":{}},"roots":{"listChanged":true}}`,
			`{"elicitation":{"form":{"applyDefaults":true},"url":{}},"roots":{},"sampling":{"context":{},"tools":{}}}`},
		{"empty elicitation stays empty (form)", `{"elicitation":{}}`, `{"elicitation":{}}`},
		{"null members are not declared", `{"sampling":null,"roots":null}`, `{}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(capsOf(t, tt.caps).Relayable()); got != tt.want {
				t.Errorf("Relayable(%s) = %s, want %s", tt.caps, got, tt.want)
			}
		})
	}
}

func TestReadInputRequired(t *testing.T) {
	elicitForm := `{"method":"elicitation/create","params":{"message":"m","requestedSchema":{"type":"object"}}}`
	elicitURL := `{"method":"elicitation/create","params":{"mode":"url","message":"m","url":"https://x.example"}}`
	sampling := `{"method":"sampling/createMessage","params":{"messages":[],"maxTokens":1}}`
	samplingTools := `{"method":"sampling/createMessage","params":{"messages":[],"maxTokens":1,"tools":[]}}`
	samplingContext := `{"method":"sampling/createMessage","params":{"messages":[],"maxTokens":1,"includeContext":"thisServer"}}`
	roots := `{"method":"roots/list"}`
	tests := []struct {
		name, caps, result string
		want               *InputRequired
		missing            string // requiredCapabilities of an UndeclaredInputError
		malformed          bool
	}{
		{"form allowed", `{"elicitation":{}}`, `{"inputRequests":{"a":` + elicitForm + `},"requestState":"s"}`,
			&InputRequired{InputRequests: json.RawMessage(`{"a":` + elicitForm + `}`), RequestState: "s", HasState: true}, "", false},
		{"state only", `{}`, `{"requestState":""}`, &InputRequired{HasState: true}, "", false},
		{"no state", `{"roots":{}}`, `{"inputRequests":{"r":` + roots + `}}`, &InputRequired{InputRequests: json.RawMessage(`{"r":` + roots + `}`)}, "", false},
		{"all declared", `{"elicitation":{"form":{},"url":{}},"sampling":{"tools":{},"context":{}},"roots":{}}`,
			`{"inputRequests":{"a":` + elicitForm + `,"b":` + elicitURL + `,"c":` + samplingTools + `,"d":` + samplingContext + `,"e":` + roots + `}}`,
			&InputRequired{InputRequests: json.RawMessage(`{"a":` + elicitForm + `,"b":` + elicitURL + `,"c":` + samplingTools + `,"d":` + samplingContext + `,"e":` + roots + `}`)}, "", false},
		{"url not declared", `{"elicitation":{"form":{}}}`, `{"inputRequests":{"a":` + elicitForm + `,"b":` + elicitURL + `}}`, nil, `{"elicitation":{"url":{}}}`, false},
		{"form not declared", `{"elicitation":{"url":{}}}`, `{"inputRequests":{"a":` + elicitForm + `}}`, nil, `{"elicitation":{"form":{}}}`, false},
		{"sampling not declared", `{}`, `{"inputRequests":{"a":` + sampling + `}}`, nil, `{"sampling":{}}`, false},
		{"sampling tools not declared", `{"sampling":{}}`, `{"inputRequests":{"a":` + samplingTools + `}}`, nil, `{"sampling":{"tools":{}}}`, false},
		{"sampling context not declared", `{"sampling":{}}`, `{"inputRequests":{"a":` + samplingContext + `}}`, nil, `{"sampling":{"context":{}}}`, false},
		{"roots not declared", `{"sampling":{}}`, `{"inputRequests":{"a":` + roots + `}}`, nil, `{"roots":{}}`, false},
		{"unknown method", `{"roots":{}}`, `{"inputRequests":{"a":{"method":"ping"}}}`, nil, `{}`, false},
		{"neither member", `{}`, `{"resultType":"input_required"}`, nil, "", true},
		{"state not a string", `{}`, `{"requestState":7}`, nil, "", true},
		{"requests not an object", `{}`, `{"inputRequests":[]}`, nil, "", true},
		{"request without method", `{}`, `{"inputRequests":{"a":{"params":{}}}}`, nil, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadInputRequired(json.RawMessage(tt.result), capsOf(t, tt.caps))
			var undeclared *UndeclaredInputError
			switch {
			case tt.malformed:
				if !errors.Is(err, ErrMalformedInputRequired) {
					t.Errorf("err = %v, want ErrMalformedInputRequired", err)
				}
			case tt.missing != "":
				if !errors.As(err, &undeclared) {
					t.Fatalf("err = %v, want an UndeclaredInputError", err)
				}
				if got := string(undeclared.Required.Object()); got != tt.missing {
					t.Errorf("required %s, want %s", got, tt.missing)
				}
			default:
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
			}
		})
	}
}
