// Package infra holds the deployment files: local servers without Docker (local/), the
// Compose file, the Kubernetes manifests (k8s/), Prometheus rules and the Grafana dashboard.
// No Docker engine runs in CI, so this test checks compose.yaml itself: it interpolates it
// as compose does, decodes it strictly into the compose fields the file uses (an unknown or
// misplaced field fails), and checks what compose would only find at `up`: references,
// required settings, healthchecks on the endpoints each binary serves.
package infra

import (
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// The compose fields this file uses; strict decoding refuses the rest (x- extension
// fields are dropped first, as compose ignores them).
type composeFile struct {
	Name     string                    `json:"name"`
	Services map[string]composeService `json:"services"`
	Volumes  map[string]*struct{}      `json:"volumes"`
	Configs  map[string]struct {
		Content string `json:"content"`
		File    string `json:"file"`
	} `json:"configs"`
}

type composeService struct {
	Image string `json:"image"`
	Build *struct {
		Context    string `json:"context"`
		Dockerfile string `json:"dockerfile"`
	} `json:"build"`
	Command     []string       `json:"command"`
	Environment map[string]any `json:"environment"`
	DependsOn   map[string]struct {
		Condition string `json:"condition"`
	} `json:"depends_on"`
	Ports       []string `json:"ports"`
	Volumes     []string `json:"volumes"`
	Healthcheck *struct {
		Test        []string `json:"test"`
		Interval    string   `json:"interval"`
		Timeout     string   `json:"timeout"`
		Retries     int      `json:"retries"`
		StartPeriod string   `json:"start_period"`
	} `json:"healthcheck"`
	ShmSize string `json:"shm_size"`
	Deploy  *struct {
		Replicas int `json:"replicas"`
	} `json:"deploy"`
	Profiles []string `json:"profiles"`
	Restart  string   `json:"restart"`
	Configs  []struct {
		Source string `json:"source"`
		Target string `json:"target"`
	} `json:"configs"`
	StopGracePeriod string   `json:"stop_grace_period"`
	ReadOnly        bool     `json:"read_only"`
	SecurityOpt     []string `json:"security_opt"`
}

// interpolate replaces ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?message} and
// ${VAR?message} in s as compose does ($$ is a literal $), with env as the environment.
// Every unset required variable is reported, with its message.
func interpolate(s string, env map[string]string) (string, []error) {
	var errs []error
	re := regexp.MustCompile(`\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)`)
	out := re.ReplaceAllStringFunc(s, func(m string) string {
		if m == "$$" {
			return "$"
		}
		g := re.FindStringSubmatch(m)
		name, op, arg := g[1], g[2], g[3]
		if name == "" {
			name = g[4]
		}
		v, set := env[name]
		empty := !set || (strings.HasPrefix(op, ":") && v == "")
		switch {
		case op == ":-" || op == "-":
			if empty {
				return arg
			}
		case op == ":?" || op == "?":
			if empty {
				errs = append(errs, fmt.Errorf("required variable %s is missing a value: %s", name, arg))
			}
		}
		return v
	})
	return out, errs
}

// interpolateAll interpolates every string of a decoded YAML value in place.
func interpolateAll(v any, env map[string]string, errs *[]error) any {
	switch x := v.(type) {
	case string:
		s, e := interpolate(x, env)
		*errs = append(*errs, e...)
		return s
	case map[string]any:
		for k, e := range x {
			x[k] = interpolateAll(e, env, errs)
		}
	case []any:
		for i, e := range x {
			x[i] = interpolateAll(e, env, errs)
		}
	}
	return v
}

// loadCompose reads compose.yaml (or src) the way compose does: YAML with anchors and
// merge keys, x- fields dropped, variables interpolated from env; then decodes strictly.
func loadCompose(src []byte, env map[string]string) (*composeFile, []error) {
	var raw map[string]any
	if err := yaml.Unmarshal(src, &raw); err != nil {
		return nil, []error{err}
	}
	dropExtensions(raw)
	if svcs, ok := raw["services"].(map[string]any); ok {
		for _, s := range svcs {
			if m, ok := s.(map[string]any); ok {
				dropExtensions(m)
			}
		}
	}
	var errs []error
	interpolateAll(raw, env, &errs)
	if len(errs) > 0 {
		return nil, errs
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return nil, []error{err}
	}
	var f composeFile
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		return nil, []error{err}
	}
	return &f, nil
}

func dropExtensions(m map[string]any) {
	for k := range m {
		if strings.HasPrefix(k, "x-") {
			delete(m, k)
		}
	}
}

// secrets are the settings compose must refuse to start without.
var secrets = []string{"NOTIFY_API_JWT_SECRET", "NOTIFY_VAPID_PUBLIC_KEY", "NOTIFY_VAPID_PRIVATE_KEY", "NOTIFY_VAPID_SUBJECT", "NOTIFY_RECEIPT_KEY"}

func testEnv() map[string]string {
	env := map[string]string{}
	for _, s := range secrets {
		env[s] = "value-of-" + s
	}
	return env
}

func readCompose(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestComposeRequiresSecrets: without the secrets compose refuses the file, naming each;
// there is no dev mode to fall back to.
func TestComposeRequiresSecrets(t *testing.T) {
	src := readCompose(t)
	_, errs := loadCompose(src, map[string]string{})
	missing := map[string]bool{}
	for _, err := range errs {
		for _, s := range secrets {
			if strings.Contains(err.Error(), "variable "+s+" is missing") {
				missing[s] = true
				if !strings.Contains(err.Error(), ": set "+s) {
					t.Errorf("%v: the message should say how to set it", err)
				}
			}
		}
	}
	for _, s := range secrets {
		if !missing[s] {
			t.Errorf("compose starts without %s (errors: %v)", s, errs)
		}
	}
	// An empty value is refused too (":?"), as the binary refuses it.
	env := testEnv()
	env["NOTIFY_VAPID_SUBJECT"] = ""
	if _, errs := loadCompose(src, env); len(errs) == 0 {
		t.Error("compose accepts an empty NOTIFY_VAPID_SUBJECT")
	}
	if _, errs := loadCompose(src, testEnv()); len(errs) > 0 {
		t.Fatalf("with the secrets set: %v", errs)
	}
}

// TestComposeStrict: the decoding refuses a misspelt field, so the checks below see the
// file compose would run.
func TestComposeStrict(t *testing.T) {
	src := string(readCompose(t))
	for name, bad := range map[string]string{
		"misspelt field":  strings.Replace(src, "    healthcheck:\n", "    healthchek:\n", 1),
		"misplaced field": strings.Replace(src, "  cdc:\n", "  cdc:\n    retries: 3\n", 1),
		"wrong type":      strings.Replace(src, "deploy: {replicas: 2}", "deploy: {replicas: two}", 1),
	} {
		if bad == src {
			t.Fatalf("%s: the mutation changed nothing", name)
		}
		if _, errs := loadCompose([]byte(bad), testEnv()); len(errs) == 0 {
			t.Errorf("%s: decoded without error", name)
		}
	}
}

// notifyService is what each notify container must look like.
type notifyService struct {
	args []string // the command
	// listen is the port of the HTTP listener the healthcheck asks, probe the endpoints
	// it serves there; metrics the port of /metrics (Prometheus scrapes it).
	listen, metrics string
	probe           []string
	requires        []string // beyond NOTIFY_DATABASE_URL
	oneShot         bool
}

var notifyServices = map[string]notifyService{
	"migrate": {args: []string{"migrate"}, requires: []string{"NOTIFY_KAFKA_BROKERS"}, oneShot: true},
	"api": {args: []string{"run", "api"}, listen: "8080", metrics: "9104", probe: []string{"/healthz", "/readyz"},
		requires: []string{"NOTIFY_API_ADDR", "NOTIFY_API_METRICS_ADDR", "NOTIFY_API_JWT_SECRET", "NOTIFY_VAPID_PUBLIC_KEY", "NOTIFY_RECEIPT_KEY"}},
	"cdc": {args: []string{"run", "cdc", "--metrics-addr", ":9101"}, listen: "9101", metrics: "9101", probe: []string{"/metrics"},
		requires: []string{"NOTIFY_KAFKA_BROKERS"}},
	"fanout": {args: []string{"run", "fanout", "--metrics-addr", ":9102"}, listen: "9102", metrics: "9102", probe: []string{"/metrics"},
		requires: []string{"NOTIFY_KAFKA_BROKERS"}},
	"push": {args: []string{"run", "push", "--metrics-addr", ":9103"}, listen: "9103", metrics: "9103", probe: []string{"/metrics"},
		requires: []string{"NOTIFY_KAFKA_BROKERS", "NOTIFY_VAPID_PRIVATE_KEY", "NOTIFY_VAPID_SUBJECT", "NOTIFY_RECEIPT_KEY"}},
}

// entrypoint is the binary's path in the image, from infra/Dockerfile's ENTRYPOINT.
func entrypoint(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^ENTRYPOINT \["([^"]+)"\]`).FindSubmatch(b)
	if m == nil {
		t.Fatal("Dockerfile has no exec-form ENTRYPOINT")
	}
	return string(m[1])
}

func TestComposeFile(t *testing.T) {
	f, errs := loadCompose(readCompose(t), testEnv())
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	bin := entrypoint(t)
	for name, s := range f.Services {
		t.Run(name, func(t *testing.T) {
			if s.Image == "" && s.Build == nil {
				t.Error("neither image nor build")
			}
			if s.Build != nil {
				df := filepath.Join(s.Build.Context, s.Build.Dockerfile)
				if _, err := os.Stat(df); err != nil {
					t.Errorf("build: %v", err)
				}
			}
			for dep, d := range s.DependsOn {
				target, ok := f.Services[dep]
				switch {
				case !ok:
					t.Errorf("depends on %s, which is not a service", dep)
					continue
				case len(target.Profiles) > 0 && !slices.Equal(target.Profiles, s.Profiles):
					t.Errorf("depends on %s, which runs only under profiles %v", dep, target.Profiles)
				}
				switch d.Condition {
				case "service_healthy":
					if target.Healthcheck == nil {
						t.Errorf("waits for %s to be healthy, which has no healthcheck", dep)
					}
				case "service_completed_successfully":
					if target.Restart != "no" {
						t.Errorf("waits for %s to complete, which restarts (%q)", dep, target.Restart)
					}
				case "service_started":
				default:
					t.Errorf("depends on %s with condition %q", dep, d.Condition)
				}
			}
			for _, p := range s.Ports {
				if !strings.HasPrefix(p, "127.0.0.1:") {
					t.Errorf("port %q is published beyond loopback", p)
				}
			}
			for _, v := range s.Volumes {
				src, _, ok := strings.Cut(v, ":")
				if !ok {
					t.Errorf("volume %q without a target", v)
					continue
				}
				if !strings.HasPrefix(src, ".") && !strings.HasPrefix(src, "/") {
					if _, ok := f.Volumes[src]; !ok {
						t.Errorf("named volume %s is not declared", src)
					}
					continue
				}
				checkBindSource(t, src)
			}
			for _, c := range s.Configs {
				if _, ok := f.Configs[c.Source]; !ok {
					t.Errorf("config %s is not declared", c.Source)
				}
			}
			if h := s.Healthcheck; h != nil {
				for _, d := range []string{h.Interval, h.Timeout, h.StartPeriod} {
					if _, err := time.ParseDuration(d); d != "" && err != nil {
						t.Errorf("healthcheck duration %q: %v", d, err)
					}
				}
				if len(h.Test) < 2 || (h.Test[0] != "CMD" && h.Test[0] != "CMD-SHELL") {
					t.Errorf("healthcheck test %q", h.Test)
				}
			}
			ns, isNotify := notifyServices[name]
			if !isNotify {
				if s.Build != nil {
					t.Errorf("builds the notify image but this test does not know it: add it to notifyServices")
				}
				return
			}
			checkNotifyService(t, f, s, ns, bin)
		})
	}
	for name := range notifyServices {
		if _, ok := f.Services[name]; !ok {
			t.Errorf("no service %s", name)
		}
	}
	checkServers(t, f)
	checkPrometheus(t, f)
}

func checkNotifyService(t *testing.T, f *composeFile, s composeService, ns notifyService, bin string) {
	t.Helper()
	if s.Build == nil || s.Build.Dockerfile != "infra/Dockerfile" {
		t.Errorf("not built from infra/Dockerfile")
	}
	if !slices.Equal(s.Command, ns.args) {
		t.Errorf("command %q, want %q", s.Command, ns.args)
	}
	env := map[string]string{}
	for k, v := range s.Environment {
		env[k] = fmt.Sprint(v)
	}
	if _, ok := env["NOTIFY_DEV"]; ok {
		t.Errorf("NOTIFY_DEV is set: dev mode runs on public secrets and is refused beyond loopback")
	}
	for _, r := range append([]string{"NOTIFY_DATABASE_URL"}, ns.requires...) {
		if env[r] == "" {
			t.Errorf("%s is not set; the binary refuses to start without it", r)
		}
	}
	if u, err := url.Parse(env["NOTIFY_DATABASE_URL"]); err != nil || f.Services[u.Hostname()].Image == "" {
		t.Errorf("NOTIFY_DATABASE_URL %q does not name a compose service", env["NOTIFY_DATABASE_URL"])
	}
	if b := env["NOTIFY_KAFKA_BROKERS"]; b != "" {
		for _, h := range strings.Split(b, ",") {
			host, _, err := net.SplitHostPort(h)
			if _, ok := f.Services[host]; err != nil || !ok {
				t.Errorf("NOTIFY_KAFKA_BROKERS %q: %s is not a compose service", b, h)
			}
		}
	}
	if ns.oneShot {
		if s.Restart != "no" {
			t.Errorf("one-shot with restart %q", s.Restart)
		}
		if s.Healthcheck != nil {
			t.Errorf("one-shot with a healthcheck")
		}
		return
	}
	if d, ok := s.DependsOn["migrate"]; !ok || d.Condition != "service_completed_successfully" {
		t.Errorf("does not wait for migrate to complete")
	}
	if g, err := time.ParseDuration(s.StopGracePeriod); err != nil || g <= 30*time.Second {
		t.Errorf("stop_grace_period %q must exceed --stop-timeout (30s), or compose kills in-flight work", s.StopGracePeriod)
	}
	// The listen addresses: beyond loopback (other containers and the host reach them),
	// the API's where the healthcheck asks, the metrics' where Prometheus scrapes.
	metricsAddr := env["NOTIFY_API_METRICS_ADDR"]
	if i := slices.Index(s.Command, "--metrics-addr"); i >= 0 && i+1 < len(s.Command) {
		metricsAddr = s.Command[i+1]
	}
	apiAddr := metricsAddr
	if a, ok := env["NOTIFY_API_ADDR"]; ok {
		apiAddr = a
	}
	for _, l := range []struct{ addr, port string }{{apiAddr, ns.listen}, {metricsAddr, ns.metrics}} {
		host, port, err := net.SplitHostPort(l.addr)
		if err != nil || port != l.port || (host != "" && host != "0.0.0.0") {
			t.Errorf("listens on %q, want :%s", l.addr, l.port)
		}
	}
	h := s.Healthcheck
	if h == nil {
		t.Fatalf("no healthcheck")
	}
	if len(h.Test) != 4 || h.Test[0] != "CMD" || h.Test[1] != bin || h.Test[2] != "probe" {
		t.Fatalf("healthcheck %q, want [CMD %s probe URL] (the image has no shell or curl)", h.Test, bin)
	}
	u, err := url.Parse(h.Test[3])
	if err != nil || u.Port() != ns.listen || !slices.Contains(ns.probe, u.Path) {
		t.Errorf("healthcheck asks %s, want port %s and one of %v", h.Test[3], ns.listen, ns.probe)
	}
	for _, p := range s.Ports {
		if !strings.HasSuffix(p, ":"+ns.listen) {
			t.Errorf("port %q is not the listener's (%s)", p, ns.listen)
		}
	}
}

// checkBindSource: a bind-mounted file or folder exists. Prometheus' and Grafana's files
// come with infra/prometheus and infra/grafana; until those folders exist, the mounts
// into them are only logged.
func checkBindSource(t *testing.T, src string) {
	t.Helper()
	if _, err := os.Stat(src); err == nil {
		return
	}
	top := strings.Split(filepath.Clean(src), string(filepath.Separator))[0]
	if _, err := os.Stat(top); err != nil && (top == "prometheus" || top == "grafana") {
		t.Logf("bind mount %s: %s/ does not exist yet", src, top)
		return
	}
	t.Errorf("bind mount source %s does not exist", src)
}

// checkServers: Postgres decodes logically (the connector needs it) and Kafka runs KRaft.
func checkServers(t *testing.T, f *composeFile) {
	t.Helper()
	if pg := f.Services["postgres"]; !slices.Contains(pg.Command, "wal_level=logical") {
		t.Errorf("postgres command %q lacks wal_level=logical", pg.Command)
	}
	k := f.Services["kafka"]
	if roles := fmt.Sprint(k.Environment["KAFKA_PROCESS_ROLES"]); !strings.Contains(roles, "controller") {
		t.Errorf("kafka process roles %q: not KRaft", roles)
	}
	if _, zk := k.Environment["KAFKA_ZOOKEEPER_CONNECT"]; zk {
		t.Error("kafka configured for ZooKeeper")
	}
}

// promConfig is the part of a Prometheus configuration these files use.
type promConfig struct {
	Global struct {
		ScrapeInterval     string `json:"scrape_interval"`
		ScrapeTimeout      string `json:"scrape_timeout"`
		EvaluationInterval string `json:"evaluation_interval"`
	} `json:"global"`
	RuleFiles     []string `json:"rule_files"`
	ScrapeConfigs []struct {
		JobName       string `json:"job_name"`
		StaticConfigs []struct {
			Targets []string `json:"targets"`
		} `json:"static_configs"`
		DNSSDConfigs []struct {
			Names []string `json:"names"`
			Type  string   `json:"type"`
			Port  int      `json:"port"`
		} `json:"dns_sd_configs"`
	} `json:"scrape_configs"`
}

// checkPrometheus: the compose scrape configuration finds every notify service on its
// listener, loads the mounted alert rules, and keeps the job names of
// infra/prometheus/prometheus.yml.
func checkPrometheus(t *testing.T, f *composeFile) {
	t.Helper()
	p, ok := f.Services["prometheus"]
	if !ok {
		t.Fatal("no prometheus service")
	}
	if len(p.Configs) != 1 {
		t.Fatalf("prometheus configs %v", p.Configs)
	}
	var cfg promConfig
	if err := yaml.UnmarshalStrict([]byte(f.Configs[p.Configs[0].Source].Content), &cfg); err != nil {
		t.Fatalf("compose's Prometheus configuration: %v", err)
	}
	if !slices.Contains(p.Command, "--config.file="+p.Configs[0].Target) {
		t.Errorf("prometheus command %q does not load %s", p.Command, p.Configs[0].Target)
	}
	for _, r := range cfg.RuleFiles {
		mounted := false
		for _, v := range p.Volumes {
			if parts := strings.Split(v, ":"); len(parts) >= 2 && parts[1] == r {
				mounted = true
			}
		}
		if !mounted {
			t.Errorf("rule file %s is not mounted", r)
		}
	}
	var jobs []string
	scraped := map[string]bool{}
	for _, sc := range cfg.ScrapeConfigs {
		jobs = append(jobs, sc.JobName)
		for _, d := range sc.DNSSDConfigs {
			for _, n := range d.Names {
				ns, ok := notifyServices[n]
				if !ok || fmt.Sprint(d.Port) != ns.metrics || d.Type != "A" {
					t.Errorf("job %s scrapes %s:%d (%s)", sc.JobName, n, d.Port, d.Type)
				}
				scraped[n] = true
				if want := "notify-" + n; sc.JobName != want {
					t.Errorf("service %s is scraped as job %s, want %s", n, sc.JobName, want)
				}
			}
		}
	}
	for n, ns := range notifyServices {
		if !ns.oneShot && !scraped[n] {
			t.Errorf("%s is not scraped", n)
		}
	}
	b, err := os.ReadFile(filepath.Join("prometheus", "prometheus.yml"))
	if os.IsNotExist(err) {
		t.Log("infra/prometheus/prometheus.yml does not exist yet: job names not compared")
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	var host promConfig
	if err := yaml.Unmarshal(b, &host); err != nil {
		t.Fatalf("infra/prometheus/prometheus.yml: %v", err)
	}
	var hostJobs []string
	for _, sc := range host.ScrapeConfigs {
		hostJobs = append(hostJobs, sc.JobName)
	}
	sort.Strings(jobs)
	sort.Strings(hostJobs)
	if !slices.Equal(jobs, hostJobs) {
		t.Errorf("compose scrapes jobs %v, infra/prometheus/prometheus.yml %v: the alerts and the dashboard select on them", jobs, hostJobs)
	}
	if cfg.Global != host.Global {
		t.Errorf("compose's global settings %+v differ from infra/prometheus/prometheus.yml's %+v", cfg.Global, host.Global)
	}
}
