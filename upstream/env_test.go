package upstream

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestChildEnv(t *testing.T) {
	// gateway is the environment of a gateway process with a secret meant for an HTTP
	// upstream's headers beside the variables of the base set.
	gateway := []string{
		"PATH=/usr/bin:/bin",
		"HOME=/home/gw",
		"USER=gw",
		"LOGNAME=gw",
		"LANG=en_GB.UTF-8",
		"LC_ALL=C",
		"LC_TIME=de_DE.UTF-8",
		"TZ=Europe/Berlin",
		"TMPDIR=/var/tmp",
		"HTTP_PROXY=http://proxy:3128",
		"https_proxy=http://proxy:3128",
		"NO_PROXY=localhost",
		"all_proxy=socks5://proxy:1080",
		"SEARCH_TOKEN=s3cret",
		"AWS_PROFILE=dev",
		"AWS_REGION=eu-west-1",
		"AWSX=not-a-prefix-match",
		"path=lower-case-is-another-variable",
		"LCX=not-in-the-base-set",
		"SHELL=/bin/zsh",
	}
	baseOut := []string{
		"HOME=/home/gw",
		"HTTP_PROXY=http://proxy:3128",
		"LANG=en_GB.UTF-8",
		"LC_ALL=C",
		"LC_TIME=de_DE.UTF-8",
		"LOGNAME=gw",
		"NO_PROXY=localhost",
		"PATH=/usr/bin:/bin",
		"TMPDIR=/var/tmp",
		"TZ=Europe/Berlin",
		"USER=gw",
		"all_proxy=socks5://proxy:1080",
		"https_proxy=http://proxy:3128",
	}
	tests := []struct {
		name       string
		parent     []string
		inherit    []string
		inheritAll bool
		own        map[string]string
		want       []string
	}{
		{
			name:   "base set only",
			parent: gateway,
			want:   baseOut,
		},
		{
			name:   "own variables are added",
			parent: gateway,
			own:    map[string]string{"GITHUB_TOKEN": "ghp", "EMPTY": ""},
			want:   sortedEnv(append([]string{"EMPTY=", "GITHUB_TOKEN=ghp"}, baseOut...)),
		},
		{
			name:    "inherit by name and by prefix",
			parent:  gateway,
			inherit: []string{"SHELL", "AWS_*", "NOT_SET"},
			want:    sortedEnv(append([]string{"AWS_PROFILE=dev", "AWS_REGION=eu-west-1", "SHELL=/bin/zsh"}, baseOut...)),
		},
		{
			name:    "names are case-sensitive",
			parent:  gateway,
			inherit: []string{"shell", "aws_*"},
			want:    baseOut,
		},
		{
			name:    "own wins over inherited and base variables",
			parent:  gateway,
			inherit: []string{"AWS_PROFILE"},
			own:     map[string]string{"AWS_PROFILE": "prod", "HOME": "/srv/child", "LC_ALL": "C.UTF-8"},
			want: []string{
				"AWS_PROFILE=prod",
				"HOME=/srv/child",
				"HTTP_PROXY=http://proxy:3128",
				"LANG=en_GB.UTF-8",
				"LC_ALL=C.UTF-8",
				"LC_TIME=de_DE.UTF-8",
				"LOGNAME=gw",
				"NO_PROXY=localhost",
				"PATH=/usr/bin:/bin",
				"TMPDIR=/var/tmp",
				"TZ=Europe/Berlin",
				"USER=gw",
				"all_proxy=socks5://proxy:1080",
				"https_proxy=http://proxy:3128",
			},
		},
		{
			name:       "inherit all",
			parent:     gateway,
			inheritAll: true,
			own:        map[string]string{"SEARCH_TOKEN": "overridden"},
			want: sortedEnv(append([]string{
				"SEARCH_TOKEN=overridden", "AWS_PROFILE=dev", "AWS_REGION=eu-west-1", "AWSX=not-a-prefix-match",
				"path=lower-case-is-another-variable", "LCX=not-in-the-base-set", "SHELL=/bin/zsh",
			}, baseOut...)),
		},
		{
			name:    "the last of a name given twice counts; entries without = are skipped",
			parent:  []string{"PATH=/first", "junk", "=hidden", "PATH=/second", "VALUE_WITH_EQUALS=a=b"},
			inherit: []string{"VALUE_WITH_EQUALS"},
			want:    []string{"PATH=/second", "VALUE_WITH_EQUALS=a=b"},
		},
		{
			name: "empty environment",
			want: []string{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := childEnv(tt.parent, tt.inherit, tt.inheritAll, tt.own)
			if got == nil {
				t.Fatal("childEnv returned nil, which exec.Cmd takes as the whole environment")
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("childEnv mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// sortedEnv returns env sorted, as childEnv returns it.
func sortedEnv(env []string) []string {
	return slices.Sorted(slices.Values(env))
}
