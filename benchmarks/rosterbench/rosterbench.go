// Package rosterbench measures the roster (services/roster) applying a
// platform's initial load: N users, their courses and M enrollments as
// Debezium snapshot records on scratch topics, applied by the roster
// service from the earliest offset into a scratch database. It backs
// `notify bench roster`. The records are written before the service
// starts, so the measurement is the apply alone: decode, transactions,
// offset commits.
package rosterbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"strconv"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/benchmarks/benchkit"
	"github.com/notify-dev/notify/services/ids"
	"github.com/notify-dev/notify/services/roster"
	"github.com/notify-dev/notify/services/roster/rostertest"
	"github.com/notify-dev/notify/streams"
)

// benchNamespace maps the synthetic platform's integer ids.
const benchNamespace = "0b8e0a8e-8f3e-4a51-9a7f-5a8c4b1d2e3f"

// Config configures a run.
type Config struct {
	// DatabaseURL names the server; the run creates its own database
	// notify_bench_roster_<random> there and drops it at the end.
	// Required.
	DatabaseURL string
	// Brokers are the Kafka seed brokers; the run's topics are prefixed
	// bench-roster-<random>. and deleted at the end. Required.
	Brokers []string
	// Users and Enrollments are the snapshot's sizes. Users is required.
	Users, Enrollments int
	// Courses is how many courses the enrollments spread over. Default
	// max(1, Users/1000).
	Courses int
	// Schemas writes the records with schemas.enable=true (the envelope);
	// false writes the payload alone.
	Schemas bool
	// Partitions of each platform topic. Default 3.
	Partitions int32
	// MaxBatch and Parallel are the service's. Defaults
	// roster.DefaultMaxBatch and roster.DefaultParallel.
	MaxBatch, Parallel int
	// Rate, when positive, measures the apply lag at a steady load
	// instead of the snapshot's rate: the service starts on the courses
	// alone, then the run writes Rate changes per second for Duration
	// (new users and their enrollments, taking turns; Users and
	// Enrollments are ignored) and reports each change's lag from its
	// produce call to the moment the roster's position (roster_positions,
	// written in the transaction that applies it) covered it, polled
	// every 10 ms. Default 0: the snapshot.
	Rate int
	// Duration of the steady load. Default 30 s.
	Duration time.Duration
	// CPUProfile, when set, receives a CPU profile of this process from
	// the service's start to the last offset committed (go tool pprof).
	CPUProfile string
	// Logger receives progress. Default: discarded.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Courses == 0 {
		c.Courses = max(1, c.Users/1000)
	}
	if c.Partitions == 0 {
		c.Partitions = 3
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = roster.DefaultMaxBatch
	}
	if c.Parallel == 0 {
		c.Parallel = roster.DefaultParallel
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.Rate > 0 && c.Duration == 0 {
		c.Duration = 30 * time.Second
	}
	return c
}

// Validate reports a setting the run cannot use.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.DatabaseURL == "":
		return errors.New("rosterbench: a database URL is required")
	case len(c.Brokers) == 0:
		return errors.New("rosterbench: brokers are required")
	case c.Users < 1 || c.Enrollments < 0 || c.Courses < 1:
		return fmt.Errorf("rosterbench: --users and --courses must be positive and --enrollments not negative, got %d, %d, %d", c.Users, c.Courses, c.Enrollments)
	case c.Rate < 0 || c.Rate > 1_000_000 || c.Duration < 0:
		return fmt.Errorf("rosterbench: --rate must be between 0 and 1000000 changes/s and --duration not negative, got %d and %s", c.Rate, c.Duration)
	case c.Rate == 0 && int64(c.Enrollments) > int64(c.Users)*int64(c.Courses):
		return fmt.Errorf("rosterbench: %d enrollments do not fit %d users in %d courses", c.Enrollments, c.Users, c.Courses)
	}
	return nil
}

// Result is one run's measurement.
type Result struct {
	Users       int  `json:"users"`
	Courses     int  `json:"courses"`
	Enrollments int  `json:"enrollments"`
	Schemas     bool `json:"schemas"`
	Partitions  int  `json:"partitions"`
	MaxBatch    int  `json:"max_batch"`
	Parallel    int  `json:"parallel"`
	// Changes is every record applied: users + courses + enrollments.
	Changes int64 `json:"changes"`
	// RecordBytes is the records' value bytes.
	RecordBytes int64 `json:"record_bytes"`
	// Seconds is from the service's start to the last offset committed.
	Seconds          float64 `json:"seconds"`
	ChangesPerSecond float64 `json:"changes_per_second"`
	// CPUSeconds is RosterCPUSeconds + PostgresCPUSeconds: this process,
	// and the Postgres backends of its connections (not the server's
	// background writers, nor anyone else's sessions on a shared server;
	// 0 when the server runs on another host).
	CPUSeconds         float64 `json:"cpu_seconds"`
	RosterCPUSeconds   float64 `json:"roster_cpu_seconds"`
	PostgresCPUSeconds float64 `json:"postgres_cpu_seconds"`
	ProduceSeconds     float64 `json:"produce_seconds"`
	// Rows counted after the run (a check that everything was applied).
	RowsUsers       int64 `json:"rows_users"`
	RowsCourses     int64 `json:"rows_courses"`
	RowsEnrollments int64 `json:"rows_enrollments"`
	// The steady load (Config.Rate): the rate asked and the one sent,
	// and the changes' apply lag.
	Rate            int     `json:"rate,omitempty"`
	RateSent        float64 `json:"rate_sent,omitempty"`
	DurationSeconds float64 `json:"duration_seconds,omitempty"`
	LagSamples      int     `json:"lag_samples,omitempty"`
	LagP50MS        float64 `json:"lag_p50_ms,omitempty"`
	LagP99MS        float64 `json:"lag_p99_ms,omitempty"`
	LagMaxMS        float64 `json:"lag_max_ms,omitempty"`
}

// Run performs one run.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	cfg = cfg.withDefaults()
	res := Result{Users: cfg.Users, Courses: cfg.Courses, Enrollments: cfg.Enrollments, Schemas: cfg.Schemas,
		Partitions: int(cfg.Partitions), MaxBatch: cfg.MaxBatch, Parallel: cfg.Parallel}
	log := cfg.Logger

	db, err := benchkit.ScratchDatabase(ctx, cfg.DatabaseURL, "notify_bench_roster_")
	if err != nil {
		return res, err
	}
	defer func() {
		if err := db.Drop(); err != nil {
			log.Warn("drop scratch database", "err", err)
		}
	}()
	topics := streams.DefaultTopics().WithPrefix("bench-roster-" + benchkit.Suffix() + ".")
	tk, err := benchkit.CreateTopics(ctx, cfg.Brokers, topics, "bench-roster")
	if err != nil {
		return res, err
	}
	defer tk.Delete()
	usersT, coursesT, enrollT := topics.Prefix+"platform.public.users", topics.Prefix+"platform.public.courses", topics.Prefix+"platform.public.enrollments"
	for _, t := range []string{usersT, coursesT, enrollT} {
		r, err := tk.Admin.CreateTopic(ctx, cfg.Partitions, 1, nil, t)
		if err == nil {
			err = r.Err
		}
		if err != nil {
			return res, fmt.Errorf("create topic %s: %w", t, err)
		}
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = tk.Admin.DeleteTopics(dctx, usersT, coursesT, enrollT)
		_, _ = tk.Admin.DeleteGroups(dctx, topics.Group(streams.GroupRoster))
	}()
	if err := benchkit.WaitTopicsReady(ctx, tk.Admin, usersT, coursesT, enrollT); err != nil {
		return res, err
	}

	if cfg.Rate > 0 {
		res.Rate, res.Users, res.Enrollments = cfg.Rate, 0, 0
	} else {
		log.Info("writing records", "users", cfg.Users, "courses", cfg.Courses, "enrollments", cfg.Enrollments, "schemas", cfg.Schemas)
		t0 := time.Now()
		if res.RecordBytes, err = produce(ctx, cfg, usersT, coursesT, enrollT); err != nil {
			return res, err
		}
		res.ProduceSeconds = time.Since(t0).Seconds()
		res.Changes = int64(cfg.Users + cfg.Courses + cfg.Enrollments)
	}

	// A fixed set of connections, opened before the clock starts, so the
	// Postgres CPU measured is exactly that of the backends serving the
	// roster (the server is shared; its other backends are not ours).
	pcfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		return res, err
	}
	pcfg.MaxConns = int32(cfg.Parallel + 1)
	pcfg.MinConns = pcfg.MaxConns
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	backends, err := backendPIDs(ctx, pool, int(pcfg.MaxConns))
	if err != nil {
		return res, err
	}
	svcCfg := roster.Config{
		Pool: pool, Brokers: cfg.Brokers, Topics: topics, IDs: ids.New(uuid.MustParse(benchNamespace)),
		UsersTopic: usersT, CoursesTopic: coursesT, EnrollmentsTopic: enrollT,
		BatchTuning: streams.BatchTuning{MaxBatch: cfg.MaxBatch, Parallel: cfg.Parallel}, Logger: log,
	}
	for _, c := range []struct {
		dst         *roster.Columns
		table, spec string
	}{
		{&svcCfg.UsersColumns, roster.TableUsers, rostertest.ColumnsUsers},
		{&svcCfg.CoursesColumns, roster.TableCourses, rostertest.ColumnsCourses},
		{&svcCfg.EnrollmentsColumns, roster.TableEnrollments, rostertest.ColumnsEnrollments},
	} {
		if *c.dst, err = roster.ParseColumns(c.table, c.spec); err != nil {
			return res, err
		}
	}
	svc, err := roster.NewService(svcCfg)
	if err != nil {
		return res, err
	}
	if cfg.CPUProfile != "" {
		f, err := os.Create(cfg.CPUProfile)
		if err != nil {
			return res, fmt.Errorf("cpu profile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return res, fmt.Errorf("cpu profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	pg0 := backendsCPU(backends)
	self0 := selfCPU()
	start := time.Now()
	if err := svc.Start(ctx); err != nil {
		return res, err
	}
	defer func() { _ = svc.Stop(context.Background()) }()
	if cfg.Rate > 0 {
		// The positions' poller on a connection of its own, apart from
		// the measured ones.
		poll, err := pgxpool.New(ctx, db.URL)
		if err != nil {
			return res, err
		}
		defer poll.Close()
		err = steady(ctx, cfg, &res, poll, tk.Admin, topics.Group(streams.GroupRoster), usersT, coursesT, enrollT, func() {
			res.RosterCPUSeconds = selfCPU() - self0
			res.PostgresCPUSeconds = backendsCPU(backends) - pg0
			res.CPUSeconds = res.RosterCPUSeconds + res.PostgresCPUSeconds
		})
		return res, err
	}
	log.Info("applying")
	if err := waitCommitted(ctx, tk.Admin, topics.Group(streams.GroupRoster), log, usersT, coursesT, enrollT); err != nil {
		return res, err
	}
	res.Seconds = time.Since(start).Seconds()
	res.RosterCPUSeconds = selfCPU() - self0
	res.PostgresCPUSeconds = backendsCPU(backends) - pg0
	res.CPUSeconds = res.RosterCPUSeconds + res.PostgresCPUSeconds
	res.ChangesPerSecond = float64(res.Changes) / res.Seconds
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM users), (SELECT count(*) FROM courses), (SELECT count(*) FROM enrollments)`).
		Scan(&res.RowsUsers, &res.RowsCourses, &res.RowsEnrollments); err != nil {
		return res, err
	}
	if res.RowsUsers != int64(cfg.Users) || res.RowsCourses != int64(cfg.Courses) || res.RowsEnrollments != int64(cfg.Enrollments) {
		return res, fmt.Errorf("rosterbench: applied %d users, %d courses, %d enrollments; wrote %d, %d, %d",
			res.RowsUsers, res.RowsCourses, res.RowsEnrollments, cfg.Users, cfg.Courses, cfg.Enrollments)
	}
	return res, nil
}

// produce writes the snapshot: users, then courses, then enrollments
// (the roster applies the topics independently; order does not matter).
func produce(ctx context.Context, cfg Config, usersT, coursesT, enrollT string) (int64, error) {
	cl, err := kgo.NewClient(append(streams.ClientOpts(cfg.Brokers, "bench-roster-producer"),
		kgo.ProducerLinger(10*time.Millisecond), kgo.ProducerBatchMaxBytes(1<<20), kgo.MaxBufferedRecords(100_000))...)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	var bytes int64
	var mu sync.Mutex
	var ferr error
	lsn := int64(1_000_000)
	ts := time.Now().UnixMilli()
	send := func(topic string, t rostertest.Table, row map[string]any) {
		lsn++
		p := lsn
		r := &kgo.Record{Topic: topic, Key: t.KeyOf(row, cfg.Schemas), Value: t.ValueOf(rostertest.Event{Op: "r", After: row, LSN: &p, TsMs: ts}, cfg.Schemas)}
		bytes += int64(len(r.Value))
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil && ferr == nil {
				ferr = err
			}
		})
	}
	joined := time.Now().Add(-24 * time.Hour).UnixMicro()
	for i := 1; i <= cfg.Users; i++ {
		send(usersT, rostertest.Users, map[string]any{"id": i, "full_name": "Student " + strconv.Itoa(i), "lang": "en", "tz": "Europe/Berlin", "created_at": "2026-01-01T00:00:00Z"})
	}
	for c := 1; c <= cfg.Courses; c++ {
		send(coursesT, rostertest.Courses, map[string]any{"id": 10_000_000 + c, "teacher_id": 1 + (c-1)%cfg.Users, "name": "Course " + strconv.Itoa(c)})
	}
	for i := 0; i < cfg.Enrollments; i++ {
		send(enrollT, rostertest.Enrollments, map[string]any{"course_id": 10_000_000 + 1 + i%cfg.Courses, "member_id": 1 + (i/cfg.Courses)%cfg.Users, "joined_at": joined})
	}
	if err := cl.Flush(ctx); err != nil {
		return bytes, err
	}
	mu.Lock()
	defer mu.Unlock()
	return bytes, ferr
}

func waitCommitted(ctx context.Context, adm *kadm.Client, group string, log *slog.Logger, topics ...string) error {
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return err
	}
	last := time.Now()
	for {
		committed, err := adm.FetchOffsetsForTopics(ctx, group, topics...)
		if err == nil {
			var behind int64
			ends.Each(func(o kadm.ListedOffset) {
				at := int64(0)
				if c, ok := committed.Lookup(o.Topic, o.Partition); ok && c.At > 0 {
					at = c.At
				}
				behind += max(o.Offset-at, 0)
			})
			if behind == 0 {
				return nil
			}
			if time.Since(last) > 5*time.Second {
				log.Info("applying", "records_behind", behind)
				last = time.Now()
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}

// backendPIDs holds n connections of pool at once and returns their
// server processes.
func backendPIDs(ctx context.Context, pool *pgxpool.Pool, n int) ([]int, error) {
	var pids []int
	var conns []*pgxpool.Conn
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for i := 0; i < n; i++ {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return nil, err
		}
		conns = append(conns, c)
		var pid int
		if err := c.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			return nil, err
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// backendsCPU is the CPU seconds of the backends so far (0 for one that
// cannot be read: the server on another host).
func backendsCPU(pids []int) float64 {
	var s float64
	for _, p := range pids {
		if st, err := benchkit.ReadProcStat(p); err == nil {
			s += st.Self
		}
	}
	return s
}

// Print writes r as a table.
func Print(w io.Writer, r Result) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if r.Rate > 0 {
		fmt.Fprintf(tw, "steady load\t%d changes/s asked, %.0f/s sent for %.1f s (%d changes: new users and their enrollments; schemas %v, %d partitions per topic, batch %d, parallel %d)\n",
			r.Rate, r.RateSent, r.DurationSeconds, r.Changes, r.Schemas, r.Partitions, r.MaxBatch, r.Parallel)
		fmt.Fprintf(tw, "apply lag\tp50 %.0f ms, p99 %.0f ms, max %.0f ms over %d changes (produce call → position committed, polled every 10 ms)\n",
			r.LagP50MS, r.LagP99MS, r.LagMaxMS, r.LagSamples)
		fmt.Fprintf(tw, "CPU\t%.2f s = this process (the roster, and the producer beside it) %.2f s + Postgres server %.2f s (%.1f µs per change)\n",
			r.CPUSeconds, r.RosterCPUSeconds, r.PostgresCPUSeconds, r.CPUSeconds/float64(max(r.Changes, 1))*1e6)
		_ = tw.Flush()
		return
	}
	fmt.Fprintf(tw, "snapshot\t%d users, %d courses, %d enrollments (schemas %v, %d partitions per topic, batch %d, parallel %d)\n",
		r.Users, r.Courses, r.Enrollments, r.Schemas, r.Partitions, r.MaxBatch, r.Parallel)
	fmt.Fprintf(tw, "records written\t%d (%.1f MB values) in %.1f s, before the roster started\n", r.Changes, float64(r.RecordBytes)/1e6, r.ProduceSeconds)
	fmt.Fprintf(tw, "applied\t%d changes in %.2f s: %.0f changes/s\n", r.Changes, r.Seconds, r.ChangesPerSecond)
	fmt.Fprintf(tw, "CPU\t%.2f s = roster %.2f s + Postgres server %.2f s (%.1f µs per change)\n",
		r.CPUSeconds, r.RosterCPUSeconds, r.PostgresCPUSeconds, r.CPUSeconds/float64(r.Changes)*1e6)
	_ = tw.Flush()
}
