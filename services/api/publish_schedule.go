package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
)

// Limits of send_at and expires_at (see the package doc, "Scheduling").
const (
	// MaxSendAtAhead is how far ahead a fan-out may be scheduled. A
	// month covers a term's announcements; further ahead a typo (a year
	// off) is likelier than a plan, and the material is visible to its
	// readers long before anyone is told.
	MaxSendAtAhead = 30 * 24 * time.Hour
	// MaxLifetime bounds expires_at after the start of the fan-out
	// (send_at, or now). It is the longest time-to-live every provider
	// honours: FCM's ttl maximum is 28 days (2,419,200 s, also its Web Push
	// endpoints' limit), so a longer lifetime could not be told to the push
	// services and would expire there before it expired here.
	MaxLifetime = 28 * 24 * time.Hour
)

// parseScheduleTime parses an optional RFC 3339 field; absent or null is
// the zero time.
func parseScheduleTime(v *string, code, field string) (time.Time, *Error) {
	if v == nil {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, *v)
	if err != nil {
		return time.Time{}, newError(http.StatusBadRequest, code, "%s must be an RFC 3339 time with a zone offset, e.g. 2026-09-01T08:00:00Z", field)
	}
	// Postgres keeps microseconds: the payload, the run and the answer
	// then carry the same instant.
	return t.UTC().Truncate(time.Microsecond), nil
}

// optionalTime is t, or nil when t is zero (absent).
func optionalTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// checkSchedule validates send_at and expires_at against now, the time the
// request was accepted (published_at).
func (r PublishRequest) checkSchedule(now time.Time) *Error {
	start := now
	if !r.SendAt.IsZero() {
		switch {
		case !r.SendAt.After(now):
			return newError(http.StatusBadRequest, errInvalidSendAt, "send_at must be in the future (the server's time is %s)", now.Format(time.RFC3339))
		case r.SendAt.Sub(now) > MaxSendAtAhead:
			return newError(http.StatusBadRequest, errInvalidSendAt, "send_at must be at most %d days ahead", MaxSendAtAhead/(24*time.Hour))
		}
		start = r.SendAt
	}
	if !r.ExpiresAt.IsZero() {
		switch {
		case !r.ExpiresAt.After(now):
			return newError(http.StatusBadRequest, errInvalidExpiresAt, "expires_at must be in the future (the server's time is %s)", now.Format(time.RFC3339))
		case !r.SendAt.IsZero() && !r.ExpiresAt.After(r.SendAt):
			return newError(http.StatusBadRequest, errInvalidExpiresAt, "expires_at must be after send_at")
		case r.ExpiresAt.Sub(start) > MaxLifetime:
			return newError(http.StatusBadRequest, errInvalidExpiresAt, "expires_at must be at most %d days after the fan-out starts (send_at, or now)", MaxLifetime/(24*time.Hour))
		}
	}
	return nil
}

// replayIfStored replays the stored answer of key, if there is one (stored
// false: none, or no key).
func (s *Server) replayIfStored(ctx context.Context, user UUID, key string, hash []byte) (publishResult, bool, error) {
	if key == "" {
		return publishResult{}, false, nil
	}
	res, err := replayStored[PublishResponse](ctx, s, user, key, hash)
	if errors.Is(err, pgx.ErrNoRows) {
		return publishResult{}, false, nil
	}
	return res, true, err
}
