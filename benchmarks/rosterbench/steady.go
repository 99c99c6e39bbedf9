package rosterbench

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/services/roster/rostertest"
	"github.com/notify-dev/notify/streams"
)

// pollEvery is how often the steady load reads the roster's positions:
// the lag measured is late by up to this much.
const pollEvery = 10 * time.Millisecond

type partitionKey struct {
	topic     string
	partition int32
}

// sent is one change's produce call, by its offset.
type sent struct {
	offset int64
	at     time.Time
}

// step is the roster's position of a partition seen at a moment: every
// offset up to it was applied by then.
type step struct {
	offset int64
	at     time.Time
}

// steady writes cfg.Rate changes per second for cfg.Duration to the
// running service and measures each change's apply lag (Config.Rate);
// cpu is called once the last change is applied, to take the CPU figures.
func steady(ctx context.Context, cfg Config, res *Result, pool *pgxpool.Pool, adm *kadm.Client, group, usersT, coursesT, enrollT string, cpu func()) error {
	log := cfg.Logger
	cl, err := kgo.NewClient(append(streams.ClientOpts(cfg.Brokers, "bench-roster-producer"),
		kgo.ProducerLinger(time.Millisecond), kgo.MaxBufferedRecords(100_000))...)
	if err != nil {
		return err
	}
	defer cl.Close()

	var mu sync.Mutex
	var ferr error
	produced := map[partitionKey][]sent{}
	lsn := int64(1_000_000)
	var users, enrollments int64
	send := func(topic string, t rostertest.Table, op string, row map[string]any) {
		lsn++
		p := lsn
		now := time.Now()
		r := &kgo.Record{Topic: topic, Key: t.KeyOf(row, cfg.Schemas), Value: t.ValueOf(rostertest.Event{Op: op, After: row, LSN: &p, TsMs: now.UnixMilli()}, cfg.Schemas)}
		res.RecordBytes += int64(len(r.Value))
		cl.Produce(ctx, r, func(r *kgo.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if ferr == nil {
					ferr = err
				}
				return
			}
			k := partitionKey{r.Topic, r.Partition}
			produced[k] = append(produced[k], sent{r.Offset, now})
		})
	}

	// The positions, polled from the start.
	steps := map[partitionKey][]step{}
	pollCtx, stopPoll := context.WithCancel(ctx)
	polled := make(chan error, 1)
	go func() { polled <- pollPositions(pollCtx, pool, steps) }()
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		stopPoll()
		return <-polled
	}
	defer func() { _ = stop() }()

	for c := 1; c <= cfg.Courses; c++ {
		send(coursesT, rostertest.Courses, "c", map[string]any{"id": 10_000_000 + c, "teacher_id": c, "name": "Course " + strconv.Itoa(c)})
	}
	log.Info("steady load", "rate", cfg.Rate, "duration", cfg.Duration.String())
	start := time.Now()
	joined := start.Add(-time.Hour).UnixMicro()
	var k int64
	for {
		el := time.Since(start)
		if el >= cfg.Duration {
			break
		}
		for due := int64(el.Seconds() * float64(cfg.Rate)); k < due; k++ {
			u := k/2 + 1
			if k%2 == 0 {
				send(usersT, rostertest.Users, "c", map[string]any{"id": u, "full_name": "Student " + strconv.FormatInt(u, 10), "lang": "en", "tz": "Europe/Berlin", "created_at": "2026-01-01T00:00:00Z"})
				users++
			} else {
				send(enrollT, rostertest.Enrollments, "c", map[string]any{"course_id": 10_000_000 + 1 + (u-1)%int64(cfg.Courses), "member_id": u, "joined_at": joined})
				enrollments++
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	res.DurationSeconds = time.Since(start).Seconds()
	res.Changes = k + int64(cfg.Courses)
	res.RateSent = float64(k) / res.DurationSeconds
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	mu.Lock()
	err = ferr
	mu.Unlock()
	if err != nil {
		return err
	}
	if err := waitCommitted(ctx, adm, group, log, usersT, coursesT, enrollT); err != nil {
		return err
	}
	cpu()
	// The position commits with the apply, the offset after it: one more
	// poll has seen every position.
	time.Sleep(3 * pollEvery)
	if err := stop(); err != nil && ctx.Err() == nil {
		return err
	}

	var lags []float64
	for key, ss := range produced {
		st := steps[key]
		for _, s := range ss {
			i := sort.Search(len(st), func(i int) bool { return st[i].offset >= s.offset })
			if i == len(st) {
				return fmt.Errorf("rosterbench: %s[%d] offset %d was committed but never seen applied in roster_positions", key.topic, key.partition, s.offset)
			}
			lags = append(lags, float64(st[i].at.Sub(s.at))/1e6)
		}
	}
	slices.Sort(lags)
	res.LagSamples = len(lags)
	if n := len(lags); n > 0 {
		res.LagP50MS, res.LagP99MS, res.LagMaxMS = lags[n/2], lags[min(n-1, n*99/100)], lags[n-1]
	}
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM users), (SELECT count(*) FROM courses), (SELECT count(*) FROM enrollments)`).
		Scan(&res.RowsUsers, &res.RowsCourses, &res.RowsEnrollments); err != nil {
		return err
	}
	if res.RowsUsers != users || res.RowsCourses != int64(cfg.Courses) || res.RowsEnrollments != enrollments {
		return fmt.Errorf("rosterbench: applied %d users, %d courses, %d enrollments; wrote %d, %d, %d",
			res.RowsUsers, res.RowsCourses, res.RowsEnrollments, users, cfg.Courses, enrollments)
	}
	return nil
}

// pollPositions records every advance of the roster's positions into
// steps until ctx ends.
func pollPositions(ctx context.Context, pool *pgxpool.Pool, steps map[partitionKey][]step) error {
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for {
		rows, err := pool.Query(ctx, `SELECT topic, partition, kafka_offset FROM roster_positions`)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("poll roster_positions: %w", err)
		}
		now := time.Now()
		for rows.Next() {
			var k partitionKey
			var off int64
			if err := rows.Scan(&k.topic, &k.partition, &off); err != nil {
				rows.Close()
				return err
			}
			if st := steps[k]; len(st) == 0 || st[len(st)-1].offset < off {
				steps[k] = append(st, step{off, now})
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil && ctx.Err() == nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
