package intake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/services/ids"
	"github.com/notify-dev/notify/services/notifications"
	"github.com/notify-dev/notify/streams"
)

// Dead-letter reasons (the dlq.reason header and the envelope's reason).
const (
	// ReasonNotCloudEvent: neither mode of the Kafka binding, or a
	// required attribute missing, or data that is not JSON.
	ReasonNotCloudEvent = "not_cloudevent"
	// ReasonUnknownSource: no --allowed-sources prefix matches the source.
	ReasonUnknownSource = "unknown_source"
	// ReasonForbidden: the source's rule does not allow the type or the
	// audience.
	ReasonForbidden = "forbidden"
	// ReasonInvalidBody: data is not a valid POST /v1/notifications body,
	// or its audience names no course or user notify knows.
	ReasonInvalidBody = "invalid_body"
	// ReasonTemplate: the named template does not exist, a variable is
	// missing, or a rendered text breaks a limit.
	ReasonTemplate = "template_error"
	// ReasonDataError: Postgres refused the event's data
	// (streams.IsDataError), as it will every time.
	ReasonDataError = streams.ReasonDataError
)

// Refusal is why a record creates no event.
type Refusal struct {
	Reason string
	// Code and Field are the request error's (notifications.Error), when
	// the body was refused.
	Code, Field string
	Err         error
	// Event is what was read of the CloudEvent (empty when not one).
	Event Event
}

// result is what became of one record.
type result struct {
	rec       *kgo.Record
	rule      string // the matched rule's prefix
	ceType    string
	duplicate bool
	eventID   uuid.UUID
	dead      *Refusal
}

// sqlClaim claims a CloudEvent's (source, id); no row: an earlier
// delivery created its event (or a concurrent transaction is creating it,
// and ON CONFLICT waited for it to commit).
const sqlClaim = `
INSERT INTO intake_events (source, id, event_id, ce_type, topic, partition, kafka_offset)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (source, id) DO NOTHING
RETURNING 1`

// take turns one record into its event inside tx, in a savepoint: the
// dedupe key, then exactly what POST /v1/notifications writes
// (notifications.Create, sender the rule's service). A refusal rolls the
// savepoint back and is returned in the result; an error is the
// database's, and fails the batch.
//
// The key is claimed before the body is checked, so a record replayed
// after its event was created is a duplicate even where its body would no
// longer pass (a send_at now in the past, a template since deleted).
func take(ctx context.Context, tx pgx.Tx, sources Sources, m ids.Mapper, rec *kgo.Record) (result, error) {
	res := result{rec: rec}
	ev, err := DecodeRecord(rec)
	if err != nil {
		res.dead = &Refusal{Reason: ReasonNotCloudEvent, Err: err}
		return res, nil
	}
	res.ceType = ev.Type
	rule, ok := sources.Match(ev.Source)
	if !ok {
		res.dead = &Refusal{Reason: ReasonUnknownSource, Err: fmt.Errorf("source %q matches no allowed source prefix", ev.Source), Event: ev}
		return res, nil
	}
	res.rule = rule.Prefix
	sp, err := tx.Begin(ctx)
	if err != nil {
		return res, fmt.Errorf("savepoint: %w", err)
	}
	defer func() { _ = sp.Rollback(ctx) }() // after Commit, a no-op
	res.eventID = uuid.Must(uuid.NewV7())
	var one int
	err = sp.QueryRow(ctx, sqlClaim, ev.Source, ev.ID, res.eventID, ev.Type, rec.Topic, rec.Partition, rec.Offset).Scan(&one)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		res.duplicate = true
		return res, sp.Commit(ctx)
	case streams.IsDataError(err):
		res.dead = &Refusal{Reason: ReasonDataError, Err: err, Event: ev}
		return res, nil
	case err != nil:
		return res, fmt.Errorf("claim %s %s: %w", ev.Source, ev.ID, err)
	}
	refusal, err := create(ctx, sp, rule, m, ev, res.eventID)
	if err != nil {
		return res, err
	}
	if refusal != nil {
		refusal.Event = ev
		res.dead = refusal
		return res, nil // the savepoint rolls back: no key, no event
	}
	if err := sp.Commit(ctx); err != nil {
		return res, fmt.Errorf("release savepoint: %w", err)
	}
	return res, nil
}

// create decodes the event's data as the body of POST /v1/notifications
// (type defaulting to the CloudEvent's), checks it against the rule and
// creates it.
func create(ctx context.Context, tx pgx.Tx, rule Source, m ids.Mapper, ev Event, eventID uuid.UUID) (*Refusal, error) {
	if !utf8.Valid(ev.Data) {
		// encoding/json would store U+FFFD in place of the bytes.
		return &Refusal{Reason: ReasonInvalidBody, Code: "invalid_encoding", Err: errors.New("the data is not valid UTF-8")}, nil
	}
	req, err := notifications.Decode(ev.Data)
	if err != nil {
		return refusal(err, false), nil
	}
	if req.Type == "" {
		req.Type = ev.Type
	}
	if err := req.Validate(); err != nil {
		return refusal(err, false), nil
	}
	if err := rule.check(req); err != nil {
		return &Refusal{Reason: ReasonForbidden, Err: err}, nil
	}
	_, err = notifications.Create(ctx, tx, m, notifications.Sender{Service: rule.service()}, req, eventID)
	switch {
	case err == nil:
		return nil, nil
	case errors.Is(err, notifications.ErrCourseNotFound):
		return &Refusal{Reason: ReasonInvalidBody, Code: "course_not_found", Field: "audience.course_id", Err: err}, nil
	case errors.Is(err, notifications.ErrForbidden):
		return &Refusal{Reason: ReasonForbidden, Err: err}, nil
	case streams.IsDataError(err):
		return &Refusal{Reason: ReasonDataError, Err: err}, nil
	}
	var ne *notifications.Error
	if errors.As(err, &ne) {
		// Validate passed, so a refusal of the content now is of what
		// the template rendered.
		return refusal(err, req.Template != nil && ne.Code != notifications.CodeNoKnownUsers && ne.Code != notifications.CodeInvalidUserIDs && ne.Code != notifications.CodeInvalidAudience), nil
	}
	return nil, err
}

// refusal classifies a request error: template_error for the template's
// own codes (or rendered is set), invalid_body otherwise.
func refusal(err error, rendered bool) *Refusal {
	r := &Refusal{Reason: ReasonInvalidBody, Err: err}
	var ne *notifications.Error
	if errors.As(err, &ne) {
		r.Code, r.Field = ne.Code, ne.Field
		if ne.Field == "" {
			r.Err = errors.New(ne.Message)
		}
		switch ne.Code {
		case notifications.CodeUnknownTemplate, notifications.CodeMissingVariable, notifications.CodeInvalidTemplate:
			r.Reason = ReasonTemplate
		}
	}
	if rendered {
		r.Reason = ReasonTemplate
	}
	return r
}

// Envelope is the value of a dead letter on notify.intake.dlq: why, what
// was read of the CloudEvent, and the record as received (key, value and
// headers, bytes base64-encoded by encoding/json). The dead letter's
// headers are the record's too, plus dlq.* (streams.DeadLetter).
type Envelope struct {
	Reason string `json:"reason"`
	Code   string `json:"code,omitempty"`
	Field  string `json:"field,omitempty"`
	Error  string `json:"error"`
	// Source, ID, Type and Mode are the CloudEvent's, when it was one.
	Source string    `json:"source,omitempty"`
	ID     string    `json:"id,omitempty"`
	Type   string    `json:"type,omitempty"`
	Mode   string    `json:"mode,omitempty"`
	Time   time.Time `json:"time"`
	Record Original  `json:"record"`
}

// Original is the dead-lettered record.
type Original struct {
	Topic     string           `json:"topic"`
	Partition int32            `json:"partition"`
	Offset    int64            `json:"offset"`
	Timestamp time.Time        `json:"timestamp"`
	Key       []byte           `json:"key"`
	Value     []byte           `json:"value"`
	Headers   []OriginalHeader `json:"headers"`
}

// OriginalHeader is one header of the dead-lettered record.
type OriginalHeader struct {
	Key   string `json:"key"`
	Value []byte `json:"value"`
}

// NewDeadLetter builds rec's dead letter: the record's key and headers,
// dlq.* headers (reason, error, where it came from) and the Envelope as
// the value.
func NewDeadLetter(rec *kgo.Record, r *Refusal, now time.Time) (streams.DeadLetter, error) {
	dl := streams.NewDeadLetter(rec, r.Reason, r.Err, 0, now)
	env := Envelope{Reason: r.Reason, Code: r.Code, Field: r.Field, Error: dl.Error,
		Source: r.Event.Source, ID: r.Event.ID, Type: r.Event.Type, Mode: r.Event.Mode, Time: dl.Time,
		Record: Original{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Timestamp: rec.Timestamp.UTC(),
			Key: rec.Key, Value: rec.Value, Headers: []OriginalHeader{}}}
	for _, h := range rec.Headers {
		env.Record.Headers = append(env.Record.Headers, OriginalHeader{h.Key, h.Value})
	}
	b, err := json.Marshal(env)
	if err != nil {
		return dl, fmt.Errorf("encode dead letter: %w", err)
	}
	dl.Value = b
	return dl, nil
}
