package roster

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	_ "time/tzdata" // IANA zones on hosts without /usr/share/zoneinfo
	"unicode/utf8"

	"github.com/google/uuid"
	"golang.org/x/text/language"
)

// MaxNameBytes is the longest user name accepted (UTF-8 bytes).
const MaxNameBytes = 200

// MaxTitleBytes is the longest course title accepted (UTF-8 bytes).
const MaxTitleBytes = 1000

// ErrInvalid is returned (wrapped) for a change Apply refuses: a missing
// key, a name or title out of bounds, a locale or time zone that is not
// one. Nothing of the batch is written.
var ErrInvalid = errors.New("invalid roster change")

// User is one row of users as the platform has it. Locale and TimeZone
// are nil when unknown.
type User struct {
	ID       uuid.UUID
	Name     string
	Locale   *string // BCP 47, e.g. "pt-BR"
	TimeZone *string // IANA, e.g. "America/Sao_Paulo"
}

// Course is one row of courses.
type Course struct {
	ID, InstructorID uuid.UUID
	Title            string
}

// Enrollment is one student in one course. A zero EnrolledAt means the
// change's At.
type Enrollment struct {
	CourseID, UserID uuid.UUID
	EnrolledAt       time.Time
}

// Op is what a Change does.
type Op int

const (
	// OpUpsert creates or updates the row.
	OpUpsert Op = iota
	// OpDelete deletes it: a user is erased, a course marked deleted (its
	// open enrollment periods end), an enrollment's open period ends.
	OpDelete
)

func (o Op) String() string {
	switch o {
	case OpUpsert:
		return "upsert"
	case OpDelete:
		return "delete"
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// Change is one change of the roster. Exactly one of User, Course and
// Enrollment is set; a delete needs only the key fields.
type Change struct {
	Op         Op
	User       *User
	Course     *Course
	Enrollment *Enrollment
	// Pos is the change's source position (Debezium's source.lsn, or the
	// record's Kafka offset). A change is applied only when it is not
	// older than the row's. nil: unordered (API writes), always applied,
	// and the row then takes any later position.
	Pos *int64
	// At is when the change happened at the source. An enrollment delete
	// ends the period at At, a course delete marks the course deleted at
	// At. Zero: now.
	At time.Time
}

// Table names the table a change is for: "users", "courses" or
// "enrollments" ("" when none or several are set).
func (c Change) Table() string {
	n := 0
	t := ""
	if c.User != nil {
		n, t = n+1, "users"
	}
	if c.Course != nil {
		n, t = n+1, "courses"
	}
	if c.Enrollment != nil {
		n, t = n+1, "enrollments"
	}
	if n != 1 {
		return ""
	}
	return t
}

// Result counts what Apply did.
type Result struct {
	// Users and Courses: rows upserted; Courses also counts courses
	// marked deleted.
	Users, Courses int
	// Enrollments: enrollment upserts applied (a period started or kept).
	Enrollments int
	// Dropped: enrollment periods ended, by an enrollment delete or a
	// course delete.
	Dropped int
	// Erased: users erased.
	Erased int
	// Stale: changes skipped because the row holds a newer one (or, for a
	// delete, because there was nothing left to delete).
	Stale int
}

// Add adds o's counts to r.
func (r *Result) Add(o Result) {
	r.Users += o.Users
	r.Courses += o.Courses
	r.Enrollments += o.Enrollments
	r.Dropped += o.Dropped
	r.Erased += o.Erased
	r.Stale += o.Stale
}

// Validate checks a user as Apply stores it: a name of 1 to MaxNameBytes
// bytes of UTF-8 without NUL, a BCP 47 locale, an IANA time zone.
func (u User) Validate() error {
	if u.ID == uuid.Nil {
		return fmt.Errorf("%w: user id is the nil uuid", ErrInvalid)
	}
	if err := checkText("user name", u.Name, MaxNameBytes); err != nil {
		return err
	}
	if u.Locale != nil && !locales.valid(*u.Locale) {
		return fmt.Errorf("%w: locale %q is not a BCP 47 language tag (e.g. \"en\", \"pt-BR\")", ErrInvalid, *u.Locale)
	}
	if u.TimeZone != nil && !zones.valid(*u.TimeZone) {
		return fmt.Errorf("%w: time zone %q is not an IANA zone name (e.g. \"Europe/Berlin\")", ErrInvalid, *u.TimeZone)
	}
	return nil
}

// validity caches the answers of check: a platform's users share a few
// hundred zones and locales, and parsing one (time.LoadLocation reads the
// zone's tzdata) costs more than decoding the whole record.
type validity struct {
	check func(string) bool
	mu    sync.Mutex
	seen  map[string]bool
}

// maxValidity bounds each cache: there are about 600 IANA zones; past the
// bound (values that differ per user) answers are computed each time.
const maxValidity = 4096

func (v *validity) valid(s string) bool {
	v.mu.Lock()
	ok, hit := v.seen[s]
	v.mu.Unlock()
	if hit {
		return ok
	}
	ok = v.check(s)
	v.mu.Lock()
	if v.seen == nil {
		v.seen = map[string]bool{}
	}
	if len(v.seen) < maxValidity {
		v.seen[s] = ok
	}
	v.mu.Unlock()
	return ok
}

var (
	locales = &validity{check: func(s string) bool {
		_, err := language.Parse(s)
		return err == nil && s != ""
	}}
	// LoadLocation takes "" for UTC and "Local" for the host's zone;
	// neither is a zone name a platform stores.
	zones = &validity{check: func(s string) bool {
		_, err := time.LoadLocation(s)
		return err == nil && s != "" && s != "Local"
	}}
)

// Validate checks a course as Apply stores it.
func (c Course) Validate() error {
	if c.ID == uuid.Nil || c.InstructorID == uuid.Nil {
		return fmt.Errorf("%w: course id and instructor id are required", ErrInvalid)
	}
	return checkText("course title", c.Title, MaxTitleBytes)
}

func checkText(what, s string, maxBytes int) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: %s is empty", ErrInvalid, what)
	case len(s) > maxBytes:
		return fmt.Errorf("%w: %s is %d bytes, longer than %d", ErrInvalid, what, len(s), maxBytes)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s is not UTF-8", ErrInvalid, what)
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%w: %s contains a NUL byte", ErrInvalid, what)
	}
	return nil
}

// validate checks what Apply needs of one change.
func (c Change) validate() error {
	if c.Op != OpUpsert && c.Op != OpDelete {
		return fmt.Errorf("%w: unknown op %d", ErrInvalid, int(c.Op))
	}
	switch c.Table() {
	case "users":
		if c.Op == OpDelete {
			if c.User.ID == uuid.Nil {
				return fmt.Errorf("%w: user id is the nil uuid", ErrInvalid)
			}
			return nil
		}
		return c.User.Validate()
	case "courses":
		if c.Op == OpDelete {
			if c.Course.ID == uuid.Nil {
				return fmt.Errorf("%w: course id is the nil uuid", ErrInvalid)
			}
			return nil
		}
		return c.Course.Validate()
	case "enrollments":
		if c.Enrollment.CourseID == uuid.Nil || c.Enrollment.UserID == uuid.Nil {
			return fmt.Errorf("%w: enrollment course id and user id are required", ErrInvalid)
		}
		return nil
	}
	return fmt.Errorf("%w: a change sets exactly one of User, Course and Enrollment", ErrInvalid)
}
