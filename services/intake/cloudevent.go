package intake

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"mime"
	"strings"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
)

// CloudEvents 1.0 in the Kafka protocol binding.
const (
	SpecVersion = "1.0"
	// ContentTypeStructured marks a structured-mode record: the value is
	// the whole event in the JSON event format.
	ContentTypeStructured = "application/cloudevents+json"
	// contentTypeBatch is the JSON batch format, which the Kafka binding
	// does not define: refused rather than guessed at.
	contentTypeBatch  = "application/cloudevents-batch+json"
	headerContentType = "content-type"
	headerPrefix      = "ce_"
)

// Modes of the Kafka binding (Event.Mode, the mode label of metrics).
const (
	ModeBinary     = "binary"
	ModeStructured = "structured"
)

// MaxIDBytes and MaxSourceBytes bound the attributes stored as the dedupe
// key (intake_events).
const (
	MaxIDBytes     = 256
	MaxSourceBytes = 1024
)

// Event is a CloudEvent's attributes the intake uses, and its data.
type Event struct {
	ID, Source, Type string
	// Subject and Time are kept for the log and the dead-letter envelope.
	Subject, Time string
	// Data is the event's data: in binary mode the record's value, in
	// structured mode the data member (or data_base64, decoded).
	Data []byte
	Mode string
}

// notCloudEvent is a record the intake cannot read as a CloudEvent.
type notCloudEvent struct{ msg string }

func (e *notCloudEvent) Error() string { return "not a CloudEvent: " + e.msg }

func notCE(format string, args ...any) error { return &notCloudEvent{fmt.Sprintf(format, args...)} }

// DecodeRecord reads r as a CloudEvent: structured mode when its
// content-type header is application/cloudevents+json (parameters
// allowed), binary mode when it has a ce_specversion header. Anything else
// — no header of either, another spec version, a missing or empty id,
// source or type, data that is not JSON — is an error saying what is
// wrong.
func DecodeRecord(r *kgo.Record) (Event, error) {
	var ct string
	var ce map[string]string
	for _, h := range r.Headers {
		k := strings.ToLower(h.Key)
		switch {
		case k == headerContentType:
			ct = string(h.Value)
		case strings.HasPrefix(k, headerPrefix):
			if ce == nil {
				ce = map[string]string{}
			}
			if !utf8.Valid(h.Value) {
				return Event{}, notCE("header %s is not UTF-8", h.Key)
			}
			ce[strings.TrimPrefix(k, headerPrefix)] = string(h.Value)
		}
	}
	mt := ""
	if ct != "" {
		var err error
		if mt, _, err = mime.ParseMediaType(ct); err != nil {
			return Event{}, notCE("content-type %q: %v", ct, err)
		}
	}
	switch {
	case mt == ContentTypeStructured:
		return decodeStructured(r.Value)
	case mt == contentTypeBatch:
		return Event{}, notCE("the batch format (%s) is not part of the Kafka binding: send one event per record", contentTypeBatch)
	case ce["specversion"] != "":
		return decodeBinary(ce, mt, r.Value)
	}
	return Event{}, notCE("neither a ce_specversion header (binary mode) nor content-type %s (structured mode)", ContentTypeStructured)
}

func decodeBinary(ce map[string]string, mt string, value []byte) (Event, error) {
	e := Event{ID: ce["id"], Source: ce["source"], Type: ce["type"], Subject: ce["subject"], Time: ce["time"], Data: value, Mode: ModeBinary}
	if err := checkAttributes(ce["specversion"], e); err != nil {
		return Event{}, err
	}
	if !isJSON(mt) {
		return Event{}, notCE("content-type %q: the data must be JSON (application/json)", mt)
	}
	return e, nil
}

// structured is the JSON event format's members the intake reads. The
// data member stays raw: it is the notification request, decoded once,
// strictly, by services/notifications.
type structured struct {
	SpecVersion     *string         `json:"specversion"`
	ID              *string         `json:"id"`
	Source          *string         `json:"source"`
	Type            *string         `json:"type"`
	Subject         *string         `json:"subject"`
	Time            *string         `json:"time"`
	DataContentType *string         `json:"datacontenttype"`
	Data            json.RawMessage `json:"data"`
	DataBase64      *string         `json:"data_base64"`
}

func decodeStructured(value []byte) (Event, error) {
	var s structured
	if t := bytes.TrimSpace(value); len(t) == 0 || t[0] != '{' {
		return Event{}, notCE("structured mode: the value must be a JSON object")
	}
	if err := json.Unmarshal(value, &s); err != nil {
		return Event{}, notCE("structured mode: %v", err)
	}
	e := Event{ID: deref(s.ID), Source: deref(s.Source), Type: deref(s.Type), Subject: deref(s.Subject), Time: deref(s.Time), Mode: ModeStructured}
	if err := checkAttributes(deref(s.SpecVersion), e); err != nil {
		return Event{}, err
	}
	mt := ""
	if s.DataContentType != nil {
		var err error
		if mt, _, err = mime.ParseMediaType(*s.DataContentType); err != nil {
			return Event{}, notCE("datacontenttype %q: %v", *s.DataContentType, err)
		}
	}
	if !isJSON(mt) {
		return Event{}, notCE("datacontenttype %q: the data must be JSON (application/json)", mt)
	}
	switch {
	case s.Data != nil && s.DataBase64 != nil:
		return Event{}, notCE("both data and data_base64")
	case s.DataBase64 != nil:
		b, err := base64.StdEncoding.DecodeString(*s.DataBase64)
		if err != nil {
			return Event{}, notCE("data_base64: %v", err)
		}
		e.Data = b
	default:
		e.Data = s.Data // absent: nil, refused as a request below
	}
	return e, nil
}

// checkAttributes checks the required context attributes (spec section
// "Required Attributes") and the intake's bounds on the dedupe key.
func checkAttributes(specVersion string, e Event) error {
	if specVersion != SpecVersion {
		return notCE("specversion %q: want %q", specVersion, SpecVersion)
	}
	for _, a := range []struct{ name, v string }{{"id", e.ID}, {"source", e.Source}, {"type", e.Type}} {
		if a.v == "" {
			return notCE("the required attribute %s is missing or empty", a.name)
		}
	}
	if len(e.ID) > MaxIDBytes {
		return notCE("id is %d bytes, at most %d", len(e.ID), MaxIDBytes)
	}
	if len(e.Source) > MaxSourceBytes {
		return notCE("source is %d bytes, at most %d", len(e.Source), MaxSourceBytes)
	}
	return nil
}

// isJSON accepts an absent content type (the binding's default for data
// the receiver knows) and application/json or any +json type.
func isJSON(mt string) bool {
	return mt == "" || mt == "application/json" || strings.HasSuffix(mt, "+json")
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
