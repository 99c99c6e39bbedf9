package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
)

// Error codes: the "code" of every error body. Clients switch on them, so
// they never change meaning.
const (
	errUnauthorized         = "unauthorized"
	errForbidden            = "forbidden"
	errInvalidID            = "invalid_id"
	errNotFound             = "not_found"
	errCourseNotFound       = "course_not_found"
	errEventNotFound        = "event_not_found"
	errNotificationNotFound = "notification_not_found"
	errSubscriptionNotFound = "subscription_not_found"
	errMethodNotAllowed     = "method_not_allowed"
	errUnsupportedMediaType = "unsupported_media_type"
	errUnsupportedCharset   = "unsupported_charset"
	errPayloadTooLarge      = "payload_too_large"
	errMalformedJSON        = "malformed_json"
	errUnknownField         = "unknown_field"
	errDuplicateField       = "duplicate_field"
	errInvalidEncoding      = "invalid_encoding"
	errInvalidTitle         = "invalid_title"
	errInvalidBody          = "invalid_body"
	errInvalidURL           = "invalid_url"
	errInvalidSendAt        = "invalid_send_at"
	errInvalidExpiresAt     = "invalid_expires_at"
	// The codes of services/notifications' refusals (notifications.Code*,
	// answered as they are; TestNotificationCodesAreDocumented keeps the
	// two lists equal).
	errInvalidType           = "invalid_type"
	errInvalidAudience       = "invalid_audience"
	errInvalidUserIDs        = "invalid_user_ids"
	errInvalidData           = "invalid_data"
	errInvalidPriority       = "invalid_priority"
	errInvalidCollapseKey    = "invalid_collapse_key"
	errInvalidTemplate       = "invalid_template"
	errContentTooLarge       = "content_too_large"
	errNoKnownUsers          = "no_known_users"
	errMissingVariable       = "missing_variable"
	errUnknownTemplate       = "unknown_template"
	errTemplateDefinition    = "invalid_template_definition"
	errTemplateNotFound      = "template_not_found"
	errInvalidEndpoint       = "invalid_endpoint"
	errInvalidP256DH         = "invalid_p256dh"
	errInvalidAuth           = "invalid_auth"
	errInvalidLimit          = "invalid_limit"
	errInvalidCursor         = "invalid_cursor"
	errInvalidIdempotencyKey = "invalid_idempotency_key"
	errIdempotencyKeyReused  = "idempotency_key_reused"
	errRateLimited           = "rate_limited"
	errRequestTimeout        = "request_timeout"
	errMalformedRequest      = "malformed_request"
	errHeaderTooLarge        = "header_too_large"
	errUnsupportedRequest    = "unsupported_request"
	errInternal              = "internal"
	errUnavailable           = "unavailable"
)

// Error is a client-visible failure: an HTTP status and the error body.
type Error struct {
	Status  int
	Code    string
	Message string
	// RetryAfter, when positive, is sent as Retry-After (seconds).
	RetryAfter int
}

func (e *Error) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message) }

func newError(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func writeError(w http.ResponseWriter, e *Error) {
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	var b errorBody
	b.Error.Code, b.Error.Message = e.Code, e.Message
	writeJSON(w, e.Status, b)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		// Only our own response types reach here; failing to encode one is a
		// programming error, reported as such rather than as half a body.
		status, b = http.StatusInternalServerError, []byte(`{"error":{"code":"internal","message":"encode response"}}`)
	}
	writeRawJSON(w, status, b)
}

func writeRawJSON(w http.ResponseWriter, status int, b []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(b)
	_, _ = w.Write([]byte{'\n'})
}

// maxRequestBytes caps every request body (413 beyond).
const maxRequestBytes = 64 << 10

// readStrictJSON reads a JSON body into v, refusing unknown fields: the
// whole of what a handler that takes a plain request object needs.
func readStrictJSON(w http.ResponseWriter, r *http.Request, v any) *Error {
	body, e := readJSONBody(w, r)
	if e != nil {
		return e
	}
	return decodeStrict(body, v, true)
}

// readJSONBody checks the content type and reads at most maxRequestBytes.
// A read that fails says why in terms of the request, never with the
// socket error's text (it names both addresses).
func readJSONBody(w http.ResponseWriter, r *http.Request) ([]byte, *Error) {
	if e := requireJSON(r); e != nil {
		return nil, e
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		var ne net.Error
		switch {
		case errors.As(err, &mbe):
			return nil, newError(http.StatusRequestEntityTooLarge, errPayloadTooLarge, "request body is larger than %d bytes", maxRequestBytes)
		case errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
			return nil, newError(http.StatusRequestTimeout, errRequestTimeout, "the request body did not arrive in time")
		}
		return nil, newError(http.StatusBadRequest, errMalformedRequest, "the request body could not be read (truncated or badly framed)")
	}
	return b, nil
}

// requireJSON accepts application/json, with charset absent or utf-8:
// JSON is UTF-8 (RFC 8259 §8.1), and a body announced as UTF-16 or Latin-1
// would otherwise be read as UTF-8 and mean something else.
func requireJSON(r *http.Request) *Error {
	ct := r.Header.Get("Content-Type")
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return newError(http.StatusUnsupportedMediaType, errUnsupportedMediaType, "Content-Type must be application/json, got %q", ct)
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		// 400 like every other body the API cannot read as UTF-8 JSON
		// (the media type itself is right; its encoding is not).
		return newError(http.StatusBadRequest, errUnsupportedCharset, "charset %q is not supported: send UTF-8 (charset=utf-8 or none)", cs)
	}
	return nil
}

// jsonDecodeError turns an encoding/json error into the client's error.
func jsonDecodeError(err error) *Error {
	var ute *json.UnmarshalTypeError
	if errors.As(err, &ute) && ute.Field != "" {
		return newError(http.StatusBadRequest, errMalformedJSON, "field %q: wrong type %s", ute.Field, ute.Value)
	}
	return newError(http.StatusBadRequest, errMalformedJSON, "malformed JSON: %v", err)
}
