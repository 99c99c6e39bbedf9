package api

import (
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Publish request limits (see the package doc).
const (
	maxTitleRunes = 200
	maxBodyBytes  = 10 << 10
	maxURLBytes   = 2048
)

// PublishRequest is a validated POST /v1/courses/{id}/materials body. Title
// is trimmed; URL is empty when absent.
type PublishRequest struct {
	Title string `json:"title"`
	Body  string `json:"body"`
	URL   string `json:"url,omitempty"`
	// SendAt and ExpiresAt are optional (zero: at once, never); see
	// checkSchedule. Values, not pointers, so requests compare with ==.
	SendAt    time.Time `json:"send_at,omitzero"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
}

// publishWire distinguishes an absent field (nil) from an empty one.
type publishWire struct {
	Title *string `json:"title"`
	Body  *string `json:"body"`
	URL   *string `json:"url"`
	// RFC 3339 strings; parsed here, checked against the clock by
	// checkSchedule.
	SendAt    *string `json:"send_at"`
	ExpiresAt *string `json:"expires_at"`
}

// DecodePublishRequest parses and validates a publish body. It rejects
// unknown fields and trailing data; the error is what the client gets.
func DecodePublishRequest(b []byte) (PublishRequest, *Error) {
	var w publishWire
	if err := decodeStrict(b, &w, true); err != nil {
		return PublishRequest{}, err
	}
	var req PublishRequest
	if w.Title == nil {
		return req, newError(http.StatusBadRequest, errInvalidTitle, "title is required")
	}
	req.Title = strings.TrimSpace(*w.Title)
	if n := utf8.RuneCountInString(req.Title); n < 1 || n > maxTitleRunes {
		return PublishRequest{}, newError(http.StatusBadRequest, errInvalidTitle, "title must be 1–%d characters after trimming, got %d", maxTitleRunes, n)
	}
	if strings.IndexFunc(req.Title, unicode.IsControl) >= 0 {
		return PublishRequest{}, newError(http.StatusBadRequest, errInvalidTitle, "title must not contain control characters")
	}
	if strings.IndexFunc(req.Title, isBidiControl) >= 0 {
		return PublishRequest{}, newError(http.StatusBadRequest, errInvalidTitle, "title must not contain bidirectional embedding, override or isolate characters (U+202A–U+202E, U+2066–U+2069)")
	}
	if w.Body != nil {
		req.Body = *w.Body
	}
	if len(req.Body) > maxBodyBytes {
		return PublishRequest{}, newError(http.StatusBadRequest, errInvalidBody, "body must be at most %d bytes, got %d", maxBodyBytes, len(req.Body))
	}
	if w.URL != nil && *w.URL != "" {
		if e := checkHTTPSURL(*w.URL, errInvalidURL, "url"); e != nil {
			return PublishRequest{}, e
		}
		if strings.IndexFunc(*w.URL, isBidiControl) >= 0 {
			return PublishRequest{}, newError(http.StatusBadRequest, errInvalidURL, "url must not contain bidirectional control characters")
		}
		req.URL = *w.URL
	}
	var e *Error
	if req.SendAt, e = parseScheduleTime(w.SendAt, errInvalidSendAt, "send_at"); e != nil {
		return PublishRequest{}, e
	}
	if req.ExpiresAt, e = parseScheduleTime(w.ExpiresAt, errInvalidExpiresAt, "expires_at"); e != nil {
		return PublishRequest{}, e
	}
	return req, nil
}

// isBidiControl reports the characters that reorder the text around them
// (the "Trojan Source" set, CVE-2021-42574): a title carrying one can make
// a notification read differently from what was published. Marks
// (U+200E, U+200F) only affect neutral characters and stay allowed.
func isBidiControl(r rune) bool {
	return (r >= '\u202A' && r <= '\u202E') || (r >= '\u2066' && r <= '\u2069')
}

// checkHTTPSURL accepts an absolute https URL with a host and no user info.
func checkHTTPSURL(s, code, field string) *Error {
	if len(s) > maxURLBytes {
		return newError(http.StatusBadRequest, code, "%s must be at most %d bytes", field, maxURLBytes)
	}
	u, err := url.Parse(s)
	if err != nil {
		return newError(http.StatusBadRequest, code, "%s is not a URL", field)
	}
	switch {
	case u.Scheme != "https":
		return newError(http.StatusBadRequest, code, "%s must be an https URL", field)
	case u.Host == "" || u.Hostname() == "":
		return newError(http.StatusBadRequest, code, "%s must have a host", field)
	case u.User != nil:
		return newError(http.StatusBadRequest, code, "%s must not carry user info", field)
	}
	return nil
}
