package api

import (
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// UUID is a 16-byte identifier that pgx reads and writes as Postgres uuid
// through its binary codec (no text round trip per row). Generating,
// parsing and formatting are github.com/google/uuid's.
type UUID [16]byte

// UUIDValue implements pgtype.UUIDValuer.
func (u UUID) UUIDValue() (pgtype.UUID, error) { return pgtype.UUID{Bytes: u, Valid: true}, nil }

// ScanUUID implements pgtype.UUIDScanner; NULL is an error (use *UUID
// columns only where the column is NOT NULL).
func (u *UUID) ScanUUID(v pgtype.UUID) error {
	if !v.Valid {
		return fmt.Errorf("scan uuid: NULL")
	}
	*u = v.Bytes
	return nil
}

// NewUUID returns a time-ordered (version 7) UUID: event and material ids.
// An event id's first 48 bits are its publish time in Unix milliseconds,
// which is what notifications and push_deliveries are partitioned by
// (schema migration 0013: one partition per UTC day of event ids).
// google/uuid keeps the ids of one process increasing within a
// millisecond too.
func NewUUID() UUID { return UUID(uuid.Must(uuid.NewV7())) }

var errBadUUID = errors.New("not a uuid")

// ParseUUID accepts the canonical 36-character form, any case, and
// nothing else (google/uuid alone would also take braces, urn:uuid: and
// 32 bare hex digits: ids in paths and JSON have one spelling).
func ParseUUID(s string) (UUID, error) {
	if len(s) != 36 {
		return UUID{}, errBadUUID
	}
	u, err := uuid.Parse(s)
	if err != nil {
		return UUID{}, errBadUUID
	}
	return UUID(u), nil
}

// String returns the canonical lower-case form.
func (u UUID) String() string { return uuid.UUID(u).String() }
