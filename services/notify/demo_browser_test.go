package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/notify-dev/notify/benchmarks/pipeline"
	"github.com/notify-dev/notify/infra/local/localtest"
	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/api/webapp/firefox"
	"github.com/notify-dev/notify/services/notify/notifytest"
	"github.com/notify-dev/notify/streams/streamstest"
)

// TestDemoBrowser runs the README's demo with --browser the way a new user
// does: the built binary, started from a directory of its own, with the
// default log directory — which is relative, so every path it hands to
// Firefox (the profile above all) is resolved from it. The browser must
// subscribe through the page, receive the broadcast's push and show it
// once, and every device must be delivered. A demo whose browser path is
// broken cannot land.
func TestDemoBrowser(t *testing.T) {
	t.Parallel()
	localtest.Short(t, "runs the whole demo with a real Firefox")
	if _, err := firefox.Find(); err != nil {
		localtest.Missing(t, "notify demo --browser needs Firefox: %v", err)
	}
	bin := notifytest.Binary(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "demo", "--browser",
		"--users", "300", "--latency", "10ms", "--trickle", "0",
		"--kafka", "external", "--push-port", "28446", "--seed", "80",
		"--timeout", "3m", "--json", "demo.json")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"NOTIFY_DATABASE_URL="+schematest.ServerURL(),
		"NOTIFY_KAFKA_BROKERS="+strings.Join(streamstest.Brokers(t), ","),
		"NOTIFY_DEV=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("notify demo --browser: %v\n%s", err, tailLines(string(out), 40))
	}
	raw, err := os.ReadFile(filepath.Join(dir, "demo.json"))
	if err != nil {
		t.Fatalf("the demo wrote no --json result: %v\n%s", err, tailLines(string(out), 40))
	}
	var res pipeline.Result
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatalf("demo.json: %v", err)
	}
	b := res.Browser
	if b == nil || b.EventID == "" || b.Raw == "" {
		t.Fatalf("the browser received nothing: %+v\n%s", b, tailLines(string(out), 40))
	}
	if b.Notifications != 1 || b.ShownAfterSeconds <= 0 {
		t.Errorf("the browser shows %d notifications for the event, %.2f s after the publish; want 1, after it", b.Notifications, b.ShownAfterSeconds)
	}
	// The browser is one more Web Push subscription beside the seed's.
	if res.Delivered != res.Subscriptions || res.Lost != 0 || res.Duplicates != 0 {
		t.Errorf("delivered %d of %d (lost %d, duplicates %d)", res.Delivered, res.Subscriptions, res.Lost, res.Duplicates)
	}
	// The default log directory is the working directory's .local/log.
	if logs, _ := filepath.Glob(filepath.Join(dir, ".local", "log", "run-*")); len(logs) == 0 {
		t.Errorf("no run log directory under %s/.local/log", dir)
	}
	if !strings.Contains(string(out), b.Title) {
		t.Errorf("the demo's output does not show what the browser received (%q)", b.Title)
	}
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
