package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notify-dev/notify/benchmarks/benchkit"
	"github.com/notify-dev/notify/services/api/webapp/firefox"
	"github.com/notify-dev/notify/services/ids"
	"github.com/notify-dev/notify/services/push/apns"
	"github.com/notify-dev/notify/services/seed"
	"github.com/notify-dev/notify/streams"
)

// Config describes one run.
type Config struct {
	// Binary is the notify executable started for every service. Required.
	Binary string
	// DatabaseURL points at the Postgres server; its database part is
	// replaced by the run's own database. Required.
	DatabaseURL string
	// Brokers are the Kafka seed brokers. Required.
	Brokers []string
	// Users is the number of enrolled students. Default 100,000.
	Users int
	// Seed fixes the data set and subscription keys. Default 1.
	Seed int64
	// Mix is the devices per student of each platform. Default (nil)
	// DefaultMix, the seed's job. With FCM or APNs devices the mock serves
	// those platforms with dev credentials in LogDir and the push workers
	// are given them (dev mode).
	Mix *Mix
	// PushWorkers is how many `notify run push` processes share the push
	// topic. Default 1.
	PushWorkers int
	// Latency is the mock push service's injected response time.
	// Default 230 ms, the seed write-up's measured FCM round trip.
	Latency time.Duration
	// PushPort is the mock push service's port; seeded endpoints point at
	// it. Default 8443.
	PushPort int
	// LogDir receives one log file per service. Default .local/log/run-<ts>.
	LogDir string
	// Timeout bounds the wait for the last delivery. Default 15 minutes.
	Timeout time.Duration
	// Progress, when set, receives a snapshot about every 500 ms.
	Progress func(Snapshot)
	// Say, when set, receives one line per step (starting services, …).
	Say func(string)
	// Published, when set, runs in its own goroutine from the publish
	// answer until every push is recorded (its ctx then ends; Run waits for
	// it to return): a poller measuring the run while it runs.
	Published func(ctx context.Context, p Published)
	// MockFlags are further flags of the mock push service (e.g.
	// "--per-topic" for runs of many events).
	MockFlags []string
	// ExtraEnv is added to every child's environment (e.g. tuning knobs).
	ExtraEnv []string
	// ServiceFlags are further flags of a service, by its name (cdc,
	// fanout, push, api): tuning knobs compared between runs, e.g.
	// "push": {"--batch-size", "4000"}.
	ServiceFlags map[string][]string
	// Browser, when set, runs a real Firefox beside the run: before the
	// publish it opens the API's web app as one of the seeded students and
	// subscribes (one subscription more to deliver), and after the run it
	// waits for the push to be shown there (Result.Browser).
	Browser *BrowserConfig
	// Ready, when set, is called once every service is ready and before
	// the publish, with the run's log directory and Result.Metrics (service
	// name → /metrics URL): `notify demo --prometheus` starts Prometheus
	// there. An error ends the run.
	Ready func(logDir string, metrics map[string]string) error
	// Stopping, when set, is called before the services are stopped at
	// the end of the run (Prometheus takes its last scrape then).
	Stopping func()
	// During, when set, runs beside the wait for the last outcome, from
	// the moment the material is published: fault injection
	// (benchmarks/brokerfault) uses it. The run returns only after During
	// has, and During's error fails the run.
	During func(ctx context.Context, live Live) error
	// Events is how many materials are published to the course, one
	// after another: each is watched to its last outcome before the next
	// (`notify bench history`). Default 1. The hooks above (Published,
	// During, Browser) belong to the first. With more than one,
	// Result.Events has each event's figures and Result's own the last's.
	Events int
	// EventDone, when set, is called with each event's figures as it
	// ends.
	EventDone func(EventResult)
	// NoBroadcast publishes nothing: once every service is ready, Run
	// calls During alone (Live.Progress is nil) and returns when it has.
	// For load that is not one broadcast (`notify bench transactional`).
	NoBroadcast bool
	// Scratch seeds a fresh database of the run's own, dropped when the
	// run ends, instead of the one per size that runs reuse: for runs that
	// leave a history behind (many events' notifications and outcomes).
	Scratch bool
	// CryptoMessages sizes the crypto-only reference measured after the
	// run (Result.CryptoOnlyUSPerMessage); at most the run's subscriptions.
	// Default 20,000; negative skips it.
	CryptoMessages int
	// EventCryptoMessages, when positive, sizes the same reference
	// measured again after each event of a run of several
	// (EventResult.CryptoOnlyUSPerMessage): the push workers' work per
	// message is the same in every event, so its drift between the first
	// and the last event is the machine's, which a history run has to
	// tell apart from its own. Default 0: none.
	EventCryptoMessages int
	// CountersOff disables the per-event counter triggers in the run's
	// database (notifications' and push_deliveries', which keep
	// event_counters and event_platform_counters) for an A/B of what
	// the counters cost a run. Progress then comes from the mock; the run
	// ends when the mock has every push and push_deliveries has every
	// outcome (counted once the mock has them all). The next run
	// without it enables them again. Default false.
	CountersOff bool
	// Roster takes the students from the platform's change stream instead
	// of the seed: the run writes Debezium records (integer ids, the
	// platform's own column names, schemas.enable=true) of the students,
	// their instructor, the course and the enrollments to topics of its
	// own, starts `notify run roster` on them (NOTIFY_ID_NAMESPACE
	// RosterNamespace, for every service) and publishes once the roster
	// has applied them all. The seed then writes the devices alone, for
	// those students. Implies Scratch. Default false.
	Roster bool
	// Preferences, when set, gives these shares of the course's students
	// preferences before the first event (seed.ApplyPreferences; the quiet
	// hours end an hour later, past any run); without it the run database
	// has none. What the fan-out holds back (push_hold_sets: muted, and
	// deferred to the quiet hours' end) is not expected during the run:
	// an event ends when every device of the students it did not hold has
	// an outcome (Result.HeldDevices). A capped share is refused (the cap
	// needs an earlier hour's pushes; `notify bench fanout --preferences`
	// measures it), and so are Roster, CountersOff and Browser, whose
	// accounting counts every device.
	Preferences *seed.Preferences
}

// counterTriggers are the row-count triggers CountersOff disables: the
// per-delivery and per-notification bookkeeping (one function keeps
// event_counters and event_platform_counters since migration 0014). Migration 0010's
// once-per-command target count inside push_command_devices stays.
var counterTriggers = map[string][]string{
	"notifications":   {"event_counters_notified"},
	"push_deliveries": {"event_counters_outcomes_inserted", "event_counters_outcomes_updated", "event_counters_outcomes_deleted"},
}

// setCounters enables or disables counterTriggers.
func setCounters(ctx context.Context, pool *pgxpool.Pool, on bool) error {
	verb := "DISABLE"
	if on {
		verb = "ENABLE"
	}
	for table, names := range counterTriggers {
		for _, name := range names {
			if _, err := pool.Exec(ctx, fmt.Sprintf("ALTER TABLE %s %s TRIGGER %s", table, verb, name)); err != nil {
				return fmt.Errorf("%s trigger %s on %s: %w", strings.ToLower(verb), name, table, err)
			}
		}
	}
	return nil
}

// BrowserConfig is the real browser of a run.
type BrowserConfig struct {
	// Firefox is the executable (firefox.Find). Required.
	Firefox string
	// Wait bounds the browser's subscription and its push. Default 90 s.
	Wait time.Duration
}

// BrowserResult is what the browser of a run received.
type BrowserResult struct {
	Endpoint string `json:"endpoint"`
	Student  string `json:"student"`
	// Raw is the push payload Firefox decrypted, exactly.
	Raw     string `json:"raw"`
	Title   string `json:"title"`
	EventID string `json:"event_id"`
	// ShownAfterSeconds is publish → the service worker showed it.
	ShownAfterSeconds float64 `json:"shown_after_seconds"`
	// Notifications is how many notifications the browser shows for the
	// event (1: tag = event id).
	Notifications int    `json:"notifications"`
	Screenshot    string `json:"screenshot,omitempty"`
}

// Live is what During sees of a running pipeline.
type Live struct {
	// Topics are the run's topics, with an admin client.
	Topics *benchkit.Topics
	// Users and Subscriptions are the run's totals.
	Users, Subscriptions int64
	// PushWorkers is how many push worker processes run.
	PushWorkers int
	// Progress receives the snapshots (every 250 ms; one is dropped when
	// During does not keep up). It is closed when the last outcome is
	// recorded or the run fails; nil with NoBroadcast.
	Progress <-chan Snapshot
	// APIAddr is the API's host:port, DatabaseURL the run's own database
	// and Binary the notify executable (to mint tokens).
	APIAddr, DatabaseURL, Binary string
	// Mock is the run's mock push service.
	Mock *benchkit.Mock
	// Metrics is each service's /metrics URL, by service name.
	Metrics map[string]string
}

func (c *Config) defaults() error {
	if c.Binary == "" || c.DatabaseURL == "" || len(c.Brokers) == 0 {
		return errors.New("pipeline: Binary, DatabaseURL and Brokers are required")
	}
	if c.Users == 0 {
		c.Users = 100_000
	}
	if c.Users < 1 {
		return fmt.Errorf("users must be ≥ 1, got %d", c.Users)
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.Mix == nil {
		m := DefaultMix()
		c.Mix = &m
	}
	switch m := *c.Mix; {
	case m.WebPush < 0 || m.WebPush > 3:
		return fmt.Errorf("mix: webpush=%v: between 0 and 3 subscriptions per student", m.WebPush)
	case m.FCM < 0 || m.FCM > 1 || m.APNs < 0 || m.APNs > 1:
		return fmt.Errorf("mix: fcm=%v, apns=%v: between 0 and 1 device per student each", m.FCM, m.APNs)
	case m.WebPush+m.FCM+m.APNs == 0:
		return errors.New("mix: no devices at all")
	}
	if c.PushWorkers == 0 {
		c.PushWorkers = 1
	}
	if c.PushWorkers < 1 || c.PushWorkers > 64 {
		return fmt.Errorf("push-workers must be between 1 and 64, got %d", c.PushWorkers)
	}
	if c.Latency == 0 {
		c.Latency = 230 * time.Millisecond
	}
	if c.PushPort == 0 {
		c.PushPort = 8443
	}
	if c.Timeout == 0 {
		c.Timeout = 15 * time.Minute
	}
	if c.LogDir == "" {
		c.LogDir = filepath.Join(".local", "log", "run-"+time.Now().Format("20060102-150405"))
	}
	if c.Say == nil {
		c.Say = func(string) {}
	}
	if c.Events == 0 {
		c.Events = 1
	}
	if c.Events < 1 || c.Events > 1000 {
		return fmt.Errorf("events must be between 1 and 1000, got %d", c.Events)
	}
	if c.CryptoMessages == 0 {
		c.CryptoMessages = 20_000
	}
	if c.Roster {
		// The roster's rows are the run's, not a seed to reuse.
		c.Scratch = true
	}
	if p := c.Preferences; p != nil {
		switch {
		case p.Capped > 0:
			return errors.New("preferences: a capped share is not measured end to end (the cap needs an earlier hour's pushes); `notify bench fanout --preferences` measures it")
		case c.Roster || c.CountersOff || c.Browser != nil:
			return errors.New("preferences: not with the roster, --counters-off or the browser, whose accounting expects every device's push")
		}
	}
	return nil
}

// Published is what a Config.Published hook needs to watch the event.
type Published struct {
	EventID string
	// APIAddr is the API's host:port; Token the course instructor's bearer
	// token (the one caller GET /v1/events/{id} answers).
	APIAddr, Token string
	// DatabaseURL is the run's own database.
	DatabaseURL string
	// PublishedAt is when the publish request was sent.
	PublishedAt time.Time
	// Mock is the run's mock push service (its Stats: what it received).
	Mock *benchkit.Mock
}

// Snapshot is the pipeline's progress at one moment.
type Snapshot struct {
	Elapsed       time.Duration `json:"elapsed_ns"`
	Users         int64         `json:"users"`
	Subscriptions int64         `json:"subscriptions"`
	Published     bool          `json:"published"`
	Notified      int64         `json:"notified"`
	Pushed        int64         `json:"pushed"` // requests the push service received, every platform
	// PushedByPlatform is Pushed per platform (webpush, fcm, apns).
	PushedByPlatform map[string]int64 `json:"pushed_by_platform"`
	Recorded         int64            `json:"recorded"`
}

// Result is what a run measured. Times are seconds from the publish
// request unless named otherwise.
type Result struct {
	Users int64 `json:"users"`
	// Subscriptions is the devices of every platform; Platforms has each
	// platform's count and accounting.
	Subscriptions         int64              `json:"subscriptions"`
	Mix                   Mix                `json:"mix"`
	Platforms             []PlatformResult   `json:"platforms"`
	PushWorkers           int                `json:"push_workers"`
	LatencyMS             float64            `json:"latency_ms"`
	EventID               string             `json:"event_id"`
	PublishResponseMS     float64            `json:"publish_response_ms"`
	CommitToFirstNotified float64            `json:"commit_to_first_notification_seconds"`
	FanoutSeconds         float64            `json:"fanout_seconds"`
	FirstPushSeconds      float64            `json:"first_push_seconds"`
	PushSeconds           float64            `json:"push_seconds"`
	TotalSeconds          float64            `json:"total_seconds"`
	SendsPerSecond        float64            `json:"sends_per_second"`
	Notified              int64              `json:"notified"`
	Delivered             int64              `json:"delivered"`
	Gone                  int64              `json:"gone"`
	Failed                int64              `json:"failed"`
	Lost                  int64              `json:"lost"`
	MockReceived          int64              `json:"mock_received"`
	MockUnique            int64              `json:"mock_unique"`
	Duplicates            int64              `json:"duplicates"`
	DecryptFailures       int64              `json:"decrypt_failures"`
	CPUSeconds            map[string]float64 `json:"cpu_seconds"`
	PushCPUSeconds        float64            `json:"push_cpu_seconds"`
	// MachineCPUSeconds is the CPU time all processes on the machine used
	// from the publish to the last outcome (Postgres, Kafka, every service,
	// the mock); MachineBusyPercent relates it to what the cores offered.
	MachineCPUSeconds  float64           `json:"machine_cpu_seconds"`
	MachineBusyPercent float64           `json:"machine_busy_percent"`
	SeedSeconds        float64           `json:"seed_seconds,omitempty"`
	Database           string            `json:"database"`
	LogDir             string            `json:"log_dir"`
	APIAddr            string            `json:"api_addr"`
	Metrics            map[string]string `json:"metrics"`
	Browser            *BrowserResult    `json:"browser,omitempty"`
	// CPUSecondsByProcess is the CPU each process used from the publish
	// to the last outcome: the run's services by name (cdc, fanout,
	// push-N, api), the run database's Postgres processes (postgres: every
	// backend and the walsender) and the Kafka broker (kafka), when they
	// run on this machine. The mock push service stands for the push
	// provider and is apart, in MockCPUSeconds; WalsenderCPUSeconds is the
	// run's walsender, a part of postgres; PostgresServerCPUSeconds the
	// server's whole process tree (WAL writer, checkpointer, and every
	// other database's backends on a shared server). ObserverCPUSeconds
	// is the benchmark's own queries on the run database (its progress
	// and counts), which postgres leaves out.
	CPUSecondsByProcess      map[string]float64 `json:"cpu_seconds_by_process"`
	MockCPUSeconds           float64            `json:"mock_cpu_seconds"`
	WalsenderCPUSeconds      float64            `json:"walsender_cpu_seconds"`
	ObserverCPUSeconds       float64            `json:"observer_cpu_seconds"`
	PostgresServerCPUSeconds float64            `json:"postgres_server_cpu_seconds"`
	// PipelineCPUSeconds is the sum of CPUSecondsByProcess, and
	// PipelineCPUUSPerDelivery that per final outcome, in µs.
	PipelineCPUSeconds       float64 `json:"pipeline_cpu_seconds"`
	PipelineCPUUSPerDelivery float64 `json:"pipeline_cpu_us_per_delivery"`
	// CountersOff: the run had Config.CountersOff (an A/B of the counters).
	CountersOff bool `json:"counters_off,omitempty"`
	// CryptoOnlyUSPerMessage is the Web Push engine's CPU per message
	// with no network (encryption + VAPID header, pushbench's reference),
	// measured in this process right after the run over CryptoOnlyMessages
	// messages; PipelineToCrypto is PipelineCPUUSPerDelivery over it.
	CryptoOnlyUSPerMessage float64 `json:"crypto_only_us_per_message"`
	CryptoOnlyMessages     int     `json:"crypto_only_messages"`
	PipelineToCrypto       float64 `json:"pipeline_to_crypto_ratio"`
	// LoadAvg is the machine's load average when the run started.
	LoadAvg string `json:"load_average_at_start"`
	// Events is each event's figures when the run published more than one.
	Events []EventResult `json:"events,omitempty"`
	// Roster is set when the students came from the roster's topics
	// (Config.Roster); RosterSeconds is from the first record written to
	// the last enrollment applied.
	Roster        bool    `json:"roster,omitempty"`
	RosterSeconds float64 `json:"roster_seconds,omitempty"`
	// Preferences is Config.Preferences' shares (seed.ParsePreferences'
	// form; empty without), Seeded the students of each group.
	// HeldStudents and HeldDevices are the (last) event's students whose
	// push the fan-out held back and their devices, neither sent nor lost
	// in the run. USPerDelivered is TotalSeconds per delivered push, in µs:
	// what a run with preferences, which delivers fewer, is compared by.
	Preferences    string                 `json:"preferences,omitempty"`
	Seeded         *seed.PreferenceCounts `json:"seeded_preferences,omitempty"`
	HeldStudents   int64                  `json:"held_students"`
	HeldDevices    int64                  `json:"held_devices"`
	USPerDelivered float64                `json:"total_us_per_delivered"`
	// heldBy is HeldDevices per platform.
	heldBy map[string]int64
}

// dropStaleRunSlots drops the replication slots of earlier runs on this
// run database that nothing is streaming from. A run killed before its
// deferred clean-up (kill -9, a closed terminal) leaves its slot behind, and
// an inactive logical slot pins WAL for good — 4.9 GB on the development
// server before this existed. The database belongs to the harness, and a
// live run's slot is active, so only leftovers match.
func dropStaleRunSlots(ctx context.Context, pool *pgxpool.Pool, say func(string)) error {
	rows, err := pool.Query(ctx, `SELECT slot_name FROM pg_replication_slots
		WHERE database = current_database() AND NOT active AND slot_name LIKE 'notify\_run\_%'`)
	if err != nil {
		return fmt.Errorf("look up stale slots: %w", err)
	}
	stale, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("look up stale slots: %w", err)
	}
	for _, slot := range stale {
		if _, err := pool.Exec(ctx, `SELECT pg_drop_replication_slot($1) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active`, slot); err != nil {
			return fmt.Errorf("drop stale slot %s: %w", slot, err)
		}
		say("dropped replication slot " + slot + ", left behind by an interrupted earlier run (it was holding WAL)")
	}
	return nil
}

// Run executes one end-to-end run. It leaves no process, slot or topic
// behind, also when ctx is cancelled (Ctrl-C).
func Run(ctx context.Context, cfg Config) (res Result, err error) {
	if err := cfg.defaults(); err != nil {
		return res, err
	}
	if err := os.MkdirAll(cfg.LogDir, 0o755); err != nil {
		return res, fmt.Errorf("log dir: %w", err)
	}
	res.Users, res.PushWorkers, res.LatencyMS, res.LogDir = int64(cfg.Users), cfg.PushWorkers, float64(cfg.Latency)/1e6, cfg.LogDir
	res.Mix = *cfg.Mix
	res.LoadAvg = benchkit.LoadAvg()
	r := &run{cfg: cfg, res: &res, id: benchkit.Suffix()}
	defer r.cleanUp()
	if err := r.prepare(ctx); err != nil {
		return res, err
	}
	if err := r.start(ctx); err != nil {
		return res, err
	}
	if err := r.publish(ctx); err != nil {
		return res, err
	}
	if err := r.measure(ctx); err != nil {
		return res, err
	}
	return res, nil
}

// run is one Run's state, shared by its steps: prepare (database and
// topics), start (every service and, if asked, the browser), publish (the
// events, each watched until its last outcome) and measure (the totals).
type run struct {
	cfg Config
	res *Result
	id  string // names the run's topics and slot

	dbName, dbURL          string
	pool                   *pgxpool.Pool
	courseID, instructorID string
	topics                 *benchkit.Topics
	slot                   string

	env     []string // every service's environment
	devs    devices
	wsAddr  string // the mock's WebSocket for the browser; empty without one
	procs   []*benchkit.Proc
	mock    *benchkit.Mock
	browser *firefox.Browser

	// undo are the clean-ups of what the steps set up, run last first.
	undo []func()
}

func (r *run) onCleanUp(f func()) { r.undo = append(r.undo, f) }

func (r *run) cleanUp() {
	for i := len(r.undo) - 1; i >= 0; i-- {
		r.undo[i]()
	}
}

// prepare readies the database — seeded once per (users, seed, mix), run
// tables emptied, or a scratch database when the run leaves a history
// behind — and creates the run's topics under a fresh prefix.
func (r *run) prepare(ctx context.Context) error {
	cfg, res := r.cfg, r.res
	r.dbName = databaseName(cfg.Users, cfg.Seed, *cfg.Mix)
	var subs int64
	var seeded float64
	if cfg.Scratch {
		db, pool, n, s, err := prepareScratch(ctx, cfg)
		if err != nil {
			return err
		}
		r.pool, subs, seeded = pool, n, s
		r.dbName, r.dbURL = db.Name, db.URL
		r.onCleanUp(func() {
			pool.Close()
			if err := db.Drop(); err != nil {
				cfg.Say(err.Error())
			}
		})
	} else {
		pool, url, n, s, err := prepareDatabase(ctx, cfg, r.dbName)
		if err != nil {
			return err
		}
		r.pool, r.dbURL, subs, seeded = pool, url, n, s
		r.onCleanUp(pool.Close)
	}
	res.Database = r.dbName
	res.Subscriptions, res.SeedSeconds = subs, seeded
	if err := setCounters(ctx, r.pool, !cfg.CountersOff); err != nil {
		return err
	}
	res.CountersOff = cfg.CountersOff
	if err := dropStaleRunSlots(ctx, r.pool, cfg.Say); err != nil {
		return err
	}
	if !cfg.Roster {
		// With Roster the course arrives with the roster (startRoster).
		if err := r.readCourse(ctx); err != nil {
			return err
		}
		if err := r.applyPreferences(ctx); err != nil {
			return err
		}
	}
	topics, err := benchkit.CreateTopics(ctx, cfg.Brokers, streams.DefaultTopics().WithPrefix("run"+r.id+"."), "pipeline")
	if err != nil {
		return err
	}
	r.topics = topics
	r.onCleanUp(topics.Delete)
	return nil
}

// applyPreferences writes Config.Preferences' shares, or leaves the run
// database without preferences (a seed is shared by runs with and
// without them).
func (r *run) applyPreferences(ctx context.Context) error {
	if _, err := r.pool.Exec(ctx, "TRUNCATE user_preferences"); err != nil {
		return fmt.Errorf("remove earlier preferences: %w", err)
	}
	if p := r.cfg.Preferences; p != nil {
		p.Now, p.QuietEndsIn = time.Now(), time.Hour
		c, err := seed.ApplyPreferences(ctx, r.pool, r.courseID, *p)
		if err != nil {
			return err
		}
		r.res.Preferences, r.res.Seeded = p.String(), &c
		r.cfg.Say(fmt.Sprintf("preferences %s: %d muted, %d quiet until %s, %d with type rules", p, c.Muted, c.Quiet, c.QuietEnd.Format(time.TimeOnly), c.TypeRules))
	}
	if _, err := r.pool.Exec(ctx, "VACUUM ANALYZE user_preferences"); err != nil {
		return fmt.Errorf("vacuum user_preferences: %w", err)
	}
	return nil
}

func (r *run) readCourse(ctx context.Context) error {
	if err := r.pool.QueryRow(ctx, "SELECT id::text, instructor_id::text FROM courses LIMIT 1").Scan(&r.courseID, &r.instructorID); err != nil {
		return fmt.Errorf("read seeded course: %w", err)
	}
	return nil
}

// start runs the mock and every service, each its own process, waits
// until they are ready, and subscribes the browser if there is one.
func (r *run) start(ctx context.Context) error {
	cfg, res := r.cfg, r.res
	r.slot = "notify_run_" + r.id
	// The mock writes its certificate here when it starts (below); the
	// push workers trust it.
	certFile := filepath.Join(cfg.LogDir, "pushmock-cert.pem")
	apiPort, err := benchkit.FreePort()
	if err != nil {
		return err
	}
	res.APIAddr = fmt.Sprintf("127.0.0.1:%d", apiPort)
	r.env = append([]string{
		"NOTIFY_DATABASE_URL=" + r.dbURL,
		"NOTIFY_KAFKA_BROKERS=" + strings.Join(cfg.Brokers, ","),
		"NOTIFY_TOPIC_PREFIX=" + r.topics.Prefix,
		"NOTIFY_PUSH_CA_FILE=" + certFile,
		"NOTIFY_LOG_FORMAT=json",
		// Dev mode: the public dev secrets and the loopback mock; every
		// service here listens on 127.0.0.1.
		"NOTIFY_DEV=1",
	}, cfg.ExtraEnv...)
	if cfg.Roster {
		r.env = append(r.env, ids.EnvNamespace+"="+RosterNamespace)
	}
	// The mock's APNs side and the push workers' APNs client share the dev
	// key made here (the mock reads it from these variables too).
	r.devs = cfg.Mix.devices(cfg.Users, cfg.Seed)
	if r.devs.apns > 0 {
		k, _, err := apns.EnsureDevKey(filepath.Join(cfg.LogDir, "apns"))
		if err != nil {
			return err
		}
		r.env = append(r.env, "NOTIFY_APNS_KEY_FILE="+k.KeyFile, "NOTIFY_APNS_KEY_ID="+k.KeyID,
			"NOTIFY_APNS_TEAM_ID="+k.TeamID, "NOTIFY_APNS_TOPIC="+k.Topic)
	}
	r.onCleanUp(r.stopProcs)
	if err := r.startMock(ctx); err != nil {
		return err
	}
	// Each service serves /metrics on its own free port, listed in the result.
	res.Metrics = map[string]string{}
	if cfg.Roster {
		if err := r.startRoster(ctx); err != nil {
			return err
		}
	}
	if err := r.startServices(); err != nil {
		return err
	}
	if err := r.waitReady(ctx); err != nil {
		return err
	}
	if cfg.Browser != nil {
		// A real browser, subscribed as one of the students.
		b, student, endpoint, err := startBrowser(ctx, cfg, r.env, r.pool, r.courseID, res.APIAddr, r.wsAddr)
		if err != nil {
			return err
		}
		r.onCleanUp(func() { _ = b.Close() })
		r.browser = b
		res.Browser = &BrowserResult{Student: student, Endpoint: endpoint}
		res.Subscriptions++ // the browser's, beside the seeded ones
	}
	if cfg.Ready != nil {
		if err := cfg.Ready(cfg.LogDir, res.Metrics); err != nil {
			return err
		}
	}
	return nil
}

// stopProcs stops the processes, last started first, and drops the slot.
func (r *run) stopProcs() {
	if r.cfg.Stopping != nil {
		r.cfg.Stopping()
	}
	for i := len(r.procs) - 1; i >= 0; i-- {
		_ = r.procs[i].Stop(30 * time.Second)
	}
	// The slot pins WAL until dropped; the walsender may still hold it
	// for a moment after the connector's exit.
	dctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := benchkit.DropSlots(dctx, r.pool, r.dbName, r.slot); err != nil {
		r.cfg.Say(err.Error())
	}
}

// startProc starts one notify process, its service's own flags after the
// harness's: a flag given twice takes the later value.
func (r *run) startProc(name string, args ...string) error {
	r.cfg.Say("starting " + name)
	args = append(args, r.cfg.ServiceFlags[args[1]]...)
	p, err := benchkit.StartProc(r.cfg.Binary, r.cfg.LogDir, name, r.env, args...)
	if err != nil {
		return err
	}
	r.procs = append(r.procs, p)
	return nil
}

// metricsAddr picks a free port for name's /metrics and lists it in the
// result.
func (r *run) metricsAddr(name string) (string, error) {
	port, err := benchkit.FreePort()
	if err != nil {
		return "", err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	r.res.Metrics[name] = "http://" + addr + "/metrics"
	return addr, nil
}

// startMock starts the push services' mock and points the push workers'
// FCM and APNs clients at it.
func (r *run) startMock(ctx context.Context) error {
	cfg := r.cfg
	cfg.Say("starting pushmock")
	if cfg.Browser != nil {
		port, err := benchkit.FreePort()
		if err != nil {
			return err
		}
		r.wsAddr = fmt.Sprintf("127.0.0.1:%d", port)
	}
	mock, err := benchkit.StartMock(ctx, benchkit.MockConfig{Binary: cfg.Binary, Dir: cfg.LogDir, Port: cfg.PushPort,
		Latency: cfg.Latency, Seed: cfg.Seed, DecryptSample: 0.01, Env: r.env, WebSocketAddr: r.wsAddr, Flags: cfg.MockFlags})
	if err != nil {
		return err
	}
	r.mock = mock
	r.procs = append(r.procs, mock.Proc)
	// The push workers send FCM with the credentials the mock wrote (its
	// token_uri is the mock's) and both app platforms to the mock.
	if r.devs.fcm > 0 {
		r.env = append(r.env, "NOTIFY_FCM_CREDENTIALS="+mock.FCMCredentialsFile, "NOTIFY_FCM_ENDPOINT="+mock.URL)
	}
	if r.devs.apns > 0 {
		r.env = append(r.env, "NOTIFY_APNS_ENDPOINT="+mock.URL)
	}
	return nil
}

// startRoster brings the students from the platform's change stream: it
// writes the platform's snapshot as Debezium records and runs the roster
// service until it has applied them.
func (r *run) startRoster(ctx context.Context) error {
	cfg, res := r.cfg, r.res
	delTopics, err := createRosterTopics(ctx, r.topics.Admin, r.topics.Topics)
	if err != nil {
		return err
	}
	r.onCleanUp(delTopics)
	users, _, _ := rosterTopics(r.topics.Prefix)
	cfg.Say(fmt.Sprintf("writing the platform's snapshot as Debezium records: %d users, 1 course, %d enrollments (%s…)", cfg.Users+1, cfg.Users, users))
	t0 := time.Now()
	if err := produceRoster(ctx, cfg.Brokers, r.topics.Prefix, cfg.Users); err != nil {
		return fmt.Errorf("write the roster records: %w", err)
	}
	raddr, err := r.metricsAddr("roster")
	if err != nil {
		return err
	}
	if err := r.startProc("roster", append(rosterArgs(r.topics.Prefix), "--metrics-addr", raddr)...); err != nil {
		return err
	}
	if err := waitRoster(ctx, cfg, r.pool, r.procs); err != nil {
		return err
	}
	res.Roster, res.RosterSeconds = true, time.Since(t0).Seconds()
	cfg.Say(fmt.Sprintf("roster: %d students and their enrollments applied from the topics in %.1f s", cfg.Users, res.RosterSeconds))
	// As the seed does: the first event must not pay for the fresh
	// rows' hint bits.
	if _, err := r.pool.Exec(ctx, "VACUUM (ANALYZE) users, enrollments"); err != nil {
		return fmt.Errorf("vacuum the roster's tables: %w", err)
	}
	return r.readCourse(ctx)
}

// startServices starts the connector, the fan-out, the push workers and
// the API.
func (r *run) startServices() error {
	addr, err := r.metricsAddr("cdc")
	if err != nil {
		return err
	}
	if err := r.startProc("cdc", "run", "cdc", "--slot", r.slot, "--publication", "notify_outbox", "--metrics-addr", addr); err != nil {
		return err
	}
	if addr, err = r.metricsAddr("fanout"); err != nil {
		return err
	}
	if err := r.startProc("fanout", "run", "fanout", "--metrics-addr", addr); err != nil {
		return err
	}
	for i := 0; i < r.cfg.PushWorkers; i++ {
		name := fmt.Sprintf("push-%d", i+1)
		if addr, err = r.metricsAddr(name); err != nil {
			return err
		}
		if err := r.startProc(name, "run", "push", "--metrics-addr", addr, "--worker-id", name); err != nil {
			return err
		}
	}
	if addr, err = r.metricsAddr("api"); err != nil {
		return err
	}
	return r.startProc("api", "run", "api", "--addr", r.res.APIAddr, "--metrics-addr", addr)
}

// waitReady waits for the API's readiness, the connector's active slot
// and every consumer group's members.
func (r *run) waitReady(ctx context.Context) error {
	r.cfg.Say("waiting for every service to be ready")
	if err := benchkit.WaitFor(ctx, "the api", 60*time.Second, r.procs, func(ctx context.Context) (bool, error) {
		return httpOK(ctx, "http://"+r.res.APIAddr+"/readyz")
	}); err != nil {
		return err
	}
	if err := benchkit.WaitFor(ctx, "the CDC connector's slot", 60*time.Second, r.procs, func(ctx context.Context) (bool, error) {
		var active bool
		err := r.pool.QueryRow(ctx, "SELECT coalesce((SELECT active FROM pg_replication_slots WHERE slot_name = $1), false)", r.slot).Scan(&active)
		return active, err
	}); err != nil {
		return err
	}
	for _, g := range []struct {
		group   string
		members int
	}{{streams.GroupFanoutPlanner, 1}, {streams.GroupFanout, 1}, {streams.GroupPush, r.cfg.PushWorkers}, {streams.GroupPushLane, r.cfg.PushWorkers}} {
		name := r.topics.Group(g.group)
		if err := benchkit.WaitFor(ctx, "consumer group "+name, 60*time.Second, r.procs, func(ctx context.Context) (bool, error) {
			d, err := r.topics.Admin.DescribeGroups(ctx, name)
			if err != nil {
				return false, err
			}
			gd := d[name]
			return gd.State == "Stable" && len(gd.Members) >= g.members, nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// publish publishes the events through the API, as an instructor would,
// one after another: each is watched until its last outcome is recorded
// before the next is published. With NoBroadcast it runs During instead.
func (r *run) publish(ctx context.Context) error {
	cfg, res := r.cfg, r.res
	token, err := exec.CommandContext(ctx, cfg.Binary, "token", "--dev", "--user", r.instructorID).Output()
	if err != nil {
		return fmt.Errorf("mint token: %w", err)
	}
	probe := newCPUProbe(ctx, r.pool, cfg.Brokers, r.procs)
	if cfg.NoBroadcast {
		if cfg.During == nil {
			return errors.New("pipeline: NoBroadcast needs During")
		}
		return cfg.During(ctx, Live{Topics: r.topics, Users: res.Users, Subscriptions: res.Subscriptions,
			PushWorkers: cfg.PushWorkers, APIAddr: res.APIAddr, DatabaseURL: r.dbURL, Binary: cfg.Binary, Mock: r.mock, Metrics: res.Metrics})
	}
	var pushed int64 // the mock's requests before the event
	for i := range cfg.Events {
		if cfg.Events > 1 {
			cfg.Say(fmt.Sprintf("event %d of %d", i+1, cfg.Events))
		}
		ev, err := publishEvent(ctx, cfg, eventRun{pool: r.pool, mock: r.mock, procs: r.procs, topics: r.topics, probe: probe,
			token: strings.TrimSpace(string(token)), courseID: r.courseID, runID: r.id, dbURL: r.dbURL, browser: r.browser, pushed: pushed}, i, res)
		if err != nil {
			return err
		}
		pushed = ev.pushedAfter
		if cfg.Events > 1 && cfg.EventCryptoMessages > 0 {
			// After the event's last outcome and before the next publish:
			// outside every CPU window of the events.
			n := min(cfg.EventCryptoMessages, int(max(res.Subscriptions, 1)))
			us, err := cryptoOnlyUS(n, cfg.Seed, r.mock.URL)
			if err != nil {
				return fmt.Errorf("event %d: crypto-only reference: %w", i+1, err)
			}
			ev.CryptoOnlyUSPerMessage = us
			if us > 0 {
				ev.MachineToCrypto = ev.MachineCPUUSPerDelivery / us
			}
		}
		if cfg.Events > 1 {
			res.Events = append(res.Events, ev.EventResult)
		}
		if cfg.EventDone != nil {
			cfg.EventDone(ev.EventResult)
		}
	}
	return nil
}

// measure fills in the totals: what the mock received, every process's
// CPU and, if asked, the Web Push crypto's own cost on this machine.
func (r *run) measure(ctx context.Context) error {
	cfg, res := r.cfg, r.res
	st, err := r.mock.Stats(ctx)
	if err != nil {
		return fmt.Errorf("mock stats: %w", err)
	}
	res.MockReceived, res.MockUnique, res.Duplicates, res.DecryptFailures = st.Received, st.Unique, st.Duplicates, st.DecryptFailures
	for i := range res.Platforms {
		p := &res.Platforms[i]
		switch p.Platform {
		case PlatformWebPush:
			p.MockReceived, p.MockUnique, p.Duplicates = st.Received, st.Unique, st.Duplicates
		case PlatformFCM:
			p.MockReceived, p.MockUnique, p.Duplicates = st.FCM.Received, st.FCM.Unique, st.FCM.Duplicates
		case PlatformAPNs:
			p.MockReceived, p.MockUnique, p.Duplicates = st.APNs.Received, st.APNs.Unique, st.APNs.Duplicates
		}
	}
	// Every platform's, as the totals of the other counts are.
	res.MockReceived += st.FCM.Received + st.APNs.Received
	res.MockUnique += st.FCM.Unique + st.APNs.Unique
	res.Duplicates += st.FCM.Duplicates + st.APNs.Duplicates
	res.CPUSeconds = map[string]float64{}
	for _, p := range r.procs {
		c := p.CPUSeconds()
		res.CPUSeconds[p.Name] = c
		if strings.HasPrefix(p.Name, "push-") {
			res.PushCPUSeconds += c
		}
	}
	if cfg.CryptoMessages > 0 {
		// The engine's own floor, measured on this machine now: the same
		// encryption and VAPID header the push workers made, no network.
		n := min(cfg.CryptoMessages, int(max(res.Subscriptions, 1)))
		cfg.Say(fmt.Sprintf("measuring the Web Push crypto alone (%d messages in this process)", n))
		us, err := cryptoOnlyUS(n, cfg.Seed, r.mock.URL)
		if err != nil {
			return fmt.Errorf("crypto-only reference: %w", err)
		}
		res.CryptoOnlyMessages, res.CryptoOnlyUSPerMessage = n, us
		if us > 0 && res.PipelineCPUUSPerDelivery > 0 {
			res.PipelineToCrypto = res.PipelineCPUUSPerDelivery / us
		}
	}
	return nil
}

// Print writes the result table, beside the seed write-up's figures.
func Print(w io.Writer, r Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "stage\tmeasured\tseed write-up\n")
	fmt.Fprintf(tw, "students / devices\t%d / %d (%s)\t1,000,000 / 1,097,488 Web Push\n", r.Users, r.Subscriptions, r.Mix)
	if r.Roster {
		fmt.Fprintf(tw, "roster (Debezium records → notify run roster)\t%d students applied in %.1f s\t\n", r.Users, r.RosterSeconds)
	}
	fmt.Fprintf(tw, "publish response\t%.1f ms\t420 ms\n", r.PublishResponseMS)
	fmt.Fprintf(tw, "commit → first notification\t%.2f s\t\n", r.CommitToFirstNotified)
	fmt.Fprintf(tw, "fan-out (all notifications)\t%.2f s\t15.00 s\n", r.FanoutSeconds)
	fmt.Fprintf(tw, "first push recorded\t%.2f s\t\n", r.FirstPushSeconds)
	fmt.Fprintf(tw, "push (first → last)\t%.2f s\t\n", r.PushSeconds)
	fmt.Fprintf(tw, "total (publish → last push)\t%.2f s\t11 min 53 s\n", r.TotalSeconds)
	fmt.Fprintf(tw, "sends/s\t%.0f\t\n", r.SendsPerSecond)
	fmt.Fprintf(tw, "push CPU seconds\t%.1f\t\n", r.PushCPUSeconds)
	fmt.Fprintf(tw, "machine CPU busy\t%.0f%% (%.0f CPU-s)\t\n", r.MachineBusyPercent, r.MachineCPUSeconds)
	if r.Preferences != "" {
		fmt.Fprintf(tw, "held back by preferences (%s)\t%d students, %d devices (muted or deferred past the run)\t\n", r.Preferences, r.HeldStudents, r.HeldDevices)
		fmt.Fprintf(tw, "publish → last push per delivered push\t%.1f µs\t\n", r.USPerDelivered)
	}
	fmt.Fprintf(tw, "delivered / gone / failed\t%d / %d / %d\t\n", r.Delivered, r.Gone, r.Failed)
	fmt.Fprintf(tw, "lost\t%d\t0\n", r.Lost)
	fmt.Fprintf(tw, "duplicates (mock)\t%d\t\n", r.Duplicates)
	fmt.Fprintf(tw, "decrypt failures (sampled)\t%d\t\n", r.DecryptFailures)
	if r.CountersOff {
		fmt.Fprintf(tw, "event counters\toff (--counters-off A/B run)\t\n")
	}
	tw.Flush()
	if len(r.Platforms) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "platform\tdevices\tdelivered\tgone\tfailed\tlost\tmock unique\tduplicates (mock)\t\n")
		for _, p := range r.Platforms {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", p.Platform, p.Devices, p.Delivered, p.Gone, p.Failed, p.Lost, p.MockUnique, p.Duplicates)
		}
		tw.Flush()
	}
	fmt.Fprintf(w, "\nCPU seconds per process (whole life):")
	for _, name := range slices.Sorted(maps.Keys(r.CPUSeconds)) {
		fmt.Fprintf(w, "  %s %.1f", name, r.CPUSeconds[name])
	}
	fmt.Fprintln(w)
	PrintCPU(w, r)
	if b := r.Browser; b != nil {
		fmt.Fprintf(w, "\nFirefox (headless, student %s) received, decrypted by its own RFC 8291 code, %.2f s after the publish:\n  %s\n", b.Student, b.ShownAfterSeconds, b.Raw)
		fmt.Fprintf(w, "  shown as %d notification(s) tagged %s", b.Notifications, b.EventID)
		if b.Screenshot != "" {
			fmt.Fprintf(w, "; screenshot of the page: %s", b.Screenshot)
		}
		fmt.Fprintln(w)
	}
}

// watch polls until event res.EventID has every outcome; pushed0 is the
// mock's requests before the event.
func watch(ctx context.Context, cfg Config, pool *pgxpool.Pool, mock *benchkit.Mock, procs []*benchkit.Proc, res *Result, t0 time.Time, pushed0 int64, progress chan<- Snapshot) error {
	deadline := time.Now().Add(cfg.Timeout)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var lastDB time.Time
	var snap Snapshot
	snap.Users, snap.Subscriptions, snap.Published = res.Users, res.Subscriptions, true
	firstNotified := false
	// With preferences the devices expected are known once the fan-out
	// has written its holds: at its end.
	heldKnown := cfg.Preferences == nil
	res.HeldStudents, res.HeldDevices, res.heldBy = 0, 0, nil
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		if err := benchkit.ExitedError(procs, "during the run"); err != nil {
			return err
		}
		if err := pool.QueryRow(ctx, "SELECT coalesce(sum(notified), 0) FROM fanout_ranges WHERE event_id = $1", res.EventID).Scan(&snap.Notified); err != nil {
			return fmt.Errorf("progress: %w", err)
		}
		if !firstNotified && snap.Notified > 0 {
			firstNotified = true
			res.CommitToFirstNotified = time.Since(t0).Seconds()
		}
		if st, err := mock.Stats(ctx); err == nil {
			snap.Pushed = st.Received + st.FCM.Received + st.APNs.Received - pushed0
			snap.PushedByPlatform = map[string]int64{PlatformWebPush: st.Received, PlatformFCM: st.FCM.Received, PlatformAPNs: st.APNs.Received}
		}
		// The event's counters: a few rows (measure reads the deliveries
		// themselves once at the end).
		switch {
		case cfg.CountersOff && snap.Pushed >= res.Subscriptions:
			// No counters: the rows themselves, once the mock has every push.
			if err := pool.QueryRow(ctx, "SELECT count(*) FROM push_deliveries WHERE event_id = $1 AND status <> 'retrying'", res.EventID).Scan(&snap.Recorded); err != nil {
				return fmt.Errorf("progress: %w", err)
			}
		case cfg.CountersOff:
		case time.Since(lastDB) > 250*time.Millisecond || snap.Pushed >= res.Subscriptions:
			lastDB = time.Now()
			if err := pool.QueryRow(ctx, "SELECT coalesce(sum(delivered + gone + failed), 0) FROM event_counters WHERE event_id = $1", res.EventID).Scan(&snap.Recorded); err != nil {
				return fmt.Errorf("progress: %w", err)
			}
		}
		snap.Elapsed = time.Since(t0)
		if cfg.Progress != nil {
			cfg.Progress(snap)
		}
		if progress != nil {
			select {
			case progress <- snap:
			default:
			}
		}
		if !heldKnown && snap.Notified >= res.Users {
			var err error
			if heldKnown, err = loadHeld(ctx, pool, res); err != nil {
				return err
			}
			snap.Subscriptions = res.Subscriptions - res.HeldDevices
		}
		if heldKnown && snap.Recorded >= res.Subscriptions-res.HeldDevices && snap.Notified >= res.Users {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s: notified %d/%d, recorded %d/%d pushes (logs in %s)",
				cfg.Timeout, snap.Notified, res.Users, snap.Recorded, res.Subscriptions, cfg.LogDir)
		}
	}
}

// loadHeld reads, once event res.EventID's fan-out has finished, the
// students whose push it held back and their devices per platform into
// res. It reports false while the fan-out runs.
func loadHeld(ctx context.Context, pool *pgxpool.Pool, res *Result) (bool, error) {
	var finished bool
	if err := pool.QueryRow(ctx, "SELECT finished_at IS NOT NULL FROM fanout_runs WHERE event_id = $1", res.EventID).Scan(&finished); err != nil {
		return false, fmt.Errorf("progress: the fan-out's end: %w", err)
	}
	if !finished {
		return false, nil
	}
	if err := pool.QueryRow(ctx, "SELECT coalesce(sum(students), 0) FROM push_hold_sets WHERE event_id = $1", res.EventID).Scan(&res.HeldStudents); err != nil {
		return false, fmt.Errorf("the event's holds: %w", err)
	}
	rows, err := pool.Query(ctx, `SELECT s.platform, count(*) FROM push_hold_sets h CROSS JOIN LATERAL unnest(h.user_ids) AS u(id)
		JOIN push_subscriptions s ON s.user_id = u.id WHERE h.event_id = $1 GROUP BY s.platform`, res.EventID)
	if err != nil {
		return false, fmt.Errorf("the held students' devices: %w", err)
	}
	res.heldBy = map[string]int64{}
	var platform string
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&platform, &n}, func() error {
		res.heldBy[platform] += n
		res.HeldDevices += n
		return nil
	}); err != nil {
		return false, fmt.Errorf("the held students' devices: %w", err)
	}
	return true, nil
}

func measure(ctx context.Context, pool *pgxpool.Pool, res *Result, devs devices) error {
	var published time.Time
	var fanoutEnd, firstPush, lastPush *time.Time
	err := pool.QueryRow(ctx, `SELECT m.published_at, r.finished_at, coalesce(r.notified, 0)
		FROM materials m JOIN fanout_runs r ON r.material_id = m.id WHERE r.event_id = $1`, res.EventID).
		Scan(&published, &fanoutEnd, &res.Notified)
	if err != nil {
		return fmt.Errorf("read run: %w", err)
	}
	err = pool.QueryRow(ctx, `SELECT min(updated_at), max(updated_at),
		count(*) FILTER (WHERE status = 'delivered'), count(*) FILTER (WHERE status = 'gone'),
		count(*) FILTER (WHERE status = 'failed')
		FROM push_deliveries WHERE event_id = $1`, res.EventID).
		Scan(&firstPush, &lastPush, &res.Delivered, &res.Gone, &res.Failed)
	if err != nil {
		return fmt.Errorf("read deliveries: %w", err)
	}
	if fanoutEnd != nil {
		res.FanoutSeconds = fanoutEnd.Sub(published).Seconds()
	}
	if firstPush != nil && lastPush != nil {
		res.FirstPushSeconds = firstPush.Sub(published).Seconds()
		res.PushSeconds = lastPush.Sub(*firstPush).Seconds()
		res.TotalSeconds = lastPush.Sub(published).Seconds()
		if res.PushSeconds > 0 {
			res.SendsPerSecond = float64(res.Delivered+res.Gone+res.Failed) / res.PushSeconds
		}
	}
	res.Lost = res.Subscriptions - res.HeldDevices - res.Delivered - res.Gone - res.Failed
	res.USPerDelivered = 0
	if res.Delivered > 0 {
		res.USPerDelivered = 1e6 * res.TotalSeconds / float64(res.Delivered)
	}
	// Per platform by the seed's id ranges (push_deliveries outlives a
	// gone device's row, so the ids, not a join, tell the platform).
	// A browser added beside the seed (Config.Browser) is Web Push.
	extra := res.Subscriptions - devs.total()
	ranges := []struct {
		platform string
		lo, hi   int64 // ids lo < id ≤ hi
		n        int64
	}{
		{PlatformWebPush, 0, devs.webpush, devs.webpush + extra},
		{PlatformFCM, devs.webpush, devs.webpush + devs.fcm, devs.fcm},
		{PlatformAPNs, devs.webpush + devs.fcm, devs.total(), devs.apns},
	}
	res.Platforms = res.Platforms[:0]
	for _, r := range ranges {
		if r.n == 0 {
			continue
		}
		p := PlatformResult{Platform: r.platform, Devices: r.n}
		// The browser's subscription, made during the run, has an id past
		// every seeded one: it is Web Push's.
		err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'delivered'), count(*) FILTER (WHERE status = 'gone'),
			count(*) FILTER (WHERE status = 'failed')
			FROM push_deliveries WHERE event_id = $1 AND ((subscription_id > $2 AND subscription_id <= $3) OR ($4 AND subscription_id > $5))`,
			res.EventID, r.lo, r.hi, r.platform == PlatformWebPush && extra > 0, devs.total()).Scan(&p.Delivered, &p.Gone, &p.Failed)
		if err != nil {
			return fmt.Errorf("read %s deliveries: %w", r.platform, err)
		}
		p.Held = res.heldBy[r.platform]
		p.Lost = p.Devices - p.Held - p.Delivered - p.Gone - p.Failed
		res.Platforms = append(res.Platforms, p)
	}
	return nil
}

// prepareDatabase creates, migrates and seeds the run database when needed
// and empties the tables a run writes. It returns the database's URL, the
// subscription count and the seed time (0 when the seed was reused).
func prepareDatabase(ctx context.Context, cfg Config, dbName string) (*pgxpool.Pool, string, int64, float64, error) {
	devs := cfg.Mix.devices(cfg.Users, cfg.Seed)
	want := devs.total()
	db, created, err := benchkit.OpenDatabase(ctx, cfg.DatabaseURL, dbName)
	if err != nil {
		return nil, "", 0, 0, err
	}
	pool, err := benchkit.ObserverPool(ctx, db.URL)
	if err != nil {
		return nil, "", 0, 0, fmt.Errorf("connect to %s: %w", dbName, err)
	}
	if !created {
		// Reuse only a complete seed of the same size and mix.
		var users, subs, fcmN, apnsN int64
		var endpoint string
		qerr := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM enrollments), (SELECT count(*) FROM push_subscriptions),
			(SELECT count(*) FROM push_subscriptions WHERE platform = 'fcm'), (SELECT count(*) FROM push_subscriptions WHERE platform = 'apns'),
			coalesce((SELECT endpoint FROM push_subscriptions WHERE platform = 'webpush' ORDER BY id LIMIT 1), '')`).Scan(&users, &subs, &fcmN, &apnsN, &endpoint)
		// Seeded endpoints name the mock's port: reuse only a seed made
		// for this port.
		if qerr == nil && users == int64(cfg.Users) && subs == want && fcmN == devs.fcm && apnsN == devs.apns &&
			(devs.webpush == 0 || strings.HasPrefix(endpoint, pushBaseURL(cfg))) {
			cfg.Say(fmt.Sprintf("reusing seeded database %s (%d students, %d subscriptions)", dbName, users, subs))
			_, err := pool.Exec(ctx, "TRUNCATE notifications, push_deliveries, push_hold_sets, event_counters, event_platform_counters, event_target_ranges, fanout_ranges, fanout_runs, outbox, materials, api_idempotency")
			if err != nil {
				pool.Close()
				return nil, "", 0, 0, fmt.Errorf("empty run tables: %w", err)
			}
			_, _ = pool.Exec(ctx, "VACUUM ANALYZE notifications, push_deliveries")
			return pool, db.URL, subs, 0, nil
		}
		pool.Close()
		cfg.Say("dropping incomplete database " + dbName)
		if err := db.Drop(); err != nil {
			return nil, "", 0, 0, err
		}
		if db, _, err = benchkit.OpenDatabase(ctx, cfg.DatabaseURL, dbName); err != nil {
			return nil, "", 0, 0, err
		}
		if pool, err = benchkit.ObserverPool(ctx, db.URL); err != nil {
			return nil, "", 0, 0, fmt.Errorf("connect to %s: %w", dbName, err)
		}
	}
	cfg.Say(fmt.Sprintf("seeding %d students, %d Web Push subscriptions, %d FCM and %d APNs devices into %s",
		cfg.Users, devs.webpush, devs.fcm, devs.apns, dbName))
	r, err := seed.Load(ctx, pool, cfg.Mix.seedOptions(cfg.Users, cfg.Seed, pushBaseURL(cfg)))
	if err != nil {
		pool.Close()
		return nil, "", 0, 0, fmt.Errorf("seed: %w", err)
	}
	return pool, db.URL, r.Subscriptions + r.FCMDevices + r.APNsDevices, r.Seconds, nil
}

// prepareScratch creates, migrates and seeds a database of the run's own
// (Config.Scratch); the caller drops it.
func prepareScratch(ctx context.Context, cfg Config) (benchkit.Database, *pgxpool.Pool, int64, float64, error) {
	db, err := benchkit.ScratchDatabase(ctx, cfg.DatabaseURL, "notify_scratch_")
	if err != nil {
		return db, nil, 0, 0, err
	}
	pool, err := benchkit.ObserverPool(ctx, db.URL)
	if err != nil {
		return db, nil, 0, 0, errors.Join(fmt.Errorf("connect to %s: %w", db.Name, err), db.Drop())
	}
	devs := cfg.Mix.devices(cfg.Users, cfg.Seed)
	what := fmt.Sprintf("%d students,", cfg.Users)
	if cfg.Roster {
		what = fmt.Sprintf("the devices of the roster's %d students:", cfg.Users)
	}
	cfg.Say(fmt.Sprintf("seeding %s %d Web Push subscriptions, %d FCM and %d APNs devices into scratch database %s (dropped at the end)",
		what, devs.webpush, devs.fcm, devs.apns, db.Name))
	o := cfg.Mix.seedOptions(cfg.Users, cfg.Seed, pushBaseURL(cfg))
	if cfg.Roster {
		o.DevicesOnly, o.UserID = true, rosterStudent
	}
	r, err := seed.Load(ctx, pool, o)
	if err != nil {
		pool.Close()
		return db, nil, 0, 0, errors.Join(fmt.Errorf("seed: %w", err), db.Drop())
	}
	return db, pool, r.Subscriptions + r.FCMDevices + r.APNsDevices, r.Seconds, nil
}

func pushBaseURL(cfg Config) string { return fmt.Sprintf("https://127.0.0.1:%d/wpush/", cfg.PushPort) }

func httpOK(ctx context.Context, u string) (bool, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, err
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK, nil
}

// startBrowser opens the web app in a real Firefox as one of the course's
// students and waits until the page has subscribed through the API.
func startBrowser(ctx context.Context, cfg Config, env []string, pool *pgxpool.Pool, courseID, apiAddr, wsAddr string) (*firefox.Browser, string, string, error) {
	if cfg.Browser.Wait == 0 {
		cfg.Browser.Wait = 90 * time.Second
	}
	var student string
	if err := pool.QueryRow(ctx, "SELECT user_id::text FROM enrollments WHERE course_id = $1 ORDER BY user_id LIMIT 1", courseID).Scan(&student); err != nil {
		return nil, "", "", fmt.Errorf("pick the browser's student: %w", err)
	}
	cmd := exec.CommandContext(ctx, cfg.Binary, "token", "--dev", "--user", student)
	cmd.Env = env
	token, err := cmd.Output()
	if err != nil {
		return nil, "", "", fmt.Errorf("mint the browser's token: %w", err)
	}
	cfg.Say("starting Firefox (headless) on the web app as student " + student)
	b, err := firefox.Start(firefox.Config{Firefox: cfg.Browser.Firefox, PushServerURL: "ws://" + wsAddr + "/",
		AppURL: "http://" + apiAddr + "/app/", Token: strings.TrimSpace(string(token)), Dir: filepath.Join(cfg.LogDir, "firefox")})
	if err != nil {
		return nil, "", "", err
	}
	wctx, cancel := context.WithTimeout(ctx, cfg.Browser.Wait)
	defer cancel()
	sub, err := b.WaitFor(wctx, "the browser's subscription", func(r firefox.Report) bool { return r.Type == "subscribed" || r.Type == "error" }, nil)
	if err == nil && sub.Type == "error" {
		err = fmt.Errorf("the web app in Firefox: %s", sub.Message)
	}
	if err != nil {
		b.Close()
		return nil, "", "", err
	}
	cfg.Say("Firefox subscribed: " + sub.Endpoint)
	return b, student, sub.Endpoint, nil
}

// browserReceived waits for the run's push in the browser and records it.
func browserReceived(ctx context.Context, cfg Config, b *firefox.Browser, r *BrowserResult, eventID string, published time.Time) error {
	wctx, cancel := context.WithTimeout(ctx, cfg.Browser.Wait)
	defer cancel()
	push, err := b.WaitFor(wctx, "the push in the browser", func(r firefox.Report) bool { return r.Type == "push" && r.Payload.EventID == eventID }, nil)
	if err != nil {
		return err
	}
	// When the service worker's report arrived: shown, decrypted, reported.
	r.ShownAfterSeconds = push.Received.Sub(published).Seconds()
	r.Raw, r.Title, r.EventID = push.Raw, push.Payload.Title, push.Payload.EventID
	shown, err := b.Command(wctx, "notifications", eventID)
	if err != nil {
		return err
	}
	r.Notifications = len(shown.Notifications)
	shot := filepath.Join(cfg.LogDir, "browser.png")
	if err := b.Screenshot(shot); err != nil {
		cfg.Say("screenshot: " + err.Error())
	} else {
		r.Screenshot = shot
	}
	return nil
}
