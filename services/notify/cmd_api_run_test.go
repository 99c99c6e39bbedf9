package main

import (
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/notify-dev/notify/schema/schematest"
)

// `notify run api` serves its metrics on --metrics-addr, with the API's
// own numbers, and not on the public --addr.
func TestRunAPIServesMetricsOffThePublicPort(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	addr, metricsAddr := closedPort(t), closedPort(t)
	p := startNotify(t, "run", "api", "--dev", "--database-url", db.URL, "--addr", addr, "--metrics-addr", metricsAddr)
	waitLog(t, p.log, p.exited, `"msg":"started"`, 1)
	get := func(url string) (int, string) {
		t.Helper()
		res, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := get("http://" + addr + "/healthz"); code != 200 {
		t.Fatalf("healthz %d %s", code, body)
	}
	if code, body := get("http://" + addr + "/metrics"); code != http.StatusNotFound || !strings.Contains(body, `"not_found"`) {
		t.Fatalf("public /metrics: %d %s, want a 404 JSON error", code, body)
	}
	code, body := get("http://" + metricsAddr + "/metrics")
	for _, want := range []string{`notify_api_requests_total{route="GET /healthz",status="200"} 1`, "notify_api_db_pool_max_conns 20"} {
		if code != 200 || !strings.Contains(body, want) {
			t.Fatalf("--metrics-addr /metrics: %d, lacks %s:\n%s", code, want, body)
		}
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit %d after SIGTERM:\n%s", code, p.log.String())
	}
}
