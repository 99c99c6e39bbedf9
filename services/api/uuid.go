package api

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgtype"
)

// UUID is a 16-byte identifier that pgx reads and writes as Postgres uuid.
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

// NewUUID returns a random (version 4) UUID: event and material ids.
func NewUUID() UUID {
	var u UUID
	_, _ = rand.Read(u[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return u
}

var errBadUUID = errors.New("not a uuid")

// ParseUUID accepts the canonical 36-character form, any case.
func ParseUUID(s string) (UUID, error) {
	var u UUID
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return u, errBadUUID
	}
	var h [32]byte
	copy(h[0:8], s[0:8])
	copy(h[8:12], s[9:13])
	copy(h[12:16], s[14:18])
	copy(h[16:20], s[19:23])
	copy(h[20:32], s[24:36])
	if _, err := hex.Decode(u[:], h[:]); err != nil {
		return UUID{}, errBadUUID
	}
	return u, nil
}

// String returns the canonical lower-case form.
func (u UUID) String() string {
	return pgtype.UUID{Bytes: u, Valid: true}.String()
}
