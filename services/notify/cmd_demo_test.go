package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/notify-dev/notify/benchmarks/pipeline"
)

// TestPipelinePathsAbsolute: every path a run hands to a child process —
// the log directory (Firefox's profile, the mock's certificate, the dev
// credentials and Prometheus' config live in it) and the executables — is
// absolute, so a child that starts elsewhere or resolves paths against
// another directory (Firefox does, for --profile) finds them. The default
// log directory and a relative --log-dir both resolve against the working
// directory.
func TestPipelinePathsAbsolute(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ logDir, under string }{
		{"", filepath.Join(wd, ".local", "log")},
		{"rel/logs", filepath.Join(wd, "rel", "logs")},
		{"/tmp/abs-logs", "/tmp/abs-logs"},
	} {
		fs := newFlagSet("demo", "")
		var p pipelineFlags
		p.register(fs, 10)
		args := []string{"--database-url", "postgres://u@127.0.0.1:1/notify", "--kafka-brokers", "127.0.0.1:1"}
		if c.logDir != "" {
			args = append(args, "--log-dir", c.logDir)
		}
		if err := parseFlags(fs, args); err != nil {
			t.Fatal(err)
		}
		p.cfg.Browser = &pipeline.BrowserConfig{Firefox: "bin/firefox-esr"}
		if err := p.resolve(); err != nil {
			t.Fatal(err)
		}
		if !filepath.IsAbs(p.cfg.LogDir) || !strings.HasPrefix(p.cfg.LogDir, c.under) {
			t.Errorf("--log-dir %q: resolved to %q, want an absolute path under %s", c.logDir, p.cfg.LogDir, c.under)
		}
		if want := filepath.Join(wd, "bin", "firefox-esr"); p.cfg.Browser.Firefox != want {
			t.Errorf("firefox %q, want %q", p.cfg.Browser.Firefox, want)
		}
		if !filepath.IsAbs(p.cfg.Binary) {
			t.Errorf("notify binary %q is relative", p.cfg.Binary)
		}
	}
}
