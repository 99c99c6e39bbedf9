package roster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Apply applies changes in order inside tx, as a few set-based statements
// per batch rather than one per change. It writes nothing itself outside
// the roster tables (and, for an erasure, the tables it erases from); the
// caller commits. An invalid change (ErrInvalid, with its index) fails the
// whole call before anything is written.
//
// Changes are gathered into rounds in which no key is touched twice in
// ways whose order matters: a round holds at most one change per user,
// course and enrollment, except that repeated upserts of one row coalesce
// into the newest; a delete after anything else of the same key, an
// erasure of a user with enrollment changes in the round, or a course
// deletion with enrollment changes of that course, starts a new round.
// Each round then runs its statements in a fixed order. Applying the
// rounds one after another is applying the changes one after another.
func Apply(ctx context.Context, tx pgx.Tx, changes []Change) (Result, error) {
	var res Result
	for i, c := range changes {
		if err := c.validate(); err != nil {
			return res, fmt.Errorf("change %d: %w", i, err)
		}
	}
	now := time.Now()
	r := newRound()
	for _, c := range changes {
		if c.At.IsZero() {
			c.At = now
		}
		if r.add(c) {
			continue
		}
		if err := r.flush(ctx, tx, &res); err != nil {
			return res, err
		}
		r = newRound()
		if !r.add(c) {
			panic("roster: a change conflicts with an empty round")
		}
	}
	if err := r.flush(ctx, tx, &res); err != nil {
		return res, err
	}
	if res.Erased > 0 {
		if _, err := tx.Exec(ctx, sqlCount, CounterErasures, res.Erased); err != nil {
			return res, fmt.Errorf("count erasures: %w", err)
		}
	}
	return res, nil
}

type keyKind byte

const (
	keyUser           keyKind = iota // a: user
	keyCourse                        // a: course
	keyEnrollment                    // a: course, b: user
	keyCourseEnrolled                // a: course with enrollment changes
	keyUserEnrolled                  // a: user with enrollment changes
)

type roundKey struct {
	kind keyKind
	a, b uuid.UUID
}

// round is one set of changes without order between them (see Apply).
type round struct {
	keys        map[roundKey]Op
	users       map[uuid.UUID]int // index in userUps
	userUps     []Change
	erasures    []Change
	courses     map[uuid.UUID]int
	courseUps   []Change
	courseDels  []Change
	enrolled    map[[2]uuid.UUID]int
	enrollUps   []Change
	enrollDels  []Change
	stale       int            // coalesced upserts older than the one kept
	coalescedBy map[string]int // upserts superseded by a newer one, by table
}

func newRound() *round {
	return &round{
		keys:        map[roundKey]Op{},
		users:       map[uuid.UUID]int{},
		courses:     map[uuid.UUID]int{},
		enrolled:    map[[2]uuid.UUID]int{},
		coalescedBy: map[string]int{},
	}
}

// newer reports whether b (later in the stream) supersedes a: it does
// unless both are ordered and b is older.
func newer(a, b Change) bool {
	return a.Pos == nil || b.Pos == nil || *b.Pos >= *a.Pos
}

// add puts c in the round, or reports false when c conflicts with a change
// already in it.
func (r *round) add(c Change) bool {
	switch {
	case c.User != nil:
		k := roundKey{kind: keyUser, a: c.User.ID}
		op, seen := r.keys[k]
		if c.Op == OpUpsert {
			if seen && op == OpDelete {
				return false
			}
			if seen {
				r.coalesce(&r.userUps[r.users[c.User.ID]], c, "users")
				return true
			}
			r.keys[k] = OpUpsert
			r.users[c.User.ID] = len(r.userUps)
			r.userUps = append(r.userUps, c)
			return true
		}
		if seen {
			return false
		}
		if _, enrolled := r.keys[roundKey{kind: keyUserEnrolled, a: c.User.ID}]; enrolled {
			return false
		}
		r.keys[k] = OpDelete
		r.erasures = append(r.erasures, c)
		return true
	case c.Course != nil:
		k := roundKey{kind: keyCourse, a: c.Course.ID}
		op, seen := r.keys[k]
		if c.Op == OpUpsert {
			if seen && op == OpDelete {
				return false
			}
			if seen {
				r.coalesce(&r.courseUps[r.courses[c.Course.ID]], c, "courses")
				return true
			}
			r.keys[k] = OpUpsert
			r.courses[c.Course.ID] = len(r.courseUps)
			r.courseUps = append(r.courseUps, c)
			return true
		}
		if seen {
			return false
		}
		if _, enrolled := r.keys[roundKey{kind: keyCourseEnrolled, a: c.Course.ID}]; enrolled {
			return false
		}
		r.keys[k] = OpDelete
		r.courseDels = append(r.courseDels, c)
		return true
	default:
		e := c.Enrollment
		if op, seen := r.keys[roundKey{kind: keyCourse, a: e.CourseID}]; seen && op == OpDelete {
			return false
		}
		if op, seen := r.keys[roundKey{kind: keyUser, a: e.UserID}]; seen && op == OpDelete {
			return false
		}
		k := roundKey{kind: keyEnrollment, a: e.CourseID, b: e.UserID}
		op, seen := r.keys[k]
		if seen && (op != c.Op || c.Op == OpDelete) {
			return false
		}
		if seen {
			// A second upsert of an open period keeps the period the first
			// started (its enrolled_at) and takes the newer position.
			kept := &r.enrollUps[r.enrolled[[2]uuid.UUID{e.CourseID, e.UserID}]]
			if newer(*kept, c) {
				kept.Pos = c.Pos
				r.coalescedBy["enrollments"]++
			} else {
				r.stale++
			}
			return true
		}
		r.keys[k] = c.Op
		r.keys[roundKey{kind: keyCourseEnrolled, a: e.CourseID}] = OpUpsert
		r.keys[roundKey{kind: keyUserEnrolled, a: e.UserID}] = OpUpsert
		if c.Op == OpUpsert {
			r.enrolled[[2]uuid.UUID{e.CourseID, e.UserID}] = len(r.enrollUps)
			r.enrollUps = append(r.enrollUps, c)
		} else {
			r.enrollDels = append(r.enrollDels, c)
		}
		return true
	}
}

// coalesce keeps in *kept whichever of it and c applying both in order
// leaves in the row.
func (r *round) coalesce(kept *Change, c Change, table string) {
	if newer(*kept, c) {
		*kept = c
		r.coalescedBy[table]++
		return
	}
	r.stale++
}

func (r *round) empty() bool {
	return len(r.userUps)+len(r.erasures)+len(r.courseUps)+len(r.courseDels)+len(r.enrollUps)+len(r.enrollDels) == 0
}

// flush runs the round's statements and adds their counts to res.
func (r *round) flush(ctx context.Context, tx pgx.Tx, res *Result) error {
	if r.empty() {
		res.Stale += r.stale
		return nil
	}
	res.Stale += r.stale
	res.Users += r.coalescedBy["users"]
	res.Courses += r.coalescedBy["courses"]
	res.Enrollments += r.coalescedBy["enrollments"]
	if len(r.userUps) > 0 {
		n := len(r.userUps)
		ids, names, locales, zones, pos := make([][16]byte, n), make([]string, n), make([]*string, n), make([]*string, n), make([]*int64, n)
		for i, c := range r.userUps {
			ids[i], names[i], locales[i], zones[i], pos[i] = c.User.ID, c.User.Name, c.User.Locale, c.User.TimeZone, c.Pos
		}
		tag, err := tx.Exec(ctx, sqlUpsertUsers, ids, names, locales, zones, pos)
		if err != nil {
			return fmt.Errorf("upsert %d users: %w", n, err)
		}
		res.Users += int(tag.RowsAffected())
		res.Stale += n - int(tag.RowsAffected())
	}
	if len(r.erasures) > 0 {
		if err := erase(ctx, tx, r.erasures, res); err != nil {
			return err
		}
	}
	if len(r.courseUps) > 0 {
		n := len(r.courseUps)
		ids, instructors, titles, pos := make([][16]byte, n), make([][16]byte, n), make([]string, n), make([]*int64, n)
		for i, c := range r.courseUps {
			ids[i], instructors[i], titles[i], pos[i] = c.Course.ID, c.Course.InstructorID, c.Course.Title, c.Pos
		}
		tag, err := tx.Exec(ctx, sqlUpsertCourses, ids, instructors, titles, pos)
		if err != nil {
			return fmt.Errorf("upsert %d courses: %w", n, err)
		}
		res.Courses += int(tag.RowsAffected())
		res.Stale += n - int(tag.RowsAffected())
	}
	if len(r.courseDels) > 0 {
		n := len(r.courseDels)
		ids, pos, at := make([][16]byte, n), make([]*int64, n), make([]time.Time, n)
		for i, c := range r.courseDels {
			ids[i], pos[i], at[i] = c.Course.ID, c.Pos, c.At
		}
		// Ordered against enrollments applied at the same time from the
		// other topic, as an erasure is (sqlEraseLock).
		if _, err := tx.Exec(ctx, sqlEraseLock); err != nil {
			return fmt.Errorf("delete %d courses: %w", n, err)
		}
		var gone, ended int
		if err := tx.QueryRow(ctx, sqlDeleteCourses, ids, pos, at).Scan(&gone, &ended); err != nil {
			return fmt.Errorf("delete %d courses: %w", n, err)
		}
		res.Courses += gone
		res.Stale += n - gone
		res.Dropped += ended
	}
	if len(r.enrollUps) > 0 {
		n := len(r.enrollUps)
		courses, users, at, pos := make([][16]byte, n), make([][16]byte, n), make([]time.Time, n), make([]*int64, n)
		for i, c := range r.enrollUps {
			e := c.Enrollment
			courses[i], users[i], at[i], pos[i] = e.CourseID, e.UserID, e.EnrolledAt, c.Pos
			if at[i].IsZero() {
				at[i] = c.At
			}
		}
		kept, started, err := upsertEnrollments(ctx, tx, courses, users, at, pos)
		if err != nil {
			return fmt.Errorf("upsert %d enrollments: %w", n, err)
		}
		applied := kept + started
		res.Enrollments += applied
		res.Stale += n - applied
	}
	if len(r.enrollDels) > 0 {
		n := len(r.enrollDels)
		courses, users, pos, at := make([][16]byte, n), make([][16]byte, n), make([]*int64, n), make([]time.Time, n)
		for i, c := range r.enrollDels {
			courses[i], users[i], pos[i], at[i] = c.Enrollment.CourseID, c.Enrollment.UserID, c.Pos, c.At
		}
		tag, err := tx.Exec(ctx, sqlDropEnrollments, courses, users, pos, at)
		if err != nil {
			return fmt.Errorf("drop %d enrollments: %w", n, err)
		}
		res.Dropped += int(tag.RowsAffected())
		res.Stale += n - int(tag.RowsAffected())
	}
	return nil
}

// upsertEnrollments runs sqlUpsertEnrollments, and its guarded form when
// another writer started one of the periods meanwhile (a unique
// violation, rolled back to a savepoint).
func upsertEnrollments(ctx context.Context, tx pgx.Tx, courses, users [][16]byte, at []time.Time, pos []*int64) (kept, started int, err error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return 0, 0, err
	}
	err = sp.QueryRow(ctx, sqlUpsertEnrollments, courses, users, at, pos).Scan(&kept, &started)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" { // unique_violation
		if rerr := sp.Rollback(ctx); rerr != nil {
			return 0, 0, rerr
		}
		err = tx.QueryRow(ctx, sqlUpsertEnrollmentsGuarded, courses, users, at, pos).Scan(&kept, &started)
		return kept, started, err
	}
	if err != nil {
		_ = sp.Rollback(ctx)
		return 0, 0, err
	}
	return kept, started, sp.Commit(ctx)
}

// erase erases the users of deletes (see sqlEraseTargets).
func erase(ctx context.Context, tx pgx.Tx, dels []Change, res *Result) error {
	n := len(dels)
	ids, pos := make([][16]byte, n), make([]*int64, n)
	posOf := make(map[[16]byte]*int64, n)
	for i, c := range dels {
		ids[i], pos[i] = c.User.ID, c.Pos
		posOf[ids[i]] = c.Pos
	}
	if _, err := tx.Exec(ctx, sqlEraseLock); err != nil {
		return fmt.Errorf("erase %d users: %w", n, err)
	}
	rows, err := tx.Query(ctx, sqlEraseTargets, ids, pos)
	if err != nil {
		return fmt.Errorf("erase %d users: %w", n, err)
	}
	var targets [][16]byte
	var targetPos []*int64
	for rows.Next() {
		var id [16]byte
		var had bool
		if err := rows.Scan(&id, &had); err != nil {
			rows.Close()
			return fmt.Errorf("erase %d users: %w", n, err)
		}
		targets = append(targets, id)
		targetPos = append(targetPos, posOf[id])
		if had {
			res.Erased++
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("erase %d users: %w", n, err)
	}
	res.Stale += n - len(targets)
	if len(targets) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	b.Queue(sqlEraseFlagOn)
	for _, q := range []string{sqlEraseDeliveries, sqlEraseHolds, sqlEraseNotifications, sqlEraseTargetRanges, sqlEraseCursors, sqlEraseDevices} {
		b.Queue(q, targets)
	}
	b.Queue(sqlEraseEnrollments, targets, targetPos)
	b.Queue(sqlEraseIdempotency, targets)
	for _, q := range sqlEraseReferences {
		b.Queue(q, targets)
	}
	b.Queue(sqlEraseUsers, targets)
	b.Queue(sqlEraseFlagOff)
	b.Queue(sqlEraseTombstones, targets, targetPos)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("erase %d users: %w", len(targets), err)
	}
	return nil
}
