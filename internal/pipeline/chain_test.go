package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestChainOrder: the before steps run in the chain's order and the first refusal stops the
// rest; the after steps run in reverse order, each on what the one after it returned, and an
// error withholds the result and stops the rest. Checks without an after step (today's
// Checks) take part in the before steps only.
func TestChainOrder(t *testing.T) {
	deny := &Refusal{Reason: ReasonDenied, Message: "no"}
	withhold := &Refusal{Reason: ReasonDenied, Message: "withheld"}
	// A step records its before step as name and its after step (when after is set) as
	// name', which appends name to the result's "seen"; before and afterError make them fail.
	type step struct {
		name       string
		before     error
		after      bool
		afterError error
	}
	tests := []struct {
		name  string
		steps []step
		// ran are the steps that ran, in order; result is what the chain passed on ("" when
		// it failed); err is the chain's error.
		ran    []string
		result string
		err    error
	}{
		{"empty", nil, nil, `{"seen":[]}`, nil},
		{"before in order, after in reverse",
			[]step{{name: "auth"}, {name: "policy", after: true}, {name: "plugins", after: true}, {name: "given"}, {name: "approval", after: true}},
			[]string{"auth", "policy", "plugins", "given", "approval", "approval'", "plugins'", "policy'"},
			`{"seen":["approval","plugins","policy"]}`, nil},
		{"a refusal stops the before steps, and no after step runs",
			[]step{{name: "auth", after: true}, {name: "policy", before: deny, after: true}, {name: "plugins", after: true}},
			[]string{"auth", "policy"}, "", deny},
		{"an after step's error withholds the result and stops the rest",
			[]step{{name: "policy", after: true}, {name: "plugins", after: true, afterError: withhold}, {name: "approval", after: true}},
			[]string{"policy", "plugins", "approval", "approval'", "plugins'"}, "", withhold},
		{"checks without an after step only decide",
			[]step{{name: "given"}, {name: "other"}},
			[]string{"given", "other"}, `{"seen":[]}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ran []string
			var chain Chain
			for _, s := range tt.steps {
				before := CheckFunc(func(context.Context, *Request, *Target) error { ran = append(ran, s.name); return s.before })
				if !s.after {
					chain = append(chain, before)
					continue
				}
				chain = append(chain, Link{Before: before, After: func(_ context.Context, _ *Request, _ *Target, result json.RawMessage) (json.RawMessage, error) {
					ran = append(ran, s.name+"'")
					if s.afterError != nil {
						return nil, s.afterError
					}
					var r struct{ Seen []string }
					if err := json.Unmarshal(result, &r); err != nil {
						return nil, err
					}
					return json.Marshal(map[string][]string{"seen": append(r.Seen, s.name)})
				}})
			}
			ctx, req, target := context.Background(), &Request{}, &Target{}
			err := chain.Check(ctx, req, target)
			var result json.RawMessage
			if err == nil {
				result, err = chain.Inspect(ctx, req, target, json.RawMessage(`{"seen":[]}`))
			}
			if !errors.Is(err, tt.err) {
				t.Errorf("error %v, want %v", err, tt.err)
			}
			if diff := cmp.Diff(tt.ran, ran); diff != "" {
				t.Errorf("steps that ran (-want +got):\n%s", diff)
			}
			if string(result) != tt.result {
				t.Errorf("result %s, want %s", result, tt.result)
			}
		})
	}
}

// TestChainsNest: a chain inside a chain takes part on both sides, and a Link with neither
// step allows and passes results on.
func TestChainsNest(t *testing.T) {
	var ran []string
	mark := func(name string) Link {
		return Link{
			Before: func(context.Context, *Request, *Target) error { ran = append(ran, name); return nil },
			After: func(_ context.Context, _ *Request, _ *Target, r json.RawMessage) (json.RawMessage, error) {
				ran = append(ran, name+"'")
				return r, nil
			},
		}
	}
	chain := Chain{mark("a"), Chain{mark("b"), Link{}, mark("c")}, mark("d")}
	if err := chain.Check(context.Background(), &Request{}, &Target{}); err != nil {
		t.Fatal(err)
	}
	if _, err := chain.Inspect(context.Background(), &Request{}, &Target{}, json.RawMessage(`{}`)); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ran, ","); got != "a,b,c,d,d',c',b',a'" {
		t.Errorf("nested chain ran %s", got)
	}
}
