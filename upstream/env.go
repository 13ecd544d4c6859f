package upstream

import (
	"slices"
	"strings"
)

// baseEnv are the variables of the gateway's environment that every stdio child inherits:
// what an ordinary program needs to find executables, its user and home, the locale, the
// time zone, a temporary directory and the proxy to reach the network through. Nothing here
// is meant to be a secret. A name ending in "*" matches every variable with that prefix.
var baseEnv = []string{
	"PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_*", "TZ", "TMPDIR",
	"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY",
	"http_proxy", "https_proxy", "no_proxy", "all_proxy",
}

// childEnv returns the environment of a stdio child as sorted NAME=value entries.
// parent is the gateway's environment (NAME=value entries, as from os.Environ; of a name
// given twice the last counts). The child gets the variables of parent that baseEnv or
// inherit match (a name, or a prefix followed by "*"), or all of them if inheritAll, and
// then own, which overrides inherited variables of the same name.
//
// A secret in the gateway's environment, such as a token used in another upstream's
// headers, therefore reaches a child only when its config asks for it. The result is never
// nil: for exec.Cmd a nil Env would mean the gateway's whole environment.
func childEnv(parent, inherit []string, inheritAll bool, own map[string]string) []string {
	vars := make(map[string]string, len(baseEnv)+len(inherit)+len(own))
	for _, kv := range parent {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			continue
		}
		if inheritAll || matchEnv(baseEnv, name) || matchEnv(inherit, name) {
			vars[name] = value
		}
	}
	for name, value := range own {
		vars[name] = value
	}
	env := make([]string, 0, len(vars))
	for name, value := range vars {
		env = append(env, name+"="+value)
	}
	slices.Sort(env) // a stable order, for logs and tests
	return env
}

// matchEnv reports whether one of patterns matches the variable name: a pattern is a name,
// compared exactly (case matters), or a prefix followed by "*".
func matchEnv(patterns []string, name string) bool {
	for _, p := range patterns {
		if prefix, ok := strings.CutSuffix(p, "*"); ok {
			if strings.HasPrefix(name, prefix) {
				return true
			}
		} else if p == name {
			return true
		}
	}
	return false
}
