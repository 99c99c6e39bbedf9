// Package prometheus ships notify's Prometheus configuration and alert
// rules — prometheus.yml and alerts.yml beside this file, which a
// Prometheus loads as they are — and writes them for other targets:
// `notify demo --prometheus` and the tests scrape the services of one run
// with the shipped jobs and rules.
//
// The jobs are the contract: alerts.yml and the Grafana dashboard
// (infra/grafana) select on `job`, so a deployment lists its own hosts
// under the same four job names.
package prometheus

import (
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"sigs.k8s.io/yaml"
)

// The scrape jobs of prometheus.yml, one per service.
const (
	JobAPI    = "notify-api"    // `notify run api --metrics-addr` (never the API port)
	JobCDC    = "notify-cdc"    // `notify run cdc --metrics-addr`
	JobFanout = "notify-fanout" // `notify run fanout --metrics-addr`
	JobPush   = "notify-push"   // `notify run push --metrics-addr`, one target per worker
)

var (
	//go:embed prometheus.yml
	configYAML []byte
	//go:embed alerts.yml
	rulesYAML []byte
)

// RuleFile is the shape of alerts.yml.
type RuleFile struct {
	Groups []RuleGroup `json:"groups"`
}

// RuleGroup is one group of rules.
type RuleGroup struct {
	Name     string  `json:"name"`
	Interval string  `json:"interval,omitempty"`
	Rules    []*Rule `json:"rules"`
}

// Rule is an alerting (or recording) rule.
type Rule struct {
	Alert       string            `json:"alert,omitempty"`
	Record      string            `json:"record,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Alerts returns the alerting rules of every group.
func (f *RuleFile) Alerts() []*Rule {
	var out []*Rule
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, r)
			}
		}
	}
	return out
}

// Rules decodes the shipped alerts.yml. It is strict: a field RuleFile
// does not know would otherwise be dropped from the copies Write makes.
func Rules() (*RuleFile, error) {
	var rf RuleFile
	if err := yaml.UnmarshalStrict(rulesYAML, &rf); err != nil {
		return nil, fmt.Errorf("alerts.yml: %w", err)
	}
	if len(rf.Alerts()) == 0 {
		return nil, fmt.Errorf("alerts.yml has no alerts")
	}
	return &rf, nil
}

// Options say what Write changes in the shipped files.
type Options struct {
	// Targets are the host:port addresses to scrape per job. Every job of
	// prometheus.yml needs at least one, and no other job may be named.
	// Required.
	Targets map[string][]string
	// Interval, when set, replaces the scrape and rule evaluation
	// intervals (the file's: 15 s); the scrape timeout becomes the
	// smaller of it and 10 s.
	Interval time.Duration
	// NoHold sets every alert's `for` to 0s, so an alert fires at the first
	// evaluation its expression holds. For tests, which cannot wait the
	// minutes an alert holds; the expressions stay the shipped ones.
	NoHold bool
}

// Write writes prometheus.yml and alerts.yml into dir with o applied and
// returns the path of prometheus.yml, ready for `prometheus
// --config.file`.
func Write(dir string, o Options) (string, error) {
	var cfg map[string]any
	if err := yaml.Unmarshal(configYAML, &cfg); err != nil {
		return "", fmt.Errorf("prometheus.yml: %w", err)
	}
	if rf, _ := cfg["rule_files"].([]any); !slices.Equal(rf, []any{"alerts.yml"}) {
		return "", fmt.Errorf("prometheus.yml loads rule files %v, want [alerts.yml]", cfg["rule_files"])
	}
	if o.Interval > 0 {
		g, _ := cfg["global"].(map[string]any)
		if g == nil {
			g = map[string]any{}
		}
		g["scrape_interval"] = o.Interval.String()
		g["evaluation_interval"] = o.Interval.String()
		g["scrape_timeout"] = min(o.Interval, 10*time.Second).String()
		cfg["global"] = g
	}
	scrapes, _ := cfg["scrape_configs"].([]any)
	seen := map[string]bool{}
	for _, s := range scrapes {
		sc, _ := s.(map[string]any)
		job, _ := sc["job_name"].(string)
		targets := o.Targets[job]
		if len(targets) == 0 {
			return "", fmt.Errorf("no targets for job %q of prometheus.yml", job)
		}
		seen[job] = true
		list := make([]any, len(targets))
		for i, t := range targets {
			list[i] = t
		}
		sc["static_configs"] = []any{map[string]any{"targets": list}}
	}
	var unknown []string
	for job := range o.Targets {
		if !seen[job] {
			unknown = append(unknown, job)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return "", fmt.Errorf("prometheus.yml has no jobs %v", unknown)
	}

	rules, err := Rules()
	if err != nil {
		return "", err
	}
	if o.NoHold {
		for _, r := range rules.Alerts() {
			r.For = "0s"
		}
	}
	if err := writeYAML(filepath.Join(dir, "alerts.yml"), rules); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "prometheus.yml")
	return path, writeYAML(path, cfg)
}

func writeYAML(path string, v any) error {
	b, err := yaml.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", filepath.Base(path), err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
