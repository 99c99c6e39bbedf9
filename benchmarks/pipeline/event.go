package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notify-dev/notify/benchmarks/benchkit"
	"github.com/notify-dev/notify/benchmarks/pushbench"
	"github.com/notify-dev/notify/services/api"
	"github.com/notify-dev/notify/services/api/webapp/firefox"
	"github.com/notify-dev/notify/services/push/webpush"
)

// EventResult is one published event of a run, measured from its publish
// request to its last recorded outcome. CPU figures are what was used in
// that window; byte sizes are read after the event.
type EventResult struct {
	// Index counts the run's events from 1.
	Index             int     `json:"index"`
	EventID           string  `json:"event_id"`
	PublishResponseMS float64 `json:"publish_response_ms"`
	// FanoutSeconds is publish → the fan-out run finished (every
	// notification written), by the database's clock.
	FanoutSeconds float64 `json:"fanout_seconds"`
	// TotalSeconds is publish → the last outcome recorded.
	TotalSeconds float64 `json:"total_seconds"`
	Notified     int64   `json:"notified"`
	// Deliveries is the event's final outcomes (delivered + gone +
	// failed); Lost the devices without one.
	Deliveries int64 `json:"deliveries"`
	Delivered  int64 `json:"delivered"`
	Lost       int64 `json:"lost"`
	// PushCPUSeconds is every push worker's CPU; PushCPUUSPerDelivery the
	// same per delivery, in µs.
	PushCPUSeconds       float64 `json:"push_cpu_seconds"`
	PushCPUUSPerDelivery float64 `json:"push_cpu_us_per_delivery"`
	// PostgresCPUSeconds is the run database's Postgres processes
	// (CPUPostgres), WalsenderCPUSeconds its walsender (part of it) and
	// PostgresServerCPUSeconds the server's whole process tree, shared
	// with whatever else uses the server.
	PostgresCPUSeconds       float64 `json:"postgres_cpu_seconds"`
	WalsenderCPUSeconds      float64 `json:"walsender_cpu_seconds"`
	PostgresServerCPUSeconds float64 `json:"postgres_server_cpu_seconds"`
	KafkaCPUSeconds          float64 `json:"kafka_cpu_seconds"`
	// MachineCPUSeconds is every process on the machine; the mock's share
	// is MockCPUSeconds (the push provider's work).
	MachineCPUSeconds       float64 `json:"machine_cpu_seconds"`
	MachineCPUUSPerDelivery float64 `json:"machine_cpu_us_per_delivery"`
	MachineBusyPercent      float64 `json:"machine_busy_percent"`
	MockCPUSeconds          float64 `json:"mock_cpu_seconds"`
	// PipelineCPUSeconds is the sum of CPUSecondsByProcess: the servers
	// and the run's services, the mock left out.
	PipelineCPUSeconds       float64            `json:"pipeline_cpu_seconds"`
	PipelineCPUUSPerDelivery float64            `json:"pipeline_cpu_us_per_delivery"`
	CPUSecondsByProcess      map[string]float64 `json:"cpu_seconds_by_process"`
	// NotificationsBytes and PushDeliveriesBytes are the tables' total
	// size with their indexes and TOAST (summed over partitions, if any),
	// OutboxBytes the outbox's, after the event.
	NotificationsBytes  int64 `json:"notifications_bytes"`
	PushDeliveriesBytes int64 `json:"push_deliveries_bytes"`
	OutboxBytes         int64 `json:"outbox_bytes"`
	// LoadAvg is the machine's load average at the publish.
	LoadAvg string `json:"load_average_at_publish"`
	// WALBytes is the WAL the server wrote in the event's window (its
	// insert position's advance), WALFullPageImages the full-page images
	// and Checkpoints the checkpoints started in it, as the server's
	// processes report them (pg_stat_wal, pg_stat_bgwriter; a backend's
	// counters arrive within about a second, ten when it is idle). All
	// are the whole server's. The first change of a page after a
	// checkpoint writes the whole page, so an event that overlaps a
	// checkpoint pays for every older page it touches: these say which
	// events did.
	WALBytes          int64 `json:"wal_bytes"`
	WALFullPageImages int64 `json:"wal_full_page_images"`
	Checkpoints       int64 `json:"checkpoints"`
	// CryptoOnlyUSPerMessage is the crypto-only reference measured right
	// after the event (Config.EventCryptoMessages; 0 when not measured),
	// and MachineToCrypto the event's machine CPU per delivery over it.
	CryptoOnlyUSPerMessage float64 `json:"crypto_only_us_per_message,omitempty"`
	MachineToCrypto        float64 `json:"machine_cpu_per_delivery_over_crypto,omitempty"`
}

// walReading is the server's WAL and checkpoint counters at one moment.
type walReading struct{ bytes, fpi, checkpoints int64 }

func readWAL(ctx context.Context, pool *pgxpool.Pool) (walReading, error) {
	var w walReading
	err := pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint, wal_fpi,
		(SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter) FROM pg_stat_wal`).
		Scan(&w.bytes, &w.fpi, &w.checkpoints)
	if err != nil {
		return w, fmt.Errorf("read pg_stat_wal and pg_stat_bgwriter (Postgres 14 or later): %w", err)
	}
	return w, nil
}

// eventRun is what publishEvent needs of a running pipeline.
type eventRun struct {
	pool                          *pgxpool.Pool
	mock                          *benchkit.Mock
	procs                         []*benchkit.Proc
	topics                        *benchkit.Topics
	probe                         *cpuProbe
	token, courseID, runID, dbURL string
	browser                       *firefox.Browser
	pushed                        int64
}

type eventOutcome struct {
	EventResult
	pushedAfter int64
}

// publishEvent publishes event i (from 0) and watches it to its last
// outcome. The hooks (Published, During, the browser) belong to the first
// event. It leaves the event's figures in res too (the last event's stay).
func publishEvent(ctx context.Context, cfg Config, er eventRun, i int, res *Result) (eventOutcome, error) {
	var out eventOutcome
	cfg.Say("publishing one material to a course of " + strconv.Itoa(cfg.Users) + " students")
	body, _ := json.Marshal(map[string]string{"title": fmt.Sprintf("Week %d notes", i+1), "body": fmt.Sprintf("Read chapter %d.", i+1),
		"url": fmt.Sprintf("https://example.com/week%d", i+1)})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+res.APIAddr+"/v1/courses/"+er.courseID+"/materials", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+er.token)
	key := "run-" + er.runID
	if i > 0 {
		key += "-" + strconv.Itoa(i+1)
	}
	req.Header.Set("Idempotency-Key", key)
	load := benchkit.LoadAvg()
	wal0, err := readWAL(ctx, er.pool)
	if err != nil {
		return out, err
	}
	win := er.probe.start(ctx)
	t0 := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return out, fmt.Errorf("publish: %w", err)
	}
	rb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	res.PublishResponseMS = float64(time.Since(t0).Microseconds()) / 1000
	if resp.StatusCode != http.StatusCreated {
		return out, fmt.Errorf("publish: %s: %s", resp.Status, rb)
	}
	var pub struct {
		EventID string `json:"event_id"`
	}
	if err := json.Unmarshal(rb, &pub); err != nil || pub.EventID == "" {
		return out, fmt.Errorf("publish response %q: %v", rb, err)
	}
	res.EventID = pub.EventID
	res.CommitToFirstNotified = 0

	// 5. Watch until every subscription has a final outcome.
	hookDone := make(chan struct{})
	hctx, stopHook := context.WithCancel(ctx)
	if cfg.Published != nil && i == 0 {
		go func() {
			defer close(hookDone)
			cfg.Published(hctx, Published{EventID: res.EventID, APIAddr: res.APIAddr, Token: er.token,
				DatabaseURL: er.dbURL, PublishedAt: t0, Mock: er.mock})
		}()
	} else {
		close(hookDone)
	}
	err = func() error {
		if cfg.During == nil || i > 0 {
			return watch(ctx, cfg, er.pool, er.mock, er.procs, res, t0, er.pushed, nil)
		}
		progress := make(chan Snapshot, 16)
		duringErr := make(chan error, 1)
		go func() {
			duringErr <- cfg.During(ctx, Live{Topics: er.topics, Users: res.Users, Subscriptions: res.Subscriptions,
				PushWorkers: cfg.PushWorkers, Progress: progress, APIAddr: res.APIAddr, DatabaseURL: er.dbURL, Binary: cfg.Binary, Mock: er.mock, Metrics: res.Metrics})
		}()
		werr := watch(ctx, cfg, er.pool, er.mock, er.procs, res, t0, er.pushed, progress)
		close(progress)
		derr := <-duringErr
		if werr != nil {
			return werr
		}
		return derr
	}()
	stopHook()
	<-hookDone
	if err != nil {
		return out, err
	}
	used := win.end()
	wal1, err := readWAL(ctx, er.pool)
	if err != nil {
		return out, err
	}

	if er.browser != nil && i == 0 {
		if err := browserReceived(ctx, cfg, er.browser, res.Browser, res.EventID, t0); err != nil {
			return out, err
		}
	}

	// 6. Accounting and timings from the tables (database clock throughout).
	devs := cfg.Mix.devices(cfg.Users, cfg.Seed)
	if err := measure(ctx, er.pool, res, devs); err != nil {
		return out, err
	}
	res.MachineCPUSeconds, res.MachineBusyPercent = used.machine, used.busyPct
	res.CPUSecondsByProcess, res.MockCPUSeconds, res.WalsenderCPUSeconds = used.byProcess, used.mock, used.walsender
	res.PostgresServerCPUSeconds, res.ObserverCPUSeconds = used.pgServer, used.observer
	res.PipelineCPUSeconds = used.sum()
	n := res.Delivered + res.Gone + res.Failed
	if n > 0 {
		res.PipelineCPUUSPerDelivery = 1e6 * res.PipelineCPUSeconds / float64(n)
	}
	ev := EventResult{Index: i + 1, EventID: res.EventID, PublishResponseMS: res.PublishResponseMS,
		FanoutSeconds: res.FanoutSeconds, TotalSeconds: res.TotalSeconds, Notified: res.Notified,
		Deliveries: n, Delivered: res.Delivered, Lost: res.Lost,
		PostgresCPUSeconds: used.byProcess[CPUPostgres], PostgresServerCPUSeconds: used.pgServer, WalsenderCPUSeconds: used.walsender, KafkaCPUSeconds: used.byProcess[CPUKafka],
		MachineCPUSeconds: used.machine, MachineBusyPercent: used.busyPct, MockCPUSeconds: used.mock,
		PipelineCPUSeconds: res.PipelineCPUSeconds, PipelineCPUUSPerDelivery: res.PipelineCPUUSPerDelivery,
		CPUSecondsByProcess: used.byProcess, LoadAvg: load,
		WALBytes: wal1.bytes - wal0.bytes, WALFullPageImages: wal1.fpi - wal0.fpi, Checkpoints: wal1.checkpoints - wal0.checkpoints}
	for name, c := range used.byProcess {
		if strings.HasPrefix(name, "push-") {
			ev.PushCPUSeconds += c
		}
	}
	if n > 0 {
		ev.PushCPUUSPerDelivery = 1e6 * ev.PushCPUSeconds / float64(n)
		ev.MachineCPUUSPerDelivery = 1e6 * used.machine / float64(n)
	}
	sizes, err := TableBytes(ctx, er.pool, "notifications", "push_deliveries", "outbox")
	if err != nil {
		return out, err
	}
	ev.NotificationsBytes, ev.PushDeliveriesBytes, ev.OutboxBytes = sizes[0], sizes[1], sizes[2]
	out.EventResult = ev
	if st, err := er.mock.Stats(ctx); err == nil {
		out.pushedAfter = st.Received + st.FCM.Received + st.APNs.Received
	}
	return out, nil
}

// TableBytes returns each table's total size — heap, indexes, TOAST —
// summed over its partitions when it is partitioned (pg_partition_tree's
// leaves; it lists nothing for a plain table, which is measured itself),
// so the figure means the same before and after a table is partitioned.
func TableBytes(ctx context.Context, pool *pgxpool.Pool, tables ...string) ([]int64, error) {
	out := make([]int64, len(tables))
	for i, t := range tables {
		err := pool.QueryRow(ctx, `SELECT coalesce(
			(SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree($1::regclass) WHERE isleaf),
			pg_total_relation_size($1::regclass))::bigint`, t).Scan(&out[i])
		if err != nil {
			return nil, fmt.Errorf("size of %s: %w", t, err)
		}
	}
	return out, nil
}

// cryptoOnlyUS is the Web Push engine's CPU per message with no network:
// pushbench's crypto-only reference (encryption and VAPID header) for n
// messages to the run's seeded subscription keys, signed with the dev
// VAPID key the run's push workers use, in µs.
func cryptoOnlyUS(n int, seedV int64, origin string) (float64, error) {
	key, err := webpush.ParseVAPIDKey(api.DevVAPIDPrivateKey)
	if err != nil {
		return 0, err
	}
	cpu, err := pushbench.CryptoOnly(n, seedV, webpush.VAPIDConfig{Key: key, Subject: "mailto:dev@localhost"}, origin)
	if err != nil {
		return 0, err
	}
	return 1e6 * cpu / float64(n), nil
}
