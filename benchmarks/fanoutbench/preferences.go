package fanoutbench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/benchmarks/benchkit"
	"github.com/notify-dev/notify/services/seed"
	"github.com/notify-dev/notify/streams"
)

// DefaultPairs is how many A/B pairs RunPreferences measures.
const DefaultPairs = 3

// abQuietEndsIn is how far ahead the A/B runs' quiet hours end: past any
// fan-out, so the releaser stays idle while a pair is measured.
const abQuietEndsIn = time.Hour

// PreferencesConfig configures RunPreferences.
type PreferencesConfig struct {
	// Config is the fan-out's shape and the infrastructure, as for Run.
	Config
	// Preferences are the shares of students given preferences before
	// each measured event with them (seed.ApplyPreferences); its
	// QuietEndsIn and Now are set by the run.
	Preferences seed.Preferences
	// Pairs is how many A/B pairs are measured, the order alternating
	// (plain first, then preferences first, …). Default DefaultPairs.
	Pairs int
	// Release also times the deferred release (see ReleaseResult).
	Release bool
	// ReleaseLead is how long after the release event's preferences are
	// applied their quiet hours end. It must cover the fan-out and the
	// devices' load. Default (0): 3 × the slowest A/B fan-out with
	// preferences + 30 s.
	ReleaseLead time.Duration
}

// PreferencesResult is one run of RunPreferences. JSON field names are
// part of the benchmark's contract.
type PreferencesResult struct {
	Users         int    `json:"users"`
	Ranges        int    `json:"ranges"`
	SliceSize     int    `json:"slice_size"`
	SliceInFlight int    `json:"slice_in_flight"`
	RunAhead      int    `json:"run_ahead"`
	Database      string `json:"database"`
	// Preferences is the shares (seed.ParsePreferences' form), Seeded the
	// students of each group.
	Preferences string                `json:"preferences"`
	Seeded      seed.PreferenceCounts `json:"seeded"`
	Pairs       int                   `json:"pairs"`
	// FanoutSeconds and PlainFanoutSeconds are the medians of the runs
	// with and without preferences (outbox commit → last slice commit, as
	// Result.FanoutSeconds); Ratio is FanoutSeconds / PlainFanoutSeconds.
	FanoutSeconds      float64 `json:"fanout_seconds"`
	PlainFanoutSeconds float64 `json:"plain_fanout_seconds"`
	Ratio              float64 `json:"ratio"`
	// The runs in the order measured within each kind, and each pair's
	// ratio (with / without).
	FanoutRuns      []float64 `json:"fanout_runs_seconds"`
	PlainFanoutRuns []float64 `json:"plain_fanout_runs_seconds"`
	PairRatios      []float64 `json:"pair_ratios"`
	// FanoutCPU and PlainFanoutCPU are the CPU each kind of run spent,
	// the medians per part (CPU; zero where Postgres runs elsewhere). On a
	// machine whose speed drifts between runs, they show where the
	// preferences' cost lies better than the wall clock does.
	FanoutCPU      CPU `json:"fanout_cpu"`
	PlainFanoutCPU CPU `json:"plain_fanout_cpu"`
	// Rows is the notifications an event with preferences wrote (every
	// student: muted, deferred and capped students get their inbox row).
	Rows int64 `json:"rows"`
	// Muted, Deferred, Capped and Silenced are students of an event with
	// preferences whose push the fan-out held back (push_hold_sets), the same
	// in every run.
	Muted    int64 `json:"muted"`
	Deferred int64 `json:"deferred"`
	Capped   int64 `json:"capped"`
	Silenced int64 `json:"silenced"`
	// Release is the deferred release's timing (with Config.Release).
	Release *ReleaseResult `json:"release,omitempty"`
	// LoadAverage is the machine's 1/5/15 minute load average at the
	// start and at the end: on a shared machine, what else ran.
	LoadAverageStart string `json:"load_average_start"`
	LoadAverageEnd   string `json:"load_average_end"`
	// SeedSeconds is how long seeding took in this run (0 when reused).
	SeedSeconds float64 `json:"seed_seconds"`
}

// ReleaseResult times the push of the deferred students when their quiet
// hours end. One more event with preferences is fanned out with the quiet
// hours ending LeadSeconds after they were applied; each of its push
// commands has its devices loaded as a push worker does
// (push_command_devices, which records the deferred students' devices
// 'deferred'), without sending. At the end the releaser running in the
// fan-out (DefaultReleasePoll, DefaultReleaseBatch) turns them into push
// commands; a push goes out when its command reaches the push topic,
// where the bench reads it as a push worker would. First and Last are the
// seconds from the end of the quiet hours to the first and the last of
// those commands read, which name every deferred device.
type ReleaseResult struct {
	QuietEnd         time.Time `json:"quiet_end"`
	LeadSeconds      float64   `json:"lead_seconds"`
	FanoutSeconds    float64   `json:"fanout_seconds"`
	DeferredStudents int64     `json:"deferred_students"`
	DeferredDevices  int64     `json:"deferred_devices"`
	// LoadedBeforeEnd is the seconds between the last devices' load and
	// the end (positive: loaded before the quiet hours ended).
	LoadedBeforeEnd float64 `json:"loaded_before_end_seconds"`
	ReleasedDevices int64   `json:"released_devices"`
	Commands        int     `json:"commands"`
	FirstSeconds    float64 `json:"first_seconds"`
	LastSeconds     float64 `json:"last_seconds"`
}

// RunPreferences measures the fan-out of one course with and without
// preferences on the same seed: interleaved A/B pairs through the same
// running pipeline (connector, Kafka, planner, slices), each run from the
// same starting point (reset), the preferences written before each run
// with them and removed before each run without. With cfg.Release it
// then times the deferred release (ReleaseResult).
func RunPreferences(ctx context.Context, cfg PreferencesConfig) (PreferencesResult, error) {
	cfg.Config = cfg.Config.withDefaults()
	if cfg.Pairs == 0 {
		cfg.Pairs = DefaultPairs
	}
	res := PreferencesResult{Users: cfg.Users, Ranges: cfg.Ranges, SliceSize: cfg.SliceSize, SliceInFlight: cfg.SliceInFlight,
		RunAhead: max(cfg.RunAhead, 0), Pairs: cfg.Pairs, Preferences: cfg.Preferences.String(), LoadAverageStart: benchkit.LoadAvg()}
	if err := cfg.validate(); err != nil {
		return res, err
	}
	if cfg.Pairs < 1 {
		return res, fmt.Errorf("pairs must be at least 1, got %d", cfg.Pairs)
	}
	if cfg.ReleaseLead < 0 {
		return res, fmt.Errorf("release lead must not be negative, got %s", cfg.ReleaseLead)
	}
	p := cfg.Preferences
	p.QuietEndsIn, p.Now = abQuietEndsIn, time.Now()
	if _, err := seed.ParsePreferences(p.String()); err != nil {
		return res, err
	}
	if cfg.Release && p.Quiet == 0 {
		return res, errors.New("timing the release needs deferred students: give a quiet share")
	}
	res.Seeded = p.Counts(int64(cfg.Users))

	name := "notify_bench_fanout_prefs_" + strconv.Itoa(cfg.Users)
	res.Database = name
	db, pool, err := openBenchDatabase(ctx, cfg.DatabaseURL, name, cfg.Ranges+8)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	// One app device per student (token only, never sent): the release
	// needs devices to record deferred and release; the fan-out reads none.
	course, secs, err := ensureSeededWith(ctx, pool, cfg.Config, name, seed.Options{Users: cfg.Users, NoSubscriptions: true,
		FCMRatio: 1, FCMToken: func(id int64) string { return "bench-fcm-" + strconv.FormatInt(id, 10) }})
	if err != nil {
		return res, err
	}
	res.SeedSeconds = secs

	cfg.Say("pipeline: starting the connector and the fan-out, warming up")
	if err := resetPreferences(ctx, pool, course, nil); err != nil {
		return res, err
	}
	pl, err := startPipeline(ctx, pool, db, cfg.Config)
	if err != nil {
		return res, err
	}
	defer pl.stop()

	var cpuWith, cpuPlain []CPU
	one := func(pair int, with bool) error {
		what := "without preferences"
		var pp *seed.Preferences
		if with {
			what = "with preferences (" + cfg.Preferences.String() + ")"
			q := p
			q.Now = time.Now()
			pp = &q
		}
		cfg.Say("pair %d/%d: %s", pair+1, cfg.Pairs, what)
		if err := resetPreferences(ctx, pool, course, pp); err != nil {
			return err
		}
		meter := startCPUMeter(ctx, pool)
		event, rows, secs, err := pl.measure(ctx, course)
		cpu := meter.finish()
		if err != nil {
			return err
		}
		if rows != int64(cfg.Users) {
			return fmt.Errorf("%s: notified %d students, want %d", what, rows, cfg.Users)
		}
		h, err := loadHolds(ctx, pool, event)
		if err != nil {
			return err
		}
		if !with {
			if h != (holds{}) {
				return fmt.Errorf("without preferences the fan-out held back pushes: %+v", h)
			}
			res.PlainFanoutRuns = append(res.PlainFanoutRuns, secs)
			cpuPlain = append(cpuPlain, cpu)
			cfg.Say("pair %d/%d: %s: %d rows in %.2fs", pair+1, cfg.Pairs, what, rows, secs)
			return nil
		}
		if err := h.check(res.Seeded); err != nil {
			return err
		}
		res.Rows, res.Muted, res.Deferred, res.Capped, res.Silenced = rows, h.muted, h.deferred, h.capped, h.silenced
		res.FanoutRuns = append(res.FanoutRuns, secs)
		cpuWith = append(cpuWith, cpu)
		cfg.Say("pair %d/%d: %s: %d rows in %.2fs; muted %d, deferred %d, capped %d", pair+1, cfg.Pairs, what, rows, secs, h.muted, h.deferred, h.capped)
		return nil
	}
	for pair := range cfg.Pairs {
		// Alternating the order cancels what a second run of a pair
		// inherits from the first (autovacuum of its rows, a warmer cache).
		first := pair%2 == 1
		if err := one(pair, first); err != nil {
			return res, err
		}
		if err := one(pair, !first); err != nil {
			return res, err
		}
		res.PairRatios = append(res.PairRatios, res.FanoutRuns[pair]/res.PlainFanoutRuns[pair])
	}
	res.FanoutSeconds, res.PlainFanoutSeconds = median(res.FanoutRuns), median(res.PlainFanoutRuns)
	res.FanoutCPU, res.PlainFanoutCPU = medianCPU(cpuWith), medianCPU(cpuPlain)
	if res.PlainFanoutSeconds > 0 {
		res.Ratio = res.FanoutSeconds / res.PlainFanoutSeconds
	}

	if cfg.Release {
		lead := cfg.ReleaseLead
		if lead == 0 {
			lead = time.Duration(3*slices.Max(res.FanoutRuns)*float64(time.Second)) + 30*time.Second
		}
		rel, err := timeRelease(ctx, pool, pl, course, p, lead, res.Seeded)
		if err != nil {
			return res, err
		}
		res.Release = &rel
	}
	pl.stop()
	// Leave the seed, drop the rows of this run.
	if err := resetPreferences(ctx, pool, course, nil); err != nil {
		return res, err
	}
	res.LoadAverageEnd = benchkit.LoadAvg()
	return res, nil
}

// resetPreferences is reset, plus the run's preferences: p's written
// (and, for its capped students, a notification ten minutes old, the
// push of the past hour their cap counts), or none with p nil. Vacuum and
// checkpoint come after them, so both kinds of run start alike.
func resetPreferences(ctx context.Context, pool *pgxpool.Pool, course string, p *seed.Preferences) error {
	for _, q := range []string{
		`TRUNCATE notifications, fanout_ranges, fanout_runs, outbox, push_deliveries, push_hold_sets, event_counters, event_platform_counters, event_target_ranges`,
		`DELETE FROM materials`,
		`TRUNCATE user_preferences`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			return fmt.Errorf("reset (%s): %w", q, err)
		}
	}
	if p != nil {
		if _, err := seed.ApplyPreferences(ctx, pool, course, *p); err != nil {
			return err
		}
		if p.Capped > 0 {
			if _, err := pool.Exec(ctx, `INSERT INTO notifications (event_id, user_id, created_at)
				SELECT $1, user_id, now() - interval '10 minutes' FROM user_preferences WHERE max_pushes_per_hour IS NOT NULL`, newUUID()); err != nil {
				return fmt.Errorf("reset: the capped students' earlier push: %w", err)
			}
		}
	}
	for _, q := range []string{
		`VACUUM ANALYZE enrollments`,
		`VACUUM ANALYZE notifications`,
		`VACUUM ANALYZE user_preferences, push_hold_sets`,
		`VACUUM ANALYZE fanout_ranges, fanout_runs, outbox, materials`,
		`CHECKPOINT`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			return fmt.Errorf("reset (%s): %w", q, err)
		}
	}
	return nil
}

type holds struct{ muted, deferred, capped, silenced int64 }

func loadHolds(ctx context.Context, pool *pgxpool.Pool, event string) (holds, error) {
	var h holds
	err := pool.QueryRow(ctx, `SELECT coalesce(sum(students) FILTER (WHERE reason = 'muted'), 0), coalesce(sum(students) FILTER (WHERE reason = 'deferred'), 0),
		coalesce(sum(students) FILTER (WHERE reason = 'capped'), 0), coalesce(sum(students) FILTER (WHERE reason = 'silenced'), 0)
		FROM push_hold_sets WHERE event_id = $1`, event).Scan(&h.muted, &h.deferred, &h.capped, &h.silenced)
	if err != nil {
		return h, fmt.Errorf("count the event's holds: %w", err)
	}
	return h, nil
}

// check compares what the fan-out held back with the seeded groups: a
// run that decided otherwise measured something else.
func (h holds) check(c seed.PreferenceCounts) error {
	if h.muted != c.Muted || h.deferred != c.Quiet || h.capped != c.Capped || h.silenced != 0 {
		return fmt.Errorf("the fan-out held back muted %d, deferred %d, capped %d, silenced %d; the seed has %d muted, %d quiet, %d capped students",
			h.muted, h.deferred, h.capped, h.silenced, c.Muted, c.Quiet, c.Capped)
	}
	return nil
}

// timeRelease fans out one more event with preferences whose quiet hours
// end lead after they are applied, loads its commands' devices and times
// the release commands (ReleaseResult).
func timeRelease(ctx context.Context, pool *pgxpool.Pool, pl *runningPipeline, course string, p seed.Preferences, lead time.Duration, want seed.PreferenceCounts) (ReleaseResult, error) {
	cfg := pl.cfg
	var rel ReleaseResult
	p.Now, p.QuietEndsIn = time.Now(), lead
	cfg.Say("release: quiet hours ending in %s; fan-out, then each command's devices loaded as a push worker does", lead.Round(time.Second))
	if err := resetPreferences(ctx, pool, course, &p); err != nil {
		return rel, err
	}
	rel.QuietEnd = p.Now.Add(lead).Truncate(time.Second)
	rel.LeadSeconds = rel.QuietEnd.Sub(p.Now).Seconds()

	cl, err := kgo.NewClient(append(streams.ClientOpts(cfg.Brokers, "bench-fanout-release"),
		kgo.ConsumeTopics(pl.topics.Push()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		return rel, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()

	// The commands of the event, by kind: a slice's (no device ids) has
	// its devices loaded by four loaders; a release's is timed.
	var event atomic.Value
	event.Store("")
	fresh := make(chan streams.PushCommand, 1024)
	var loaded, loadedStudents atomic.Int64
	var lastLoad atomic.Int64
	var loadErr error
	var loadMu sync.Mutex
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for pc := range fresh {
				var n int64
				if err := pool.QueryRow(ctx, `SELECT count(*) FROM push_command_devices($1, $2, $3)`, pc.EventID, pc.FirstUser, pc.LastUser).Scan(&n); err != nil {
					loadMu.Lock()
					loadErr = errors.Join(loadErr, fmt.Errorf("load the devices of %s [%s, %s]: %w", pc.EventID, pc.FirstUser, pc.LastUser, err))
					loadMu.Unlock()
					continue
				}
				loaded.Add(n)
				loadedStudents.Add(int64(pc.Students))
				lastLoad.Store(time.Now().UnixNano())
			}
		}()
	}
	defer func() { close(fresh); wg.Wait() }()

	var first, last time.Time
	var released int64
	var commands int
	var deferredDevices int64 = -1
	poll := func(pctx context.Context) error {
		fetches := cl.PollFetches(pctx)
		if err := fetches.Err0(); err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("read the push topic: %w", err)
		}
		at := time.Now()
		var ferr error
		fetches.EachRecord(func(r *kgo.Record) {
			var pc streams.PushCommand
			if err := json.Unmarshal(r.Value, &pc); err != nil {
				ferr = fmt.Errorf("push command: %w", err)
				return
			}
			if pc.EventID != event.Load().(string) {
				return
			}
			if pc.SubscriptionIDs == nil {
				fresh <- pc
				return
			}
			if first.IsZero() {
				first = at
			}
			last = at
			released += int64(len(pc.SubscriptionIDs))
			commands++
		})
		return ferr
	}

	ev, t0, err := publish(ctx, pool, course)
	if err != nil {
		return rel, err
	}
	event.Store(ev)
	deadline := rel.QuietEnd.Add(5 * time.Minute)
	var finished time.Time
	var notified int64
	for {
		if time.Now().After(deadline) {
			return rel, fmt.Errorf("release: %d of %d deferred devices released 5 minutes after the quiet hours ended", released, deferredDevices)
		}
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err := poll(pctx)
		cancel()
		if err != nil {
			return rel, err
		}
		if ctx.Err() != nil {
			return rel, ctx.Err()
		}
		loadMu.Lock()
		lerr := loadErr
		loadMu.Unlock()
		if lerr != nil {
			return rel, lerr
		}
		if finished.IsZero() {
			fin, n, err := runProgress(ctx, pool, ev)
			if err != nil {
				return rel, err
			}
			notified = n
			if finished = fin; !finished.IsZero() {
				rel.FanoutSeconds = finished.Sub(t0).Seconds()
				cfg.Say("release: fan-out done in %.2fs", rel.FanoutSeconds)
			}
		}
		if deferredDevices < 0 && !finished.IsZero() && loadedStudents.Load() == notified {
			// Every command's devices are loaded: the deferred ones are
			// recorded, and none may have gone yet.
			if !first.IsZero() || time.Now().After(rel.QuietEnd) {
				return rel, fmt.Errorf("release: the quiet hours ended (%s) before every device was loaded; give a longer --release-lead than %s",
					rel.QuietEnd.Format(time.RFC3339), lead)
			}
			h, err := loadHolds(ctx, pool, ev)
			if err != nil {
				return rel, err
			}
			if err := h.check(want); err != nil {
				return rel, err
			}
			rel.DeferredStudents = h.deferred
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM push_deliveries WHERE event_id = $1 AND status = 'deferred'`, ev).Scan(&deferredDevices); err != nil {
				return rel, fmt.Errorf("count deferred devices: %w", err)
			}
			rel.DeferredDevices = deferredDevices
			rel.LoadedBeforeEnd = rel.QuietEnd.Sub(time.Unix(0, lastLoad.Load())).Seconds()
			cfg.Say("release: every command loaded: %d devices to send, %d recorded deferred; the quiet hours end in %.1fs", loaded.Load(), deferredDevices, rel.LoadedBeforeEnd)
		}
		if deferredDevices >= 0 && released >= deferredDevices {
			break
		}
	}
	rel.ReleasedDevices, rel.Commands = released, commands
	rel.FirstSeconds, rel.LastSeconds = first.Sub(rel.QuietEnd).Seconds(), last.Sub(rel.QuietEnd).Seconds()
	if released != deferredDevices {
		return rel, fmt.Errorf("release: %d devices released, %d were deferred", released, deferredDevices)
	}
	cfg.Say("release: %d devices in %d commands, the first %.2fs and the last %.2fs after the end", released, commands, rel.FirstSeconds, rel.LastSeconds)
	return rel, nil
}

// median of a non-empty list.
func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// medianCPU is the median of each part of v.
func medianCPU(v []CPU) CPU {
	part := func(f func(CPU) float64) float64 {
		x := make([]float64, len(v))
		for i, c := range v {
			x[i] = f(c)
		}
		return median(x)
	}
	return CPU{
		Backends:   part(func(c CPU) float64 { return c.Backends }),
		Walsender:  part(func(c CPU) float64 { return c.Walsender }),
		Process:    part(func(c CPU) float64 { return c.Process }),
		Autovacuum: part(func(c CPU) float64 { return c.Autovacuum }),
	}
}

// PrintPreferences writes RunPreferences' table.
func PrintPreferences(w io.Writer, res PreferencesResult) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	runs := func(v []float64) string {
		s := ""
		for i, x := range v {
			if i > 0 {
				s += " "
			}
			s += fmt.Sprintf("%.2f", x)
		}
		return s
	}
	fmt.Fprintf(tw, "students\t%d\t(ranges × slice %d × %d, %d in flight, run-ahead %d)\n", res.Users, res.Ranges, res.SliceSize, res.SliceInFlight, res.RunAhead)
	fmt.Fprintf(tw, "preferences\t%s\t(muted %d, quiet %d, type rules %d, capped %d students)\n", res.Preferences, res.Seeded.Muted, res.Seeded.Quiet, res.Seeded.TypeRules, res.Seeded.Capped)
	fmt.Fprintf(tw, "fan-out, preferences\t%.2f s\t(median of %d: %s)\n", res.FanoutSeconds, len(res.FanoutRuns), runs(res.FanoutRuns))
	fmt.Fprintf(tw, "fan-out, none\t%.2f s\t(median of %d: %s)\n", res.PlainFanoutSeconds, len(res.PlainFanoutRuns), runs(res.PlainFanoutRuns))
	fmt.Fprintf(tw, "ratio\t%.3f\t(with / without; target ≤ 1.15; per pair: %s)\n", res.Ratio, runs(res.PairRatios))
	if res.FanoutCPU.Backends > 0 {
		cpu := func(c CPU) string {
			return fmt.Sprintf("backends %.2f, walsender %.2f, this process %.2f", c.Backends, c.Walsender, c.Process)
		}
		fmt.Fprintf(tw, "CPU s, preferences\t%s\t(medians; Kafka's broker not counted)\n", cpu(res.FanoutCPU))
		fmt.Fprintf(tw, "CPU s, none\t%s\n", cpu(res.PlainFanoutCPU))
	}
	fmt.Fprintf(tw, "held back per event\tmuted %d, deferred %d, capped %d, silenced %d\t(of %d notified)\n", res.Muted, res.Deferred, res.Capped, res.Silenced, res.Rows)
	if r := res.Release; r != nil {
		fmt.Fprintf(tw, "release\t%d deferred devices (%d students), %d released in %d commands\n", r.DeferredDevices, r.DeferredStudents, r.ReleasedDevices, r.Commands)
		fmt.Fprintf(tw, "release, first\t%.2f s\t(after the quiet hours' end; target ≤ 2)\n", r.FirstSeconds)
		fmt.Fprintf(tw, "release, last\t%.2f s\t(target ≤ 60 for 300,000)\n", r.LastSeconds)
	}
	fmt.Fprintf(tw, "load average\t%s → %s\t(1/5/15 min; the machine is shared)\n", res.LoadAverageStart, res.LoadAverageEnd)
	_ = tw.Flush()
}
