package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestHTTPToolsList(t *testing.T) {
	const workers, calls = 3, 20 // 60 calls in all
	for _, tc := range []struct {
		name     string
		sse      bool
		tools    int
		minTools int
		fault    func(int64) string
		ok       int64
		errs     map[string]int64
	}{
		{"json", false, 5, 5, nil, 60, map[string]int64{}},
		{"sse", true, 5, 5, nil, 60, map[string]int64{}},
		{"default minimum", false, 1, 0, nil, 60, map[string]int64{}},
		{"short", false, 5, 6, nil, 0, map[string]int64{"short-list": 60}},
		{"short sse", true, 5, 6, nil, 0, map[string]int64{"short-list": 60}},
		{"empty", true, 0, 0, nil, 0, map[string]int64{"short-list": 60}},
		{"empty allowed", false, 0, -1, nil, 60, map[string]int64{}},
		{"no tools array", true, 3, 1, every(10, "wrong"), 54, map[string]int64{"wrong-echo": 6}},
		{"rpc error", false, 3, 1, every(20, "rpc"), 57, map[string]int64{"rpc-32603": 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeServer{sse: tc.sse, fault: tc.fault, tools: tc.tools}
			url := startFake(t, f)
			// -tool and -text are ignored.
			r := run1(t, Config{URL: url, Method: MethodList, MinTools: tc.minTools, Tool: "nope", Text: "x",
				Workers: workers, Calls: calls, Delete: true})
			checkCounts(t, r, tc.ok, workers, tc.errs)
			if f.calls.Load() != workers*calls {
				t.Errorf("server saw %d calls, want %d", f.calls.Load(), workers*calls)
			}
			if r.Method != MethodList {
				t.Errorf("method %q", r.Method)
			}
		})
	}
}

func TestStdioToolsList(t *testing.T) {
	needEchoServer(t)
	cmd := []string{echoServer, "-tools", "99"} // the echo tool and 99 fillers
	r := run1(t, Config{Command: cmd, Method: MethodList, MinTools: 100, Workers: 4, Calls: 50})
	checkCounts(t, r, 200, 1, map[string]int64{})

	r = run1(t, Config{Command: cmd, Method: MethodList, MinTools: 101, Workers: 2, Calls: 10})
	checkCounts(t, r, 0, 1, map[string]int64{"short-list": 20})
	if got, want := r.Samples["short-list"], "listed 100 tools, want at least 101"; got != want {
		t.Errorf("sample %q, want %q", got, want)
	}
}

func TestCLIToolsList(t *testing.T) {
	url := startFake(t, &fakeServer{tools: 4})
	var stdout, stderr bytes.Buffer
	args := []string{"-url", url, "-method", "tools/list", "-min-tools", "4", "-tool", "", "-n", "2", "-calls", "5", "-json"}
	if code := run(context.Background(), args, &stdout, &stderr); code != 0 {
		t.Fatalf("run %v: exit %d, stderr %s", args, code, stderr.String())
	}
	var got map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		t.Fatalf("output %q: %v", stdout.String(), err)
	}
	keys := slices.Sorted(maps.Keys(got))
	want := []string{"calls", "calls_per_s", "duration_s", "errors", "init_us", "latency_us", "n"}
	if !slices.Equal(keys, want) || got["calls"] != 10.0 {
		t.Errorf("output %s", stdout.String())
	}

	stdout.Reset()
	args = []string{"-url", url, "-method", "tools/list", "-min-tools", "5", "-calls", "3"}
	if code := run(context.Background(), args, &stdout, &stderr); code != 1 {
		t.Errorf("run %v: exit %d, want 1", args, code)
	}
	for _, s := range []string{"method      tools/list", "calls       0 ok, 3 errors", "short-list 3  (first: listed 4 tools, want at least 5)"} {
		if !strings.Contains(stdout.String(), s) {
			t.Errorf("summary lacks %q:\n%s", s, stdout.String())
		}
	}

	// -min-tools 0 accepts an empty list.
	url = startFake(t, &fakeServer{})
	args = []string{"-url", url, "-method", "tools/list", "-min-tools", "0", "-calls", "3"}
	if code := run(context.Background(), args, io.Discard, &stderr); code != 0 {
		t.Errorf("run %v: exit %d, stderr %s", args, code, stderr.String())
	}

	if echoServer != "" {
		stdout.Reset()
		args := []string{"-stdio", echoServer + " -tools 99", "-method", "tools/list", "-min-tools", "100", "-n", "2", "-calls", "10", "-json"}
		if code := run(context.Background(), args, &stdout, &stderr); code != 0 {
			t.Errorf("run %v: exit %d, stderr %s", args, code, stderr.String())
		}
		if !strings.HasPrefix(stdout.String(), `{"n":2,"calls":20,"errors":{},`) {
			t.Errorf("run %v: output %s", args, stdout.String())
		}
	}

	for _, args := range [][]string{
		{"-url", url, "-calls", "1", "-method", "tools/lists"},
		{"-url", url, "-calls", "1", "-method", ""},
		{"-url", url, "-calls", "1", "-method", "tools/list", "-min-tools", "-1"},
		{"-url", url, "-calls", "1", "-tool", ""},
	} {
		if code := run(context.Background(), args, io.Discard, io.Discard); code != 2 {
			t.Errorf("run %v: exit %d, want 2", args, code)
		}
	}
	if _, err := Run(context.Background(), Config{URL: url, Calls: 1, Method: "ping"}); err == nil {
		t.Error("Run with method ping succeeded")
	}
}

func TestCheckList(t *testing.T) {
	for _, tc := range []struct {
		name, msg string
		min       int
		kind      string
	}{
		{"ok", `{"jsonrpc":"2.0","id":7,"result":{"tools":[{"name":"a"},{"name":"b"}]}}`, 2, ""},
		{"more", `{"jsonrpc":"2.0","id":7,"result":{"tools":[{"name":"a"},{"name":"b"}]}}`, 1, ""},
		{"short", `{"jsonrpc":"2.0","id":7,"result":{"tools":[{"name":"a"},{"name":"b"}]}}`, 3, kindShortList},
		{"tricky strings", `{"id":7,"result":{"nextCursor":"x","tools":[{"name":"a]","d":"[,{\"]"},{"s":{"r":["x","y"]}},"z"]}}`, 3, ""},
		{"tricky strings short", `{"id":7,"result":{"tools":[{"name":"a]","d":"[,{\"]"},{"s":{"r":["x","y"]}},"z"]}}`, 4, kindShortList},
		{"spaces", ` { "id" : 7 , "result" : { "tools" : [ 1 , 2 ] } } `, 2, ""},
		{"escaped key", `{"id":7,"result":{"t\u006fols":[1]}}`, 1, ""},
		{"empty", `{"jsonrpc":"2.0","id":7,"result":{"tools":[]}}`, 1, kindShortList},
		{"empty allowed", `{"jsonrpc":"2.0","id":7,"result":{"tools":[ ]}}`, 0, ""},
		{"no tools", `{"jsonrpc":"2.0","id":7,"result":{}}`, 0, kindWrongEcho},
		{"tools null", `{"jsonrpc":"2.0","id":7,"result":{"tools":null}}`, 0, kindWrongEcho},
		{"tools object", `{"jsonrpc":"2.0","id":7,"result":{"tools":{"a":[1]}}}`, 0, kindWrongEcho},
		{"result array", `{"jsonrpc":"2.0","id":7,"result":[{"tools":[1]}]}`, 0, kindWrongEcho},
		{"wrong id", `{"jsonrpc":"2.0","id":8,"result":{"tools":[1]}}`, 1, kindWrongEcho},
		{"no result", `{"jsonrpc":"2.0","id":7}`, 1, kindWrongEcho},
		{"rpc error", `{"jsonrpc":"2.0","id":7,"error":{"code":-32601,"message":"no"}}`, 1, "rpc-32601"},
		{"malformed", `{"jsonrpc":"2.0","id":7,"result":{"tools":[1,]}}`, 1, kindDecode},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kind, err := checkList([]byte(tc.msg), 7, tc.min)
			if kind != tc.kind || (kind == "") != (err == nil) {
				t.Errorf("kind %q (%v), want %q", kind, err, tc.kind)
			}
		})
	}
}

func TestCountElements(t *testing.T) {
	for arr, want := range map[string]int{
		`[]`: 0, ` [ ] `: 0, `[1]`: 1, `[1,"a,b",[2,3],{"x":[]}]`: 4, `["]",  "\\" , "\"]"]`: 3, `[[[]]]`: 1,
	} {
		if n, ok := countElements([]byte(arr)); n != want || !ok {
			t.Errorf("countElements(%s) = %d, %v; want %d, true", arr, n, ok, want)
		}
	}
	for _, arr := range []string{``, `{}`, `null`, `"[]"`, `[1,2`, `["]`} {
		if _, ok := countElements([]byte(arr)); ok {
			t.Errorf("countElements(%s) reports an array", arr)
		}
	}
}

// toolsListAnswer returns a tools/list answer with id and n tools, like echo-server's.
func toolsListAnswer(id int64, n int) []byte {
	b := []byte(`{"jsonrpc":"2.0","id":` + strconv.FormatInt(id, 10) + `,"result":{"tools":[`)
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":"tool_`+strconv.Itoa(i)+`","description":"A catalog filler tool; calling it fails.","inputSchema":{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}}`...)
	}
	return append(b, `]}}`...)
}

// BenchmarkCheckList is the per-answer cost of checking echo-server's tools/list answer
// with 100 tools (about 18 KB).
func BenchmarkCheckList(b *testing.B) {
	msg := toolsListAnswer(123456, 100)
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		if kind, err := checkList(msg, 123456, 100); kind != "" {
			b.Fatal(err)
		}
	}
}
