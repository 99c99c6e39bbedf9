// Package prometheus_test proves the shipped monitoring files with the real
// Prometheus (Debian's package `prometheus`: prometheus and promtool):
//
//   - promtool accepts prometheus.yml and alerts.yml;
//   - promtool's rule unit tests (alerts_test.yml) fire every alert on
//     synthetic series, with the shipped `for` durations;
//   - a Prometheus scraping every service of a short real pipeline run
//     (pushmock, api, cdc, fanout and push as processes) answers every
//     panel of infra/grafana/dashboards/notify.json with data and every
//     alert expression without error, fires the alerts whose conditions the
//     mock push service's faults force (429s, 5xx until the DLQ), and fires
//     NotifyServiceDown once the push worker is stopped.
//
// Without prometheus/promtool the tests skip, except under CI, where they
// fail (infra/local/test.sh installs the package).
package prometheus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"sigs.k8s.io/yaml"

	"github.com/notify-dev/notify/benchmarks/benchkit"
	"github.com/notify-dev/notify/infra/local/localtest"
	"github.com/notify-dev/notify/infra/prometheus"
	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/notify/notifytest"
	"github.com/notify-dev/notify/services/receipts"
	"github.com/notify-dev/notify/services/seed"
	"github.com/notify-dev/notify/streams"
	"github.com/notify-dev/notify/streams/streamstest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	notifytest.Cleanup()
	os.Exit(code)
}

const (
	dashboardPath  = "../grafana/dashboards/notify.json"
	datasourcePath = "../grafana/provisioning/datasources/prometheus.yml"
)

// tool returns the path of a Prometheus executable. Missing, the test
// skips on a laptop and fails in CI.
func tool(t *testing.T, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	localtest.Missing(t, "%s is not installed (apt-get install prometheus; infra/local/test.sh does it)", name)
	return ""
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestPromtoolAcceptsConfigAndRules(t *testing.T) {
	promtool := tool(t, "promtool")
	run(t, promtool, "check", "config", "prometheus.yml") // checks the rule files it loads too
	run(t, promtool, "check", "rules", "alerts.yml")
}

// TestAlertRulesFireOnSyntheticSeries runs alerts_test.yml, and checks it
// expects every alert of alerts.yml to fire at least once. promtool
// compares annotations exactly; the copy of the rules it gets has no
// `description` (long prose, checked for presence here), so the tests
// compare the labels and the rendered summary.
func TestAlertRulesFireOnSyntheticSeries(t *testing.T) {
	promtool := tool(t, "promtool")
	rules := loadRules(t)
	dir := t.TempDir()
	for _, r := range rules.Alerts() {
		if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
			t.Errorf("alert %s needs a summary and a description saying what to do", r.Alert)
		}
		delete(r.Annotations, "description")
	}
	writeYAML(t, filepath.Join(dir, "alerts.yml"), rules)
	raw, err := os.ReadFile("alerts_test.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts_test.yml"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, promtool, "test", "rules", filepath.Join(dir, "alerts_test.yml"))

	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(raw, &tests); err != nil {
		t.Fatal(err)
	}
	fires := map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			}
		}
	}
	for _, r := range rules.Alerts() {
		if !fires[r.Alert] {
			t.Errorf("alerts_test.yml never expects %s to fire", r.Alert)
		}
	}
}

// TestDashboardAndAlertsOnARealPipeline scrapes a real pipeline run.
//
// The rules Prometheus loads here are alerts.yml with every `for` set to
// 0s (prometheus.Options.NoHold): the expressions (and their rate windows) are exactly the shipped
// ones, but a test cannot wait the 1 to 15 minutes an alert holds before
// firing. The holds are exercised by TestAlertRulesFireOnSyntheticSeries.
func TestDashboardAndAlertsOnARealPipeline(t *testing.T) {
	promBin := tool(t, "prometheus")
	bin := notifytest.Binary(t)
	db := schematest.NewDatabase(t)
	topics := streamstest.NewTopics(t)
	brokers := streamstest.Brokers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()

	mockAddr := freeAddr(t)
	_, mockPort, _ := net.SplitHostPort(mockAddr)
	data, err := seed.Load(ctx, db.Pool, seed.Options{Users: 300, Seed: 1, PushBaseURL: "https://" + mockAddr + "/wpush/"})
	if err != nil {
		t.Fatal(err)
	}

	cert := filepath.Join(dir, "pushmock-cert.pem")
	env := []string{
		"NOTIFY_DATABASE_URL=" + db.URL,
		"NOTIFY_KAFKA_BROKERS=" + strings.Join(brokers, ","),
		"NOTIFY_TOPIC_PREFIX=" + topics.Prefix,
		"NOTIFY_PUSH_CA_FILE=" + cert,
		"NOTIFY_LOG_FORMAT=json",
		"NOTIFY_DEV=1", // the public dev secrets; every listener is on loopback
	}
	var procs []*benchkit.Proc
	byName := map[string]*benchkit.Proc{}
	defer func() {
		for i := len(procs) - 1; i >= 0; i-- {
			_ = procs[i].Stop(20 * time.Second)
		}
		if t.Failed() {
			for _, p := range procs {
				t.Logf("--- %s log (tail) ---\n%s", p.Name, p.LogTail(40))
			}
		}
	}()
	start := func(name, bin string, args ...string) {
		t.Helper()
		p, err := benchkit.StartProc(bin, dir, name, env, args...)
		if err != nil {
			t.Fatal(err)
		}
		procs = append(procs, p)
		byName[name] = p
	}

	// The mock's faults force three alerts: 10% of requests answered 429
	// (NotifyPush429RatioHigh), 5% of subscriptions always answered 500
	// until their last attempt dead-letters them (NotifyDLQGrowing), and
	// both together NotifyPushErrorRatioHigh.
	var port int
	fmt.Sscan(mockPort, &port)
	mock, err := benchkit.StartMock(ctx, benchkit.MockConfig{Binary: bin, Dir: dir, Port: port, Latency: 2 * time.Millisecond, Env: env,
		Flags: []string{"--rate-429", "0.1", "--retry-after", "1s", "--always-5xx-fraction", "0.05", "--gone-fraction", "0.05"}})
	if err != nil {
		t.Fatal(err)
	}
	procs = append(procs, mock.Proc)

	apiAddr, apiMetrics, cdcAddr, fanoutAddr, pushAddr := freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)
	slot := "notify_prom_" + regexp.MustCompile(`[^a-z0-9]`).ReplaceAllString(strings.ToLower(topics.Prefix), "")
	start("cdc", bin, "run", "cdc", "--slot", slot, "--metrics-addr", cdcAddr)
	start("fanout", bin, "run", "fanout", "--metrics-addr", fanoutAddr)
	start("push", bin, "run", "push", "--metrics-addr", pushAddr, "--worker-id", "push-1")
	start("api", bin, "run", "api", "--addr", apiAddr, "--metrics-addr", apiMetrics)
	targets := map[string][]string{prometheus.JobAPI: {apiMetrics}, prometheus.JobCDC: {cdcAddr}, prometheus.JobFanout: {fanoutAddr}, prometheus.JobPush: {pushAddr}}

	// Prometheus, on the shipped configuration with the run's targets.
	promAddr := freeAddr(t)
	promDir := filepath.Join(dir, "prometheus")
	if err := os.Mkdir(promDir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg, err := prometheus.Write(promDir, prometheus.Options{Targets: targets, Interval: time.Second, NoHold: true})
	if err != nil {
		t.Fatal(err)
	}
	start("prometheus", promBin, "--config.file="+cfg, "--storage.tsdb.path="+t.TempDir(),
		"--web.listen-address="+promAddr, "--log.level=warn")
	prom := promClient{t: t, base: "http://" + promAddr}
	waitFor(t, ctx, procs, 60*time.Second, "Prometheus ready", func() error { return httpOK(prom.base + "/-/ready") })

	// The pipeline, ready: the API, the connector's slot, the groups.
	waitFor(t, ctx, procs, 60*time.Second, "the API ready", func() error { return httpOK("http://" + apiAddr + "/readyz") })
	waitFor(t, ctx, procs, 60*time.Second, "the connector's slot active", func() error {
		var active bool
		if err := db.Pool.QueryRow(ctx, `SELECT coalesce((SELECT active FROM pg_replication_slots WHERE slot_name = $1), false)`, slot).Scan(&active); err != nil {
			return err
		}
		if !active {
			return fmt.Errorf("slot %s not active", slot)
		}
		return nil
	})
	adm := streamstest.Admin(t)
	for _, g := range []string{streams.GroupFanoutPlanner, streams.GroupFanout, streams.GroupPush} {
		name := topics.Group(g)
		waitFor(t, ctx, procs, 60*time.Second, "consumer group "+name+" stable", func() error { return groupStable(ctx, adm, name) })
	}

	// Prometheus scrapes only once its target discovery settled (up to 5 s
	// after the start): publish once it has scraped every service.
	waitFor(t, ctx, procs, 60*time.Second, "Prometheus' first scrape of every service", func() error {
		if up := prom.upJobs(); len(up) != len(targets) {
			return fmt.Errorf("scraped so far: %v", up)
		}
		return nil
	})

	// Three materials to the seeded course, published through the API.
	tok := exec.Command(bin, "token", "--user", data.InstructorID)
	tok.Env = append(os.Environ(), env...)
	token, err := tok.Output()
	if err != nil {
		t.Fatalf("notify token: %v", err)
	}
	for i := range 3 {
		publish(t, apiAddr, strings.TrimSpace(string(token)), data.CourseID, fmt.Sprintf("Week %d notes", i+1))
		time.Sleep(time.Second)
	}

	// A few students' service workers report their pushes shown and
	// clicked, with the receipt tokens the dev-mode push worker minted
	// (the dev key's): the receipts panels' data.
	postReceipts(t, ctx, procs, db, apiAddr)

	// Every panel's query answers with data.
	panels := dashboardQueries(t)
	waitFor(t, ctx, procs, 90*time.Second, "every dashboard query to return data", func() error {
		var empty []string
		for _, q := range panels {
			if n, err := prom.query(q.expr); err != nil {
				t.Fatalf("panel %q: %s: %v", q.panel, q.expr, err)
			} else if n == 0 {
				empty = append(empty, fmt.Sprintf("%q: %s", q.panel, q.expr))
			}
		}
		if len(empty) > 0 {
			return fmt.Errorf("%d queries without data:\n%s", len(empty), strings.Join(empty, "\n"))
		}
		return nil
	})

	// Every service is still being scraped.
	if up := prom.upJobs(); len(up) != len(targets) {
		t.Fatalf("jobs scraped successfully: %v; want all of %v", up, targets)
	}

	// Every alert's expression evaluates (an empty answer is a quiet alert).
	rules := loadRules(t)
	for _, r := range rules.Alerts() {
		if _, err := prom.query(r.Expr); err != nil {
			t.Errorf("alert %s: %v", r.Alert, err)
		}
	}

	// Every series name a panel or an alert names is one the services
	// export: a misspelt name would parse and stay empty forever.
	names := prom.seriesNames()
	exprs := []string{}
	for _, q := range panels {
		exprs = append(exprs, q.expr)
	}
	for _, r := range rules.Alerts() {
		exprs = append(exprs, r.Expr)
	}
	for _, e := range exprs {
		for _, n := range seriesNamesIn(e) {
			if !names[n] {
				t.Errorf("%s is not exported by any service (used in %s)", n, e)
			}
		}
	}

	// The alerts the mock's faults force fire; the service-down alert not yet.
	forced := []string{"NotifyPush429RatioHigh", "NotifyPushErrorRatioHigh", "NotifyDLQGrowing"}
	waitFor(t, ctx, procs, 90*time.Second, "alerts "+strings.Join(forced, ", ")+" firing", func() error {
		firing := prom.firing()
		for _, name := range forced {
			if len(firing[name]) == 0 {
				return fmt.Errorf("%s not firing (firing: %v)", name, slices.Sorted(maps.Keys(firing)))
			}
		}
		return nil
	})
	if down := prom.firing()["NotifyServiceDown"]; len(down) > 0 {
		t.Fatalf("NotifyServiceDown fires before any service stopped: %+v", down)
	}

	// Stop the push worker: NotifyServiceDown fires for it, and only it.
	if err := byName["push"].Stop(30 * time.Second); err != nil {
		t.Logf("push worker stop: %v", err)
	}
	var down []alert
	waitFor(t, ctx, nil, 60*time.Second, "NotifyServiceDown firing for the stopped push worker", func() error {
		if down = prom.firing()["NotifyServiceDown"]; len(down) == 0 {
			return fmt.Errorf("not firing")
		}
		return nil
	})
	for _, a := range down {
		if a.Labels["job"] != prometheus.JobPush || a.Labels["instance"] != pushAddr {
			t.Errorf("NotifyServiceDown fires for %v; only the push worker (%s) stopped", a.Labels, pushAddr)
		}
		for k, v := range a.Annotations {
			if v == "" || strings.Contains(v, "<no value>") || strings.Contains(v, "error") {
				t.Errorf("annotation %s renders as %q", k, v)
			}
		}
	}
	t.Logf("NotifyServiceDown: %s", down[0].Annotations["summary"])
}

func loadRules(t *testing.T) *prometheus.RuleFile {
	t.Helper()
	rf, err := prometheus.Rules()
	if err != nil {
		t.Fatal(err)
	}
	return rf
}

func writeYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

type panelQuery struct{ panel, expr string }

// dashboardQueries returns every target of every panel, with Grafana's
// $__rate_interval replaced by a window of many 1 s scrapes. It checks the
// panels use the provisioned datasource.
func dashboardQueries(t *testing.T) []panelQuery {
	t.Helper()
	raw, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	type ds struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	}
	var d struct {
		UID    string `json:"uid"`
		Panels []struct {
			ID         int    `json:"id"`
			Type       string `json:"type"`
			Title      string `json:"title"`
			Datasource *ds    `json:"datasource"`
			Targets    []struct {
				Expr       string `json:"expr"`
				Datasource *ds    `json:"datasource"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	var prov struct {
		Datasources []struct {
			UID  string `json:"uid"`
			Type string `json:"type"`
		} `json:"datasources"`
	}
	praw, err := os.ReadFile(datasourcePath)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(praw, &prov); err != nil || len(prov.Datasources) != 1 || prov.Datasources[0].Type != "prometheus" {
		t.Fatalf("%s: want one prometheus datasource, got %+v (%v)", datasourcePath, prov.Datasources, err)
	}
	uid := prov.Datasources[0].UID
	var out []panelQuery
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d is used twice", p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != uid || len(p.Targets) == 0 {
			t.Errorf("panel %q: datasource %+v, %d targets; want the provisioned %q and at least one", p.Title, p.Datasource, len(p.Targets), uid)
		}
		for _, tg := range p.Targets {
			if tg.Datasource != nil && tg.Datasource.UID != uid {
				t.Errorf("panel %q: a target on datasource %q", p.Title, tg.Datasource.UID)
			}
			e := strings.ReplaceAll(tg.Expr, "$__rate_interval", "30s")
			if strings.Contains(e, "$") {
				t.Errorf("panel %q: %s uses a variable the dashboard does not define", p.Title, tg.Expr)
			}
			out = append(out, panelQuery{p.Title, e})
		}
	}
	if len(out) == 0 {
		t.Fatal("the dashboard has no queries")
	}
	return out
}

// seriesNamesIn returns the series names an expression selects: the
// identifiers of the services' own families and the process and up series.
func seriesNamesIn(expr string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`\b(notify_[a-z0-9_]+|process_[a-z0-9_]+|up)\b`).FindAllStringSubmatch(expr, -1) {
		out = append(out, m[1])
	}
	sort.Strings(out)
	return slices.Compact(out)
}

type promClient struct {
	t    *testing.T
	base string
}

type alert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	State       string            `json:"state"`
}

func (p promClient) get(path string, into any) error {
	resp, err := http.Get(p.base + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		return fmt.Errorf("%s: %d %s", path, resp.StatusCode, raw)
	}
	if env.Status != "success" {
		return fmt.Errorf("%s", env.Error)
	}
	return json.Unmarshal(env.Data, into)
}

// query evaluates expr now and returns how many series or samples it gave.
func (p promClient) query(expr string) (int, error) {
	var res struct {
		ResultType string            `json:"resultType"`
		Result     []json.RawMessage `json:"result"`
	}
	if err := p.get("/api/v1/query?query="+url.QueryEscape(expr), &res); err != nil {
		return 0, err
	}
	if res.ResultType == "scalar" {
		return 1, nil
	}
	return len(res.Result), nil
}

func (p promClient) seriesNames() map[string]bool {
	p.t.Helper()
	var names []string
	if err := p.get("/api/v1/label/__name__/values", &names); err != nil {
		p.t.Fatal(err)
	}
	out := map[string]bool{}
	for _, n := range names {
		out[n] = true
	}
	return out
}

// upJobs returns the jobs with a target Prometheus scraped successfully.
func (p promClient) upJobs() []string {
	p.t.Helper()
	var res struct {
		Result []struct {
			Metric map[string]string `json:"metric"`
		} `json:"result"`
	}
	if err := p.get("/api/v1/query?query="+url.QueryEscape(`up == 1`), &res); err != nil {
		p.t.Fatal(err)
	}
	var jobs []string
	for _, r := range res.Result {
		jobs = append(jobs, r.Metric["job"])
	}
	sort.Strings(jobs)
	return slices.Compact(jobs)
}

// firing returns the firing alerts by name.
func (p promClient) firing() map[string][]alert {
	p.t.Helper()
	var res struct {
		Alerts []alert `json:"alerts"`
	}
	if err := p.get("/api/v1/alerts", &res); err != nil {
		p.t.Fatal(err)
	}
	out := map[string][]alert{}
	for _, a := range res.Alerts {
		if a.State == "firing" {
			out[a.Labels["alertname"]] = append(out[a.Labels["alertname"]], a)
		}
	}
	return out
}

func publish(t *testing.T, apiAddr, token, course, title string) {
	t.Helper()
	body := fmt.Sprintf(`{"title":%q,"body":"Read it before Friday."}`, title)
	req, _ := http.NewRequest(http.MethodPost, "http://"+apiAddr+"/v1/courses/"+course+"/materials", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		raw, _ := io.ReadAll(resp.Body)
		t.Fatalf("publish: %d %s", resp.StatusCode, raw)
	}
}

// postReceipts posts shown and clicked for up to five delivered pushes,
// as their service workers would.
func postReceipts(t *testing.T, ctx context.Context, procs []*benchkit.Proc, db *schematest.Database, apiAddr string) {
	t.Helper()
	key, err := receipts.NewKey([]byte(receipts.DevKey), 0)
	if err != nil {
		t.Fatal(err)
	}
	type push struct{ event, user string }
	var pushes []push
	waitFor(t, ctx, procs, 60*time.Second, "delivered pushes", func() error {
		rows, err := db.Pool.Query(ctx, `SELECT d.event_id::text, s.user_id::text FROM push_deliveries d
			JOIN push_subscriptions s ON s.id = d.subscription_id WHERE d.status = 'delivered' LIMIT 5`)
		if err != nil {
			return err
		}
		defer rows.Close()
		pushes = pushes[:0]
		for rows.Next() {
			var p push
			if err := rows.Scan(&p.event, &p.user); err != nil {
				return err
			}
			pushes = append(pushes, p)
		}
		if len(pushes) == 0 {
			return fmt.Errorf("none yet")
		}
		return rows.Err()
	})
	for _, p := range pushes {
		tok := key.Minter(p.event, time.Now()).Token(p.user, receipts.PlatformWebPush)
		for _, kind := range []string{receipts.KindShown, receipts.KindClicked} {
			req, _ := http.NewRequest(http.MethodPost, "http://"+apiAddr+"/v1/me/notifications/"+p.event+"/receipts", strings.NewReader(`{"kind":"`+kind+`"}`))
			req.Header.Set("Authorization", "Receipt "+tok)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("receipt %s: %d %s", kind, resp.StatusCode, raw)
			}
		}
	}
}

func groupStable(ctx context.Context, adm *kadm.Client, group string) error {
	d, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		return err
	}
	if g := d[group]; g.State != "Stable" || len(g.Members) == 0 {
		return fmt.Errorf("state %q, %d members", g.State, len(g.Members))
	}
	return nil
}

// waitFor polls cond every 500 ms until it returns nil, failing t with
// cond's last answer after timeout, or as soon as one of procs exited.
func waitFor(t *testing.T, ctx context.Context, procs []*benchkit.Proc, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if err := benchkit.ExitedError(procs, "while waiting for "+what); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("timed out after %s waiting for %s: %v", timeout, what, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func httpOK(u string) error {
	resp, err := http.Get(u)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", u, resp.Status)
	}
	return nil
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestWriteNamesTheJobsItCannotFill checks Write refuses targets that do
// not match prometheus.yml's jobs, rather than writing a config that
// silently scrapes fewer services.
func TestWriteNamesTheJobsItCannotFill(t *testing.T) {
	all := map[string][]string{prometheus.JobAPI: {"a:1"}, prometheus.JobCDC: {"c:1"}, prometheus.JobFanout: {"f:1"}, prometheus.JobPush: {"p:1", "p:2"}}
	for name, c := range map[string]struct {
		drop, add string
		want      string
	}{
		"missing job": {drop: prometheus.JobFanout, want: `no targets for job "notify-fanout"`},
		"unknown job": {add: "notify-other", want: "prometheus.yml has no jobs [notify-other]"},
	} {
		targets := maps.Clone(all)
		delete(targets, c.drop)
		if c.add != "" {
			targets[c.add] = []string{"o:1"}
		}
		if _, err := prometheus.Write(t.TempDir(), prometheus.Options{Targets: targets}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Write returned %v, want an error containing %q", name, err, c.want)
		}
	}
	dir := t.TempDir()
	path, err := prometheus.Write(dir, prometheus.Options{Targets: all, Interval: 2 * time.Second, NoHold: true})
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := os.ReadFile(path)
	rules, _ := os.ReadFile(filepath.Join(dir, "alerts.yml"))
	for _, want := range []string{"- p:1\n", "- p:2\n", "scrape_interval: 2s", "evaluation_interval: 2s", "- alerts.yml"} {
		if !strings.Contains(string(cfg), want) {
			t.Errorf("written config lacks %q:\n%s", want, cfg)
		}
	}
	if strings.Count(string(rules), "for: 0s") != len(loadRules(t).Alerts()) {
		t.Errorf("NoHold: not every alert has for: 0s:\n%s", rules)
	}
}
