package seed

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/notify-dev/notify/services/push/provider"
)

// DefaultSubsRatio is subscriptions per student in the reference data set:
// 1,097,488 subscriptions for 1,000,000 students.
const DefaultSubsRatio = 1.097488

// DefaultPushBaseURL points seeded endpoints at the local mock push service.
const DefaultPushBaseURL = "https://127.0.0.1:8443/wpush/"

// maxBrowsers caps subscriptions per student: "some students have 2–3".
const maxBrowsers = 3

// ErrAlreadySeeded is returned when the database already holds a course;
// seeding again would double the data.
var ErrAlreadySeeded = errors.New("database already holds seed data")

// Options configures Load.
type Options struct {
	// Users is the number of students. Required, ≥ 1.
	Users int
	// SubsRatio is subscriptions per student. Default (0) DefaultSubsRatio;
	// at most 3 (no student has more than three browsers).
	SubsRatio float64
	// NoSubscriptions seeds students only, ignoring SubsRatio.
	NoSubscriptions bool
	// Seed makes ids and keys reproducible. Default 1.
	Seed int64
	// PushBaseURL prefixes each endpoint; the subscription id follows.
	// Default DefaultPushBaseURL.
	PushBaseURL string
	// FCMRatio and APNsRatio are app devices per student besides the Web
	// Push subscriptions: round(Users × ratio) devices of each platform, at
	// most one per student (ratio ≤ 1) — FCM devices on the first
	// students, APNs devices on the last, so a ratio of 0.5 each gives
	// every student one app device. Their ids follow the subscriptions'
	// (FCM first). Default 0: Web Push only.
	FCMRatio, APNsRatio float64
	// FCMToken makes the registration token of the FCM device with id id,
	// one the FCM mock recognises (notify seed passes pushmock.FCMToken of
	// the dev project; seed cannot import the mock, which imports it).
	// Required when FCMRatio > 0.
	FCMToken func(id int64) string
	// Preferences, if set, gives shares of the students preferences
	// (ApplyPreferences) once they are enrolled. Default nil: none.
	Preferences *Preferences
	// Progress, if set, is called about once a second and at the end.
	Progress func(Progress)
	// DevicesOnly writes the devices alone: no instructor, course, users
	// or enrollments, which come from elsewhere (the roster's topics in
	// `notify demo --roster`). UserID is then required: student i's id,
	// whose devices these are.
	DevicesOnly bool
	UserID      func(i int) uuid.UUID
}

// APNsToken is the device token of seeded APNs device id: 64 hex digits,
// deterministic, so the mock's fault sets (by token) are reproducible.
func APNsToken(id int64) string { return fmt.Sprintf("%064x", id) }

// Progress is a snapshot of a running Load.
type Progress struct {
	Rows    int64         // rows written so far, all tables
	Total   int64         // rows to write
	Elapsed time.Duration // since Load started
	// Vacuuming is set once every row is written: Load then vacuums and
	// analyses the seeded tables (seconds per million rows).
	Vacuuming bool
}

// Result describes a finished seed.
type Result struct {
	CourseID      string `json:"course_id"`
	InstructorID  string `json:"instructor_id"`
	Users         int64  `json:"users"`
	Subscriptions int64  `json:"subscriptions"`
	FCMDevices    int64  `json:"fcm_devices"`
	APNsDevices   int64  `json:"apns_devices"`
	Seed          int64  `json:"seed"`
	// Preferences is how many students got each group's preferences
	// (absent without Options.Preferences).
	Preferences *PreferenceCounts `json:"preferences,omitempty"`
	Seconds     float64           `json:"seconds"`
}

func (o Options) withDefaults() Options {
	if o.NoSubscriptions {
		o.SubsRatio = 0
	} else if o.SubsRatio == 0 {
		o.SubsRatio = DefaultSubsRatio
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.PushBaseURL == "" {
		o.PushBaseURL = DefaultPushBaseURL
	}
	return o
}

func (o Options) validate() error {
	switch {
	case o.Users < 1 || o.Users > 100_000_000:
		return fmt.Errorf("users must be between 1 and 100000000, got %d", o.Users)
	case o.SubsRatio < 0 || o.SubsRatio > maxBrowsers || math.IsNaN(o.SubsRatio):
		return fmt.Errorf("subs-ratio must be between 0 and %d, got %v", maxBrowsers, o.SubsRatio)
	case o.FCMRatio < 0 || o.FCMRatio > 1 || math.IsNaN(o.FCMRatio):
		return fmt.Errorf("fcm-ratio must be between 0 and 1 (one FCM device per student at most), got %v", o.FCMRatio)
	case o.APNsRatio < 0 || o.APNsRatio > 1 || math.IsNaN(o.APNsRatio):
		return fmt.Errorf("apns-ratio must be between 0 and 1 (one APNs device per student at most), got %v", o.APNsRatio)
	case o.FCMRatio > 0 && o.FCMToken == nil:
		return errors.New("seed: an FCM token function is required with fcm-ratio > 0")
	case o.DevicesOnly && o.UserID == nil:
		return errors.New("seed: a user id function is required to seed devices only")
	case o.DevicesOnly && o.Preferences != nil:
		return errors.New("seed: preferences need the seed's own students, not devices only")
	case o.Preferences != nil:
		return o.Preferences.validate()
	}
	return nil
}

// Subscriptions returns how many subscriptions Load creates for o.
func (o Options) Subscriptions() int64 {
	o = o.withDefaults()
	return int64(math.Round(float64(o.Users) * o.SubsRatio))
}

// AppDevices returns how many FCM and APNs devices Load creates for o.
func (o Options) AppDevices() (fcm, apns int64) {
	o = o.withDefaults()
	return int64(math.Round(float64(o.Users) * o.FCMRatio)), int64(math.Round(float64(o.Users) * o.APNsRatio))
}

// Load creates one instructor, one course, o.Users students enrolled in it
// and round(Users × SubsRatio) push subscriptions, with COPY on three
// connections at once while all cores derive subscription keys. It refuses
// (ErrAlreadySeeded) when the database already has a course.
func Load(ctx context.Context, pool *pgxpool.Pool, o Options) (Result, error) {
	o = o.withDefaults()
	if err := o.validate(); err != nil {
		return Result{}, err
	}
	start := time.Now()
	var n int64
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM courses").Scan(&n); err != nil {
		return Result{}, fmt.Errorf("check for existing seed: %w", err)
	}
	if n > 0 {
		return Result{}, ErrAlreadySeeded
	}

	ds := newDataset(o)
	ds.userID = o.UserID
	res := Result{
		CourseID:      uuidString(ds.course),
		InstructorID:  uuidString(ds.instructor),
		Users:         int64(o.Users),
		Subscriptions: int64(ds.subs),
		Seed:          o.Seed,
	}
	res.FCMDevices, res.APNsDevices = o.AppDevices()
	var written atomic.Int64
	total := 2*res.Users + res.Subscriptions + res.FCMDevices + res.APNsDevices
	if o.DevicesOnly {
		total -= 2 * res.Users
		res.CourseID, res.InstructorID = "", ""
	}
	snapshot := func() Progress { return Progress{Rows: written.Load(), Total: total, Elapsed: time.Since(start)} }

	stopProgress := make(chan struct{})
	var progressDone sync.WaitGroup
	if o.Progress != nil {
		progressDone.Add(1)
		go func() {
			defer progressDone.Done()
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-stopProgress:
					return
				case <-t.C:
					o.Progress(snapshot())
				}
			}
		}()
	}

	err := pool.AcquireFunc(ctx, func(c *pgxpool.Conn) error {
		if o.DevicesOnly {
			return nil
		}
		return pgx.BeginFunc(ctx, c.Conn(), func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO users (id, name) VALUES ($1, 'Instructor')", ds.instructor); err != nil {
				return fmt.Errorf("insert instructor: %w", err)
			}
			_, err := tx.Exec(ctx, "INSERT INTO courses (id, instructor_id, title) VALUES ($1, $2, $3)",
				ds.course, ds.instructor, fmt.Sprintf("Course for %d students", o.Users))
			if err != nil {
				return fmt.Errorf("insert course: %w", err)
			}
			return nil
		})
	})
	if err != nil {
		close(stopProgress)
		return res, err
	}

	g, gctx := errgroup.WithContext(ctx)
	if !o.DevicesOnly {
		g.Go(func() error {
			return copyTable(gctx, pool, "users", []string{"id", "name"}, &written, res.Users, func(i int, row []any) {
				row[0] = ds.user(i)
				row[1] = "Student " + strconv.Itoa(i+1)
			})
		})
		g.Go(func() error {
			return copyTable(gctx, pool, "enrollments", []string{"course_id", "user_id", "enrolled_at"}, &written, res.Users, func(i int, row []any) {
				row[0] = ds.course
				row[1], row[2] = ds.user(i), ds.enrolledAt(i)
			})
		})
	}
	g.Go(func() error { return copySubscriptions(gctx, pool, ds, o, &written) })
	if apps := res.FCMDevices + res.APNsDevices; apps > 0 {
		g.Go(func() error {
			return copyTable(gctx, pool, "push_subscriptions", []string{"id", "user_id", "platform", "token", "environment"}, &written, apps, func(i int, row []any) {
				id := res.Subscriptions + int64(i) + 1
				row[0] = id
				if k := int64(i); k < res.FCMDevices {
					row[1], row[2], row[3], row[4] = ds.user(int(k)), string(provider.FCM), o.FCMToken(id), nil
				} else {
					k -= res.FCMDevices
					row[1], row[2], row[3], row[4] = ds.user(o.Users-1-int(k)), string(provider.APNs), APNsToken(id), "production"
				}
			})
		})
	}
	err = g.Wait()
	close(stopProgress)
	progressDone.Wait()
	if err != nil {
		return res, err
	}
	// Later subscriptions created through the API must not collide with the
	// seeded ids 1..M.
	if ids := res.Subscriptions + res.FCMDevices + res.APNsDevices; ids > 0 {
		if _, err := pool.Exec(ctx, "SELECT setval(pg_get_serial_sequence('push_subscriptions', 'id'), $1)", ids); err != nil {
			return res, fmt.Errorf("advance subscription id sequence: %w", err)
		}
	}
	if o.Preferences != nil {
		c, err := ApplyPreferences(ctx, pool, res.CourseID, *o.Preferences)
		if err != nil {
			return res, err
		}
		res.Preferences = &c
	}
	// VACUUM, not only ANALYZE: a freshly COPYed row carries no hint bits
	// and its page is not all-visible, so the first event after a seed
	// would set every row's hint bits (and write the pages again) and read
	// the heap behind every enrollment its index-only scans return, then
	// race autovacuum doing the same. A long-lived database has done that
	// long ago: the first event of a benchmark must cost what any later
	// one does (bench history compares the last event with the first).
	if o.Progress != nil {
		p := snapshot()
		p.Vacuuming = true
		o.Progress(p)
	}
	vacuum := "VACUUM (ANALYZE) users, enrollments, push_subscriptions"
	if o.DevicesOnly {
		vacuum = "VACUUM (ANALYZE) push_subscriptions"
	}
	if _, err := pool.Exec(ctx, vacuum); err != nil {
		return res, fmt.Errorf("vacuum the seeded tables: %w", err)
	}
	res.Seconds = time.Since(start).Seconds()
	if o.Progress != nil {
		o.Progress(snapshot())
	}
	return res, nil
}

// dataset is everything Load writes, derived from the seed alone. It
// holds no row: student i's id and enrolment time are derived from (seed,
// i) when its rows are written, so memory stays flat whatever the
// audience (about 1.4 bytes per student: the extra browsers' owners and a
// count per student while they are drawn) — a 10M-student seed streams
// like a 1,000-student one.
type dataset struct {
	seed               uint64
	userID             func(i int) uuid.UUID // Options.UserID
	instructor, course [16]byte
	// subs is the subscription count. Subscription index i (id i+1) below
	// firsts belongs to student i, every student's first browser while
	// subscriptions last; extra[i-firsts] owns the ones after.
	subs, firsts int
	extra        []int32
}

// Enrolment times spread over the year before a fixed epoch so that every
// seeded student is enrolled before anything published today.
var enrolEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newDataset(o Options) *dataset {
	rng := rand.New(rand.NewPCG(uint64(o.Seed), 0x6e6f74696679))
	ds := &dataset{seed: uint64(o.Seed), instructor: newUUID(rng), course: newUUID(rng)}
	ds.subs = int(math.Round(float64(o.Users) * o.SubsRatio))
	ds.firsts = min(ds.subs, o.Users)
	// Extra browsers go to random students, at most three each.
	if n := ds.subs - ds.firsts; n > 0 {
		browsers := make([]uint8, o.Users)
		ds.extra = make([]int32, 0, n)
		for len(ds.extra) < n {
			u := rng.IntN(o.Users)
			if browsers[u] >= maxBrowsers-1 {
				continue
			}
			browsers[u]++
			ds.extra = append(ds.extra, int32(u))
		}
	}
	return ds
}

// student derives student i's id and enrolment time from (seed, i)
// alone: the same values whichever goroutine asks, in whatever order.
func (ds *dataset) student(i int) ([16]byte, time.Time) {
	p := rand.NewPCG(ds.seed^0x73747564656e74, uint64(i))
	id := uuidFrom(p.Uint64(), p.Uint64())
	const year = uint64(365 * 24 * time.Hour)
	return id, enrolEpoch.Add(-time.Duration(p.Uint64() % year))
}

// user is student i's id.
func (ds *dataset) user(i int) [16]byte {
	if ds.userID != nil {
		return ds.userID(i)
	}
	id, _ := ds.student(i)
	return id
}

// enrolledAt is student i's enrolment time, within the year before the epoch.
func (ds *dataset) enrolledAt(i int) time.Time {
	_, t := ds.student(i)
	return t
}

// owner is the student index of subscription index i.
func (ds *dataset) owner(i int) int {
	if i < ds.firsts {
		return i
	}
	return int(ds.extra[i-ds.firsts])
}

// newUUID returns a version-4 uuid from rng.
func newUUID(rng *rand.Rand) [16]byte { return uuidFrom(rng.Uint64(), rng.Uint64()) }

// uuidFrom makes a version-4 uuid of two random words.
func uuidFrom(a, b uint64) [16]byte {
	var u [16]byte
	for j := 0; j < 8; j++ {
		u[j] = byte(a >> (8 * j))
		u[8+j] = byte(b >> (8 * j))
	}
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return u
}

func uuidString(u [16]byte) string { return uuid.UUID(u).String() }

// copyTable COPYs n generated rows into table on its own connection.
// Every COPY commits synchronously (one WAL flush per table, nothing to
// save there): VACUUM cannot set the hint bits of rows whose commit is not
// flushed yet, so after an asynchronous commit the vacuum at the end of
// Load left every page as it found it, and Load returning means the seed
// is durable.
func copyTable(ctx context.Context, pool *pgxpool.Pool, table string, cols []string, written *atomic.Int64, n int64, fill func(i int, row []any)) error {
	src := &genSource{n: int(n), row: make([]any, len(cols)), fill: fill, written: written}
	return pool.AcquireFunc(ctx, func(c *pgxpool.Conn) error {
		if _, err := c.Conn().CopyFrom(ctx, pgx.Identifier{table}, cols, src); err != nil {
			return fmt.Errorf("copy %s: %w", table, err)
		}
		return nil
	})
}

type genSource struct {
	i, n    int
	row     []any
	fill    func(i int, row []any)
	written *atomic.Int64
}

func (s *genSource) Next() bool {
	if s.i >= s.n {
		return false
	}
	s.fill(s.i, s.row)
	s.i++
	s.written.Add(1)
	return true
}
func (s *genSource) Values() ([]any, error) { return s.row, nil }
func (s *genSource) Err() error             { return nil }

// subChunk is a run of consecutive subscriptions with derived keys.
type subChunk struct {
	first  int // subscription index (id - 1)
	p256dh [][]byte
	auth   [][]byte
}

const chunkSize = 2048

// copySubscriptions derives keys on all cores and streams them into COPY as
// chunks complete; COPY does not care about row order.
func copySubscriptions(ctx context.Context, pool *pgxpool.Pool, ds *dataset, o Options, written *atomic.Int64) error {
	m := ds.subs
	if m == 0 {
		return nil
	}
	chunks := make(chan subChunk, 64)
	var next atomic.Int64
	workers := runtime.GOMAXPROCS(0)
	g, gctx := errgroup.WithContext(ctx)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		g.Go(func() error {
			defer wg.Done()
			for {
				first := int(next.Add(chunkSize)) - chunkSize
				if first >= m {
					return nil
				}
				last := min(first+chunkSize, m)
				c := subChunk{first: first, p256dh: make([][]byte, 0, last-first), auth: make([][]byte, 0, last-first)}
				for i := first; i < last; i++ {
					k, err := DeriveSubscriptionKeys(o.Seed, int64(i+1))
					if err != nil {
						return err
					}
					c.p256dh = append(c.p256dh, k.P256DH())
					c.auth = append(c.auth, append([]byte(nil), k.Auth[:]...))
				}
				select {
				case chunks <- c:
				case <-gctx.Done():
					return gctx.Err()
				}
			}
		})
	}
	go func() { wg.Wait(); close(chunks) }()
	g.Go(func() error {
		src := &chunkSource{ch: chunks, ds: ds, base: o.PushBaseURL, row: make([]any, 5), written: written}
		err := pool.AcquireFunc(gctx, func(c *pgxpool.Conn) error {
			_, err := c.Conn().CopyFrom(gctx, pgx.Identifier{"push_subscriptions"},
				[]string{"id", "user_id", "endpoint", "p256dh", "auth"}, src)
			return err
		})
		if err != nil {
			// Unblock the derivers so errgroup can return.
			for range chunks {
			}
			return fmt.Errorf("copy push_subscriptions: %w", err)
		}
		return nil
	})
	return g.Wait()
}

type chunkSource struct {
	ch      <-chan subChunk
	cur     subChunk
	j       int
	ds      *dataset
	base    string
	row     []any
	written *atomic.Int64
}

func (s *chunkSource) Next() bool {
	for s.j >= len(s.cur.p256dh) {
		c, ok := <-s.ch
		if !ok {
			return false
		}
		s.cur, s.j = c, 0
	}
	i := s.cur.first + s.j
	id := int64(i + 1)
	s.row[0] = id
	s.row[1] = s.ds.user(s.ds.owner(i))
	s.row[2] = s.base + strconv.FormatInt(id, 10)
	s.row[3] = s.cur.p256dh[s.j]
	s.row[4] = s.cur.auth[s.j]
	s.j++
	s.written.Add(1)
	return true
}
func (s *chunkSource) Values() ([]any, error) { return s.row, nil }
func (s *chunkSource) Err() error             { return nil }
