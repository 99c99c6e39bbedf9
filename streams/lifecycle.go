package streams

import (
	"encoding/json"
	"fmt"
	"time"
)

// Lifecycle event types (outbox column "type", Kafka header "eventType") on
// outbox.event.lifecycle. They are written by the triggers of schema
// migration 0012, one per change in the database; services/lifecycle
// documents when each is written, streams/asyncapi.yaml their schemas.
const (
	TypeFanoutStarted  = "FanoutStarted"
	TypeFanoutFinished = "FanoutFinished"
	TypePushFinished   = "PushFinished"
	TypeEventPaused    = "EventPaused"
	TypeEventResumed   = "EventResumed"
	TypeEventCancelled = "EventCancelled"
	TypeDeviceGone     = "DeviceGone"
	// TypeReceiptsCounted is written by services/receipts' flusher, not
	// by a trigger: one per event every few seconds while receipts come.
	TypeReceiptsCounted = "ReceiptsCounted"
)

// LifecycleTypes lists every lifecycle event type.
var LifecycleTypes = []string{TypeFanoutStarted, TypeFanoutFinished, TypePushFinished,
	TypeEventPaused, TypeEventResumed, TypeEventCancelled, TypeDeviceGone, TypeReceiptsCounted}

// FanoutStarted: the event's fan-out began (its run was planned running, or
// a scheduled run reached its send_at). Key: the event id.
type FanoutStarted struct {
	EventID string `json:"event_id"`
	// Type is the event's notification type (TypeMaterial for a
	// material); CourseID and MaterialID are absent for a notification
	// to a list of users (MaterialID for every notification).
	Type        string     `json:"type"`
	CourseID    string     `json:"course_id,omitempty"`
	MaterialID  string     `json:"material_id,omitempty"`
	PublishedAt time.Time  `json:"published_at"`
	Ranges      int        `json:"ranges"`
	SendAt      *time.Time `json:"send_at,omitempty"`
	ExpiresAt   *time.Time `json:"expires_at,omitempty"`
	At          time.Time  `json:"at"`
}

// FanoutFinished: every student of the event has their notification (the
// last slice committed). Notified is how many students were notified; the
// pushes to their devices may still be under way. Key: the event id.
type FanoutFinished struct {
	EventID   string    `json:"event_id"`
	Type      string    `json:"type"`
	CourseID  string    `json:"course_id,omitempty"`
	Notified  int64     `json:"notified"`
	StartedAt time.Time `json:"started_at"`
	At        time.Time `json:"at"`
}

// PushFinished: the event is finished, every device it targeted has its
// final outcome; the counts are final. Key: the event id.
type PushFinished struct {
	EventID   string    `json:"event_id"`
	Type      string    `json:"type"`
	CourseID  string    `json:"course_id,omitempty"`
	Notified  int64     `json:"notified"`
	Delivered int64     `json:"delivered"`
	Gone      int64     `json:"gone"`
	Failed    int64     `json:"failed"`
	Cancelled int64     `json:"cancelled"`
	Expired   int64     `json:"expired"`
	At        time.Time `json:"at"`
}

// EventStateChanged is the payload of EventPaused, EventResumed and
// EventCancelled: the event's state changed from PreviousState. Key: the
// event id.
type EventStateChanged struct {
	EventID       string    `json:"event_id"`
	Type          string    `json:"type"`
	CourseID      string    `json:"course_id,omitempty"`
	PreviousState string    `json:"previous_state"`
	At            time.Time `json:"at"`
}

// Reasons of a DeviceGone.
const (
	// DeviceGonePushService: the push service answered that the device no
	// longer exists (Web Push 404/410, FCM UNREGISTERED, APNs
	// Unregistered); EventID and HTTPStatus say which push found out.
	DeviceGonePushService = "push_service"
	// DeviceGoneRemoved: the device was removed otherwise (the student
	// unsubscribed or deleted it through the API, an operator).
	DeviceGoneRemoved = "removed"
	// DeviceGoneErased: the student was erased (the platform deleted the
	// user; services/roster): erase what you hold of them too.
	DeviceGoneErased = "erased"
)

// DeviceGone: notify deleted a device and will never push to it again.
// Key: the user id.
type DeviceGone struct {
	UserID     string    `json:"user_id"`
	Platform   string    `json:"platform"`
	DeviceID   int64     `json:"device_id"`
	Reason     string    `json:"reason"`
	EventID    string    `json:"event_id,omitempty"`
	HTTPStatus int       `json:"http_status,omitempty"`
	At         time.Time `json:"at"`
}

// ReceiptCounts are receipts of one platform: notifications the service
// worker showed, that the student clicked, that the student read in the
// inbox (under the platform "inbox").
type ReceiptCounts struct {
	Shown   int64 `json:"shown"`
	Clicked int64 `json:"clicked"`
	Read    int64 `json:"read"`
}

// ReceiptsCounted: students' receipts of the event, in aggregate (never
// one record per student). New are the receipts counted since the
// event's previous ReceiptsCounted, Total all of them so far, each by
// platform (webpush, fcm, apns, inbox; a platform without receipts is
// absent). Each student counts at most once per kind. Key: the event id.
type ReceiptsCounted struct {
	EventID  string                   `json:"event_id"`
	Type     string                   `json:"type"`
	CourseID string                   `json:"course_id,omitempty"`
	New      map[string]ReceiptCounts `json:"new"`
	Total    map[string]ReceiptCounts `json:"total"`
	At       time.Time                `json:"at"`
}

// DecodeLifecycle parses a lifecycle record's value by its event type (the
// eventType header) into one of the types above. Like
// DecodeMaterialPublished it accepts the expanded object and Debezium's
// default string form.
func DecodeLifecycle(eventType string, b []byte) (any, error) {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return nil, fmt.Errorf("%w: lifecycle %s: %v", ErrMalformed, eventType, err)
		}
		b = []byte(s)
	}
	var v any
	switch eventType {
	case TypeFanoutStarted:
		v = new(FanoutStarted)
	case TypeFanoutFinished:
		v = new(FanoutFinished)
	case TypePushFinished:
		v = new(PushFinished)
	case TypeEventPaused, TypeEventResumed, TypeEventCancelled:
		v = new(EventStateChanged)
	case TypeDeviceGone:
		v = new(DeviceGone)
	case TypeReceiptsCounted:
		v = new(ReceiptsCounted)
	default:
		return nil, fmt.Errorf("%w: unknown lifecycle event type %q", ErrMalformed, eventType)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return nil, fmt.Errorf("%w: lifecycle %s: %v", ErrMalformed, eventType, err)
	}
	return v, nil
}
