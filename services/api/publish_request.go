package api

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
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
}

// publishWire distinguishes an absent field (nil) from an empty one.
type publishWire struct {
	Title *string `json:"title"`
	Body  *string `json:"body"`
	URL   *string `json:"url"`
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
		req.URL = *w.URL
	}
	return req, nil
}

// decodeStrict decodes exactly one JSON object from b into v.
func decodeStrict(b []byte, v any, disallowUnknown bool) *Error {
	if len(bytes.TrimSpace(b)) == 0 || bytes.TrimSpace(b)[0] != '{' {
		return newError(http.StatusBadRequest, errMalformedJSON, "request body must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if disallowUnknown {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		// encoding/json has no typed error for this case.
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return newError(http.StatusBadRequest, errUnknownField, "unknown field %s", f)
		}
		return jsonDecodeError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return newError(http.StatusBadRequest, errMalformedJSON, "unexpected data after the JSON object")
	}
	return nil
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
