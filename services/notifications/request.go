package notifications

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/notify-dev/notify/services/push/webpush"
	"github.com/notify-dev/notify/services/strictjson"
	"github.com/notify-dev/notify/streams"
)

// Limits of a request (see Validate).
const (
	MaxTitleRunes     = 200
	MaxBodyBytes      = 2000
	MaxURLBytes       = 2048
	MaxDataBytes      = 2 << 10
	MaxUserIDs        = 10_000
	MaxCollapseKey    = 64
	MaxSendAtAhead    = 30 * 24 * time.Hour
	MaxLifetime       = 28 * 24 * time.Hour
	PriorityNormal    = "normal"
	PriorityHigh      = "high"
	reservedMaterials = streams.TypeMaterial
)

// payloadOverhead is what the push payload adds to a request's own fields:
// the member names, the event and course ids (36 bytes each) and quotes.
// A request whose fields leave less than MaxPayload − this is refused,
// rather than shortened on every device.
const payloadOverhead = 160

// Request is one notification request, as POST /v1/notifications and the
// CloudEvents intake receive it. Pointers tell an absent field from an
// empty one.
type Request struct {
	Type     string   `json:"type"`
	Audience Audience `json:"audience"`
	Title    *string  `json:"title,omitempty"`
	Body     *string  `json:"body,omitempty"`
	URL      *string  `json:"url,omitempty"`
	// Data is a JSON object of at most MaxDataBytes, delivered as it is.
	Data json.RawMessage `json:"data,omitempty"`
	// Template names a stored template (PUT /v1/templates/{type}); Vars
	// fill its variables.
	Template *string        `json:"template,omitempty"`
	Vars     map[string]any `json:"vars,omitempty"`
	// Priority is "normal" (the default when empty) or "high".
	Priority    string     `json:"priority,omitempty"`
	CollapseKey *string    `json:"collapse_key,omitempty"`
	SendAt      *time.Time `json:"send_at,omitempty"`
	ExpiresAt   *time.Time `json:"expires_at,omitempty"`
}

// Audience is who is notified: exactly one of a course (its students
// enrolled when the event is created) and a list of users. Both are
// platform ids, mapped with ids.Mapper.
type Audience struct {
	CourseID *string  `json:"course_id,omitempty"`
	UserIDs  []string `json:"user_ids,omitempty"`
}

// Error is a refused request: a stable code clients switch on, the field
// at fault and a message saying what is wrong. The HTTP route answers 400
// with it, the CloudEvents intake dead-letters with it.
type Error struct {
	Code    string
	Field   string
	Message string
}

func (e *Error) Error() string { return e.Field + ": " + e.Message }

func invalid(code, field, format string, args ...any) *Error {
	return &Error{Code: code, Field: field, Message: fmt.Sprintf(format, args...)}
}

// Error codes of Error.
const (
	CodeMalformed       = "malformed_json"
	CodeInvalidType     = "invalid_type"
	CodeInvalidAudience = "invalid_audience"
	CodeInvalidUserIDs  = "invalid_user_ids"
	CodeInvalidTitle    = "invalid_title"
	CodeInvalidBody     = "invalid_body"
	CodeInvalidURL      = "invalid_url"
	CodeInvalidData     = "invalid_data"
	CodeInvalidPriority = "invalid_priority"
	CodeInvalidCollapse = "invalid_collapse_key"
	CodeInvalidSendAt   = "invalid_send_at"
	CodeInvalidExpires  = "invalid_expires_at"
	CodeInvalidTemplate = "invalid_template"
	CodeTooLarge        = "content_too_large"
	CodeNoKnownUsers    = "no_known_users"
)

// Decode parses a request strictly: exactly one JSON object, no unknown
// fields, nothing after it. It does not validate (see Validate).
func Decode(b []byte) (Request, error) {
	var r Request
	t := bytes.TrimSpace(b)
	if len(t) == 0 || t[0] != '{' {
		return r, invalid(CodeMalformed, "", "the request must be a JSON object")
	}
	// What encoding/json would accept silently (not UTF-8, a repeated
	// name, a name in the wrong case) is refused at every door alike: the
	// API's and the intake's.
	if e := strictjson.Check(b, &r); e != nil {
		return r, invalid(e.Code, "", "%s", e.Message)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return Request{}, invalid(CodeMalformed, te.Field, "must be JSON %s, got %s", jsonKind(te.Type.Kind().String()), te.Value)
		}
		var pe *time.ParseError
		if errors.As(err, &pe) {
			return Request{}, invalid(CodeMalformed, "", "send_at and expires_at must be RFC 3339 times with a zone offset, e.g. 2026-09-01T08:00:00Z")
		}
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return Request{}, invalid(CodeMalformed, strings.Trim(f, `"`), "unknown field %s", f)
		}
		return Request{}, invalid(CodeMalformed, "", "%v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Request{}, invalid(CodeMalformed, "", "unexpected data after the JSON object")
	}
	return r, nil
}

func jsonKind(k string) string {
	switch k {
	case "string":
		return "a string"
	case "slice":
		return "an array"
	case "struct", "map":
		return "an object"
	}
	return k
}

var typeRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// CheckType accepts a notification type: 1–64 of a-z 0-9 . _ -, starting
// with a letter or digit (the convention "team.event", e.g.
// "assignment.due").
func CheckType(t string) error {
	if !typeRE.MatchString(t) {
		return invalid(CodeInvalidType, "type", "%q: want 1–64 of a-z 0-9 . _ -, starting with a letter or digit", t)
	}
	return nil
}

// Validate checks everything that needs no database, against the current
// time (send_at in the future): the type, one audience, the content, data,
// priority, collapse key and schedule. The first problem is returned as an
// *Error.
func (r Request) Validate() error { return r.validateAt(time.Now()) }

func (r Request) validateAt(now time.Time) error {
	if err := CheckType(r.Type); err != nil {
		return err
	}
	if r.Type == reservedMaterials {
		return invalid(CodeInvalidType, "type", "%s is the type of POST /v1/courses/{id}/materials; choose your own", reservedMaterials)
	}
	switch a := r.Audience; {
	case a.CourseID != nil && a.UserIDs != nil:
		return invalid(CodeInvalidAudience, "audience", "give exactly one of course_id and user_ids")
	case a.CourseID != nil:
		if *a.CourseID == "" {
			return invalid(CodeInvalidAudience, "audience.course_id", "must not be empty")
		}
	case a.UserIDs != nil:
		if err := checkUserIDs(a.UserIDs); err != nil {
			return err
		}
	default:
		return invalid(CodeInvalidAudience, "audience", "give one of course_id and user_ids")
	}
	if r.Template != nil {
		if err := CheckType(*r.Template); err != nil {
			return invalid(CodeInvalidTemplate, "template", "%q is not a template name (a notification type)", *r.Template)
		}
		if r.Title != nil || r.Body != nil {
			return invalid(CodeInvalidTemplate, "template", "a templated notification takes its title and body from the template: leave title and body out")
		}
	} else {
		if r.Vars != nil {
			return invalid(CodeInvalidTemplate, "vars", "vars fill a template: give template too")
		}
		if r.Title == nil {
			return invalid(CodeInvalidTitle, "title", "title is required (or a template)")
		}
		if err := CheckTitle(*r.Title); err != nil {
			return err
		}
		if r.Body != nil {
			if err := CheckBody(*r.Body); err != nil {
				return err
			}
		}
	}
	if r.URL != nil && *r.URL != "" {
		if err := checkURL(*r.URL); err != nil {
			return err
		}
	}
	if r.Data != nil {
		if err := checkData(r.Data); err != nil {
			return err
		}
	}
	switch r.Priority {
	case "", PriorityNormal, PriorityHigh:
	default:
		return invalid(CodeInvalidPriority, "priority", "%q: want normal or high", r.Priority)
	}
	if r.CollapseKey != nil {
		k := *r.CollapseKey
		if k == "" || len(k) > MaxCollapseKey || strings.IndexFunc(k, func(c rune) bool { return c < 0x21 || c > 0x7e }) >= 0 {
			// 64 bytes of printable ASCII is what every platform takes:
			// APNs' apns-collapse-id is at most 64 bytes, and a header
			// value (Web Push Topic: the key is hashed to fit) must be
			// printable.
			return invalid(CodeInvalidCollapse, "collapse_key", "want 1–%d printable ASCII characters without spaces", MaxCollapseKey)
		}
	}
	if err := r.checkSchedule(now); err != nil {
		return err
	}
	if r.Template == nil {
		title, body := *r.Title, ""
		if r.Body != nil {
			body = *r.Body
		}
		return CheckPayloadSize(title, body, r)
	}
	return nil
}

// CheckPayloadSize refuses content whose push payload would not fit one
// Web Push record (the smallest of the platforms' limits): title and body
// (one rendered locale of a template, or the request's own), with the
// request's url, data, type and collapse key.
func CheckPayloadSize(title, body string, r Request) error {
	n := payloadOverhead + jsonLen(title) + jsonLen(body) + jsonLen(r.Type) + len(r.Data)
	if r.URL != nil {
		n += jsonLen(*r.URL)
	}
	if r.CollapseKey != nil {
		n += jsonLen(*r.CollapseKey)
	}
	if n > webpush.MaxPayload {
		return invalid(CodeTooLarge, "title", "title, body, url and data make a push payload of about %d bytes; at most %d fit", n, webpush.MaxPayload)
	}
	return nil
}

func jsonLen(s string) int {
	b, _ := json.Marshal(s)
	return len(b)
}

func checkUserIDs(ids []string) error {
	if len(ids) < 1 || len(ids) > MaxUserIDs {
		return invalid(CodeInvalidUserIDs, "audience.user_ids", "want 1–%d user ids, got %d", MaxUserIDs, len(ids))
	}
	seen := make(map[string]struct{}, len(ids))
	for i, id := range ids {
		if id == "" {
			return invalid(CodeInvalidUserIDs, fmt.Sprintf("audience.user_ids[%d]", i), "must not be empty")
		}
		if _, dup := seen[id]; dup {
			return invalid(CodeInvalidUserIDs, fmt.Sprintf("audience.user_ids[%d]", i), "%q appears more than once", id)
		}
		seen[id] = struct{}{}
	}
	return nil
}

// CheckTitle accepts 1–MaxTitleRunes characters after trimming, without
// control or bidirectional override characters (what the materials route
// accepts).
func CheckTitle(t string) error {
	t = strings.TrimSpace(t)
	if n := utf8.RuneCountInString(t); n < 1 || n > MaxTitleRunes {
		return invalid(CodeInvalidTitle, "title", "must be 1–%d characters after trimming, got %d", MaxTitleRunes, n)
	}
	if strings.IndexFunc(t, unicode.IsControl) >= 0 {
		return invalid(CodeInvalidTitle, "title", "must not contain control characters")
	}
	if strings.IndexFunc(t, isBidiControl) >= 0 {
		return invalid(CodeInvalidTitle, "title", "must not contain bidirectional embedding, override or isolate characters (U+202A–U+202E, U+2066–U+2069)")
	}
	return nil
}

// CheckBody accepts at most MaxBodyBytes of text without NUL or
// bidirectional override characters (line breaks are allowed).
func CheckBody(b string) error {
	if len(b) > MaxBodyBytes {
		return invalid(CodeInvalidBody, "body", "must be at most %d bytes, got %d", MaxBodyBytes, len(b))
	}
	if strings.IndexByte(b, 0) >= 0 || strings.IndexFunc(b, isBidiControl) >= 0 {
		return invalid(CodeInvalidBody, "body", "must not contain NUL or bidirectional override characters")
	}
	return nil
}

func isBidiControl(r rune) bool {
	return (r >= '\u202A' && r <= '\u202E') || (r >= '\u2066' && r <= '\u2069')
}

func checkURL(s string) error {
	if len(s) > MaxURLBytes {
		return invalid(CodeInvalidURL, "url", "must be at most %d bytes", MaxURLBytes)
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return invalid(CodeInvalidURL, "url", "is not a URL")
	case u.Scheme != "https":
		return invalid(CodeInvalidURL, "url", "must be an https URL")
	case u.Hostname() == "":
		return invalid(CodeInvalidURL, "url", "must have a host")
	case u.User != nil:
		return invalid(CodeInvalidURL, "url", "must not carry user info")
	case strings.IndexFunc(s, isBidiControl) >= 0:
		return invalid(CodeInvalidURL, "url", "must not contain bidirectional control characters")
	}
	return nil
}

func checkData(d json.RawMessage) error {
	t := bytes.TrimSpace(d)
	if len(t) == 0 || t[0] != '{' {
		return invalid(CodeInvalidData, "data", "must be a JSON object")
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, t); err != nil {
		return invalid(CodeInvalidData, "data", "is not valid JSON")
	}
	if buf.Len() > MaxDataBytes {
		return invalid(CodeInvalidData, "data", "must be at most %d bytes of compact JSON, got %d", MaxDataBytes, buf.Len())
	}
	if bytes.Contains(buf.Bytes(), []byte(`\u0000`)) {
		return invalid(CodeInvalidData, "data", "must not contain NUL (\\u0000), which cannot be stored")
	}
	return nil
}

// compactData is data as stored and delivered: compact JSON (nil when
// absent).
func compactData(d json.RawMessage) json.RawMessage {
	if d == nil {
		return nil
	}
	var buf bytes.Buffer
	_ = json.Compact(&buf, d)
	return buf.Bytes()
}

func (r Request) checkSchedule(now time.Time) error {
	start := now
	if r.SendAt != nil {
		switch {
		case !r.SendAt.After(now):
			return invalid(CodeInvalidSendAt, "send_at", "must be in the future (the server's time is %s)", now.UTC().Format(time.RFC3339))
		case r.SendAt.Sub(now) > MaxSendAtAhead:
			return invalid(CodeInvalidSendAt, "send_at", "must be at most %d days ahead", MaxSendAtAhead/(24*time.Hour))
		}
		start = *r.SendAt
	}
	if r.ExpiresAt != nil {
		switch {
		case !r.ExpiresAt.After(now):
			return invalid(CodeInvalidExpires, "expires_at", "must be in the future (the server's time is %s)", now.UTC().Format(time.RFC3339))
		case r.SendAt != nil && !r.ExpiresAt.After(*r.SendAt):
			return invalid(CodeInvalidExpires, "expires_at", "must be after send_at")
		case r.ExpiresAt.Sub(start) > MaxLifetime:
			return invalid(CodeInvalidExpires, "expires_at", "must be at most %d days after the fan-out starts (send_at, or now)", MaxLifetime/(24*time.Hour))
		}
	}
	return nil
}

// priority is r's priority with the default filled in.
func (r Request) priority() string {
	if r.Priority == "" {
		return PriorityNormal
	}
	return r.Priority
}
