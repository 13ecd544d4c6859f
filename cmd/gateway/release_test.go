package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestReleaseScriptBuildsStampedArchives runs scripts/release for the native target and one
// foreign target (cross-compiling all four would take minutes here; the script builds each
// the same way) and checks what it promises: one archive per target named
// manifold_VERSION_OS_ARCH.tar.gz holding the gateway and README.md, a SHA256SUMS file that
// matches them, and binaries built static, trimmed and with CGO off, for their target (their
// build information, as `go version -m` reads it), stamped with the version: the native one is
// run (`gateway version`), the foreign one is searched for it.
func TestReleaseScriptBuildsStampedArchives(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-compiles the gateway")
	}
	native := runtime.GOOS + "/" + runtime.GOARCH
	foreign := "linux/arm64"
	if native == foreign {
		foreign = "linux/amd64"
	}
	const version = "v9.8.7-rc.1"
	out := t.TempDir()
	cmd := exec.Command("bash", filepath.Join("..", "..", "scripts", "release"), version, out)
	cmd.Env = append(os.Environ(), "MANIFOLD_RELEASE_TARGETS="+native+" "+foreign)
	if text, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/release: %v\n%s", err, text)
	}

	archive := func(target string) string {
		return "manifold_9.8.7-rc.1_" + strings.ReplaceAll(target, "/", "_") + ".tar.gz"
	}
	entries, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	want := []string{archive(native), archive(foreign), "SHA256SUMS"}
	slices.Sort(want)
	if diff := cmp.Diff(want, names); diff != "" {
		t.Fatalf("files in the output directory (-want +got):\n%s", diff)
	}

	sums, err := os.ReadFile(filepath.Join(out, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	var wantSums strings.Builder
	for _, name := range []string{archive(native), archive(foreign)} {
		data, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		fmt.Fprintf(&wantSums, "%s  %s\n", hex.EncodeToString(sum[:]), name)
	}
	if diff := cmp.Diff(wantSums.String(), string(sums)); diff != "" {
		t.Errorf("SHA256SUMS (-want +got):\n%s", diff)
	}

	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{native, foreign} {
		t.Run(strings.ReplaceAll(target, "/", "_"), func(t *testing.T) {
			files := untar(t, filepath.Join(out, archive(target)))
			var got []string
			for name := range files {
				got = append(got, name)
			}
			slices.Sort(got)
			wantFiles := []string{"README.md", "gateway"}
			if _, err := os.Stat(filepath.Join("..", "..", "LICENSE")); err == nil {
				wantFiles = []string{"LICENSE", "README.md", "gateway"}
			}
			if diff := cmp.Diff(wantFiles, got); diff != "" {
				t.Fatalf("files in %s (-want +got):\n%s", archive(target), diff)
			}
			if !bytes.Equal(files["README.md"].data, readme) {
				t.Error("the archive's README.md is not the repository's")
			}
			bin := files["gateway"]
			if bin.mode&0o111 == 0 {
				t.Errorf("gateway has mode %v in the archive: not executable", bin.mode)
			}
			exe := filepath.Join(t.TempDir(), "gateway")
			if err := os.WriteFile(exe, bin.data, 0o755); err != nil {
				t.Fatal(err)
			}

			info, err := buildinfo.ReadFile(exe)
			if err != nil {
				t.Fatalf("reading the build information of %s's gateway: %v", target, err)
			}
			settings := map[string]string{}
			for _, s := range info.Settings {
				settings[s.Key] = s.Value
			}
			goos, goarch, _ := strings.Cut(target, "/")
			for key, want := range map[string]string{"GOOS": goos, "GOARCH": goarch, "CGO_ENABLED": "0", "-trimpath": "true"} {
				if settings[key] != want {
					t.Errorf("build setting %s = %q, want %q", key, settings[key], want)
				}
			}
			// -trimpath keeps -ldflags out of the build information, and -s strips the
			// symbols: the stamp is the version's text in the binary (only -X puts it there).
			if !bytes.Contains(bin.data, []byte(version)) {
				t.Errorf("%s's gateway does not hold the version %s: it is not stamped", target, version)
			}
			if goos == "linux" {
				f, err := elf.Open(exe)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				for _, p := range f.Progs {
					if p.Type == elf.PT_INTERP {
						t.Error("the linux binary asks for a dynamic loader: it is not static")
					}
				}
			}
			if target == native {
				got, err := exec.Command(exe, "version").Output()
				if err != nil {
					t.Fatalf("gateway version: %v", err)
				}
				if want := "manifold " + version + "\n"; string(got) != want {
					t.Errorf("gateway version printed %q, want %q", got, want)
				}
			}
		})
	}
}

// TestReleaseScriptRefusesABadVersion: a version that would not survive the -ldflags line
// (a space) is refused before anything is built.
func TestReleaseScriptRefusesABadVersion(t *testing.T) {
	out := filepath.Join(t.TempDir(), "dist")
	cmd := exec.Command("bash", filepath.Join("..", "..", "scripts", "release"), "1.0 -X main.x=y", out)
	text, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("scripts/release accepted a version with spaces:\n%s", text)
	}
	if !strings.Contains(string(text), "VERSION must be") {
		t.Errorf("the refusal does not say what a version may be:\n%s", text)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("the refused run made %s (stat: %v)", out, err)
	}
}

type tarFile struct {
	mode os.FileMode
	data []byte
}

// untar reads a .tar.gz whole; it fails the test on a directory or a name with a path in it,
// which a release archive does not hold.
func untar(t *testing.T, path string) map[string]tarFile {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	tr := tar.NewReader(zr)
	files := map[string]tarFile{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if h.Typeflag != tar.TypeReg || strings.Contains(h.Name, "/") {
			t.Fatalf("%s holds %q (type %c): want regular files at its top only", path, h.Name, h.Typeflag)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = tarFile{mode: h.FileInfo().Mode(), data: data}
	}
}
