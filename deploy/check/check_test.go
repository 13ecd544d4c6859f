package check

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// gatewayBin is the gateway built from the repository by TestMain, for `gateway validate`.
var gatewayBin string

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "manifold-deploy-check")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	gatewayBin = filepath.Join(dir, "gateway")
	build := exec.Command("go", "build", "-o", gatewayBin, "./cmd/gateway")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the gateway for `gateway validate`: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

const chartDir = "../helm/manifold"

// objects is what one rendering or one directory of manifests holds, each decoded strictly
// into its Kubernetes type.
type objects struct {
	deployments []*appsv1.Deployment
	services    []*corev1.Service
	configMaps  []*corev1.ConfigMap
	pdbs        []*policyv1.PodDisruptionBudget
}

// want says what a set of objects must show beyond the common checks.
type want struct {
	replicas     int32
	redis        bool // sessions in Redis (required when replicas > 1 in any case)
	adminExposed bool // the admin port is in the Service
}

func TestChartDefaultValues(t *testing.T) {
	objs := decodeAll(t, renderChart(t, nil))
	checkObjects(t, objs, want{replicas: 1})
}

func TestChartReplicatedValues(t *testing.T) {
	objs := decodeAll(t, renderChart(t, readValues(t, filepath.Join(chartDir, "values-replicated.yaml"))))
	checkObjects(t, objs, want{replicas: 3, redis: true})
}

func TestChartAdminExposed(t *testing.T) {
	vals := map[string]any{"admin": map[string]any{"enabled": true, "expose": true, "apiKeysSecret": "manifold-admin-keys"}}
	objs := decodeAll(t, renderChart(t, vals))
	checkObjects(t, objs, want{replicas: 1, adminExposed: true})
}

// TestChartRefusesWhatLosesSessions: several replicas without Redis would each keep their
// own sessions, and Redis without keys does not start; the chart says so at install.
func TestChartRefusesWhatLosesSessions(t *testing.T) {
	for _, tc := range []struct {
		name string
		vals map[string]any
		want string
	}{
		{"replicas without redis", map[string]any{"replicaCount": 3}, "needs redis.url"},
		{"redis without keys", map[string]any{"redis": map[string]any{"url": "redis://redis:6379/0"}}, "need keys.secretName and keys.ids"},
		{"admin exposed but not enabled", map[string]any{"admin": map[string]any{"expose": true}}, "admin.expose needs admin.enabled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render(t, tc.vals)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("rendering gave %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

func TestPlainManifests(t *testing.T) {
	files, err := filepath.Glob("../kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in deploy/kubernetes (%v)", err)
	}
	docs := map[string]string{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs[f] = string(data)
	}
	checkObjects(t, decodeAll(t, docs), want{replicas: 3, redis: true})
}

func readValues(t *testing.T, file string) map[string]any {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	vals, err := loader.LoadValues(f)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return vals
}

// render renders the chart as `helm install mcp` would with these values over values.yaml.
func render(t *testing.T, vals map[string]any) (map[string]string, error) {
	t.Helper()
	ch, err := loader.LoadDir(chartDir)
	if err != nil {
		t.Fatalf("loading the chart: %v", err)
	}
	if err := ch.Validate(); err != nil {
		t.Fatalf("Chart.yaml: %v", err)
	}
	top, err := util.ToRenderValues(ch, vals, common.ReleaseOptions{Name: "mcp", Namespace: "default", IsInstall: true}, nil)
	if err != nil {
		return nil, err
	}
	return engine.Render(ch, top)
}

func renderChart(t *testing.T, vals map[string]any) map[string]string {
	t.Helper()
	out, err := render(t, vals)
	if err != nil {
		t.Fatalf("rendering the chart: %v", err)
	}
	return out
}

// decodeAll splits each file into its YAML documents and decodes each strictly (an unknown or
// duplicated field fails) into the type its apiVersion and kind name. NOTES.txt and partials
// are not objects.
func decodeAll(t *testing.T, files map[string]string) objects {
	t.Helper()
	var objs objects
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if strings.HasSuffix(name, "NOTES.txt") || strings.HasPrefix(path.Base(name), "_") {
			continue
		}
		r := k8syaml.NewYAMLReader(bufio.NewReader(strings.NewReader(files[name])))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			var meta struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
			}
			if err := yaml.Unmarshal(doc, &meta); err != nil {
				t.Fatalf("%s: %v\n%s", name, err, doc)
			}
			if meta.Kind == "" && len(bytes.TrimSpace(stripComments(doc))) == 0 {
				continue // an empty document: a template whose condition was false
			}
			var obj any
			switch meta.APIVersion + " " + meta.Kind {
			case "apps/v1 Deployment":
				o := &appsv1.Deployment{}
				objs.deployments, obj = append(objs.deployments, o), o
			case "v1 Service":
				o := &corev1.Service{}
				objs.services, obj = append(objs.services, o), o
			case "v1 ConfigMap":
				o := &corev1.ConfigMap{}
				objs.configMaps, obj = append(objs.configMaps, o), o
			case "policy/v1 PodDisruptionBudget":
				o := &policyv1.PodDisruptionBudget{}
				objs.pdbs, obj = append(objs.pdbs, o), o
			default:
				t.Fatalf("%s: an object of apiVersion %q kind %q, which this check does not know: add its type", name, meta.APIVersion, meta.Kind)
			}
			if err := yaml.UnmarshalStrict(doc, obj); err != nil {
				t.Errorf("%s: %s %s does not decode strictly: %v", name, meta.APIVersion, meta.Kind, err)
			}
		}
	}
	return objs
}

func stripComments(doc []byte) []byte {
	var out []byte
	for line := range bytes.Lines(doc) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			out = append(out, line...)
		}
	}
	return out
}

// gatewayConfig is what the checks read of the gateway's config; `gateway validate` reads
// the rest.
type gatewayConfig struct {
	Listen       string `json:"listen"`
	DrainTimeout string `json:"drain_timeout"`
	SessionStore struct {
		Type string `json:"type"`
	} `json:"session_store"`
	Keys []map[string]any `json:"keys"`
	Auth struct {
		OIDC                 []any  `json:"oidc"`
		APIKeys              []any  `json:"api_keys"`
		APIKeysFile          string `json:"api_keys_file"`
		AllowUnauthenticated bool   `json:"allow_unauthenticated"`
	} `json:"auth"`
	Admin struct {
		Listen      string `json:"listen"`
		APIKeysFile string `json:"api_keys_file"`
	} `json:"admin"`
}

func checkObjects(t *testing.T, objs objects, w want) {
	t.Helper()
	if len(objs.deployments) != 1 || len(objs.services) != 1 || len(objs.configMaps) != 1 || len(objs.pdbs) != 1 {
		t.Fatalf("got %d Deployments, %d Services, %d ConfigMaps, %d PodDisruptionBudgets; want one of each",
			len(objs.deployments), len(objs.services), len(objs.configMaps), len(objs.pdbs))
	}
	dep, svc, cm, pdb := objs.deployments[0], objs.services[0], objs.configMaps[0], objs.pdbs[0]
	pod := dep.Spec.Template

	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != w.replicas {
		t.Errorf("Deployment replicas = %v, want %d", dep.Spec.Replicas, w.replicas)
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("the pod has %d containers, want the gateway alone", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]

	// The config: mounted where -config names it, from this ConfigMap.
	configPath := flagValue(c.Args, "-config")
	if configPath == "" {
		t.Fatalf("the container's args %q name no -config", c.Args)
	}
	text, ok := cm.Data[path.Base(configPath)]
	if !ok {
		t.Fatalf("ConfigMap %s has no %s, the file -config names", cm.Name, path.Base(configPath))
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		if m.MountPath != path.Dir(configPath) {
			continue
		}
		for _, v := range pod.Spec.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil && v.ConfigMap.Name == cm.Name {
				mounted = true
			}
		}
	}
	if !mounted {
		t.Errorf("ConfigMap %s is not mounted at %s, where -config %s reads it", cm.Name, path.Dir(configPath), configPath)
	}
	var cfg gatewayConfig
	if err := yaml.Unmarshal([]byte(text), &cfg); err != nil {
		t.Fatalf("the ConfigMap's config: %v", err)
	}

	// Listen on all interfaces: the probes and the Service reach the pod's address.
	host, port := splitHostPort(t, "listen", cfg.Listen)
	if host != "0.0.0.0" && host != "" && host != "::" {
		t.Errorf("listen %s: a gateway in a pod must listen on all interfaces (0.0.0.0), not %q", cfg.Listen, host)
	}
	for _, probe := range []struct {
		name, path string
		p          *corev1.Probe
	}{{"readinessProbe", "/readyz", c.ReadinessProbe}, {"livenessProbe", "/healthz", c.LivenessProbe}} {
		if probe.p == nil || probe.p.HTTPGet == nil {
			t.Errorf("%s: want an httpGet of %s", probe.name, probe.path)
			continue
		}
		if probe.p.HTTPGet.Path != probe.path {
			t.Errorf("%s probes %s, want %s", probe.name, probe.p.HTTPGet.Path, probe.path)
		}
		if got := containerPort(t, c, probe.p.HTTPGet.Port); got != port {
			t.Errorf("%s probes port %d, but the config listens on %d", probe.name, got, port)
		}
	}

	// The Service: selects the pods, reaches the listen port, and the admin port only when
	// exposure is asked for.
	podLabels := pod.Labels
	if !subset(svc.Spec.Selector, podLabels) || len(svc.Spec.Selector) == 0 {
		t.Errorf("Service selector %v does not select the pods (labels %v)", svc.Spec.Selector, podLabels)
	}
	if dep.Spec.Selector == nil || !subset(dep.Spec.Selector.MatchLabels, podLabels) {
		t.Errorf("Deployment selector %v does not match its pods' labels %v", dep.Spec.Selector, podLabels)
	}
	adminPort := 0
	if cfg.Admin.Listen != "" {
		adminHost, p := splitHostPort(t, "admin.listen", cfg.Admin.Listen)
		adminPort = p
		if loopback := adminHost == "127.0.0.1" || adminHost == "localhost" || adminHost == "::1"; loopback == w.adminExposed {
			t.Errorf("admin.listen %s: exposed=%v, want %v", cfg.Admin.Listen, !loopback, w.adminExposed)
		}
	}
	var servesListen, servesAdmin bool
	for _, sp := range svc.Spec.Ports {
		target := containerPort(t, c, sp.TargetPort)
		servesListen = servesListen || target == port
		servesAdmin = servesAdmin || (adminPort != 0 && target == adminPort)
	}
	if !servesListen {
		t.Errorf("the Service reaches no port the gateway listens on (%d): ports %+v", port, svc.Spec.Ports)
	}
	if servesAdmin != w.adminExposed {
		t.Errorf("the Service reaches the admin port %d: %v, want %v", adminPort, servesAdmin, w.adminExposed)
	}

	// The PodDisruptionBudget guards these pods.
	if pdb.Spec.Selector == nil || len(pdb.Spec.Selector.MatchLabels) == 0 || !subset(pdb.Spec.Selector.MatchLabels, podLabels) {
		t.Errorf("PodDisruptionBudget selector %v does not select the pods (labels %v)", pdb.Spec.Selector, podLabels)
	}
	if pdb.Spec.MinAvailable != nil && pdb.Spec.MinAvailable.IntValue() >= int(w.replicas) {
		t.Errorf("PodDisruptionBudget minAvailable %v blocks every voluntary disruption of %d replicas", pdb.Spec.MinAvailable, w.replicas)
	}

	// SIGTERM's drain completes: the grace period covers the preStop wait and drain_timeout.
	drain := 10 * time.Second // the gateway's default
	if cfg.DrainTimeout != "" {
		d, err := time.ParseDuration(cfg.DrainTimeout)
		if err != nil {
			t.Fatalf("drain_timeout %q: %v", cfg.DrainTimeout, err)
		}
		drain = d
	}
	var preStop time.Duration
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
		preStop = time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	}
	var grace time.Duration // Kubernetes' default is 30 s, but say it: the drain depends on it
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
		grace = time.Duration(*g) * time.Second
	}
	if grace <= preStop+drain {
		t.Errorf("terminationGracePeriodSeconds %v (unset: 0) is not above the preStop wait (%v) plus drain_timeout (%v)", grace, preStop, drain)
	}

	// Non-root, read-only.
	psc, csc := pod.Spec.SecurityContext, c.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Error("the pod does not set runAsNonRoot")
	}
	if csc == nil || csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem ||
		csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation ||
		csc.Capabilities == nil || !slices.Contains(csc.Capabilities.Drop, "ALL") {
		t.Errorf("the container's securityContext %+v: want a read-only root, no privilege escalation, every capability dropped", csc)
	}

	// Replicas share sessions only through Redis, which needs keys.
	if w.redis != (cfg.SessionStore.Type == "redis") {
		t.Errorf("session_store type %q, want redis: %v", cfg.SessionStore.Type, w.redis)
	}
	if w.replicas > 1 && (cfg.SessionStore.Type != "redis" || len(cfg.Keys) == 0) {
		t.Errorf("%d replicas with session_store %q and %d keys: replicas need Redis and keys", w.replicas, cfg.SessionStore.Type, len(cfg.Keys))
	}

	// A config that authenticates does not also say it serves anyone: the setting would be
	// ignored, and would mislead whoever reads it.
	if a := cfg.Auth; a.AllowUnauthenticated && (len(a.OIDC) > 0 || len(a.APIKeys) > 0 || a.APIKeysFile != "") {
		t.Error("the config has auth and allow_unauthenticated: true both")
	}

	validate(t, text, c, cfg)
}

// validate runs `gateway validate` on the config with the environment the container gets:
// plain values as they are, each Secret's entry a stand-in of the right shape.
func validate(t *testing.T, text string, c corev1.Container, cfg gatewayConfig) {
	t.Helper()
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env = append(env, e.Name+"="+e.Value)
		case e.ValueFrom.SecretKeyRef != nil && strings.HasPrefix(e.Name, "MANIFOLD_KEY_"):
			secret := make([]byte, 32)
			_, _ = rand.Read(secret)
			env = append(env, e.Name+"="+base64.StdEncoding.EncodeToString(secret))
		case e.ValueFrom.SecretKeyRef != nil && e.Name == "MANIFOLD_REDIS_URL":
			env = append(env, e.Name+"=redis://:secret@redis:6379/0")
		default:
			t.Errorf("env %s comes from %+v, which this check cannot stand in for", e.Name, e.ValueFrom)
		}
	}
	// Every ${VAR} the config names is in the container's environment.
	for _, m := range regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`).FindAllStringSubmatch(text, -1) {
		if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == m[1] }) {
			t.Errorf("the config names ${%s}, which the container's env does not set", m[1])
		}
	}
	dir := t.TempDir()
	if cfg.Admin.APIKeysFile != "" {
		// The file a Secret mounts there, with an entry as `gateway apikey` makes it.
		keys := filepath.Join(dir, "admin-api-keys.yaml")
		entry := "- name: ops\n  hash: sha256:" + strings.Repeat("ab", 32) + "\n"
		if err := os.WriteFile(keys, []byte(entry), 0o600); err != nil {
			t.Fatal(err)
		}
		text = strings.Replace(text, cfg.Admin.APIKeysFile, keys, 1)
	}
	file := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(gatewayBin, "validate", "-config", file)
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("gateway validate refused the ConfigMap's config: %v\n%s\nconfig:\n%s", err, out, text)
	}
}

func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

func splitHostPort(t *testing.T, key, addr string) (string, int) {
	t.Helper()
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s %q: %v", key, addr, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("%s %q: %v", key, addr, err)
	}
	return host, port
}

// containerPort resolves a port by number or by the name of one of the container's ports.
func containerPort(t *testing.T, c corev1.Container, p intstr.IntOrString) int {
	t.Helper()
	if p.Type == intstr.Int {
		return p.IntValue()
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort)
		}
	}
	t.Errorf("port %q is not a port of the container (%+v)", p.StrVal, c.Ports)
	return 0
}

func subset(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}
