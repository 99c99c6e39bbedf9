// Package ids maps the ids a course platform hands notify — in roster
// records, API paths and bodies, token subjects and CLI flags — to the
// uuids notify keys its tables by.
//
// A uuid stays itself. Any other id (an integer, or text up to MaxBytes)
// maps to its UUIDv5 (RFC 9562 §5.5) in the operator's namespace,
// NOTIFY_ID_NAMESPACE: the same id always gives the same uuid, on every
// process, so nothing needs a lookup table; and the SHA-1 spreads even a
// platform's sequential integers evenly over the uuid space, which is what
// the fan-out's equal uuid ranges need. Without a namespace a non-uuid id
// is refused with an error naming the setting: guessing a namespace would
// make two deployments disagree on every id.
package ids

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"
)

// EnvNamespace names the environment variable holding the namespace uuid.
const EnvNamespace = "NOTIFY_ID_NAMESPACE"

// MaxBytes is the longest platform id accepted (UTF-8 bytes).
const MaxBytes = 128

// ErrUnmapped is returned (wrapped) for an id that cannot be mapped: empty,
// too long, not UTF-8, or not a uuid while no namespace is set.
var ErrUnmapped = errors.New("id cannot be mapped")

// Mapper maps platform ids to uuids. The zero Mapper accepts uuids only.
type Mapper struct {
	ns  uuid.UUID
	set bool
}

// New returns a Mapper for namespace ns.
func New(ns uuid.UUID) Mapper { return Mapper{ns: ns, set: true} }

// FromEnv reads EnvNamespace; unset or empty gives the zero Mapper, a value
// that is not a canonical uuid is an error naming the setting.
func FromEnv() (Mapper, error) {
	v := strings.TrimSpace(os.Getenv(EnvNamespace))
	if v == "" {
		return Mapper{}, nil
	}
	ns, err := parseCanonical(v)
	if err != nil {
		return Mapper{}, fmt.Errorf("%s=%q: not a uuid (want the 36-character form, e.g. one from `uuidgen`)", EnvNamespace, v)
	}
	return New(ns), nil
}

// Namespace reports the namespace and whether one is set.
func (m Mapper) Namespace() (uuid.UUID, bool) { return m.ns, m.set }

// Map returns the uuid of platform id s.
func (m Mapper) Map(s string) (uuid.UUID, error) {
	switch {
	case s == "":
		return uuid.UUID{}, fmt.Errorf("%w: empty", ErrUnmapped)
	case len(s) > MaxBytes:
		return uuid.UUID{}, fmt.Errorf("%w: %d bytes, longer than %d", ErrUnmapped, len(s), MaxBytes)
	case !utf8.ValidString(s):
		return uuid.UUID{}, fmt.Errorf("%w: not UTF-8", ErrUnmapped)
	}
	if u, err := parseCanonical(s); err == nil {
		if u == uuid.Nil {
			// An erasure leaves the nil uuid where an erased user was a
			// course's instructor or a material's author: no token or
			// record may name it.
			return uuid.UUID{}, fmt.Errorf("%w: the nil uuid stands for an erased user", ErrUnmapped)
		}
		return u, nil
	}
	if !m.set {
		return uuid.UUID{}, fmt.Errorf("%w: %s is not a uuid and %s is not set (set it to map the platform's own ids)", ErrUnmapped, strconv.Quote(s), EnvNamespace)
	}
	return uuid.NewSHA1(m.ns, []byte(s)), nil
}

// MapInt maps an integer id, spelled in decimal (what a platform's bigint
// primary key is everywhere else: in its URLs and in Debezium's records).
func (m Mapper) MapInt(n int64) (uuid.UUID, error) { return m.Map(strconv.FormatInt(n, 10)) }

// parseCanonical accepts the 36-character form only (any case): ids have
// one spelling, so "{…}" or 32 bare hex digits are platform text ids, not
// uuids.
func parseCanonical(s string) (uuid.UUID, error) {
	if len(s) != 36 {
		return uuid.UUID{}, errors.New("not a uuid")
	}
	return uuid.Parse(s)
}
