package api

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/notify-dev/notify/services/strictjson"
)

// checkJSON is strictjson.Check as the API answers it: 400 with the
// refusal's code. v is the value the body will be decoded into; its json
// tags decide which names are fields.
func checkJSON(b []byte, v any) *Error {
	if e := strictjson.Check(b, v); e != nil {
		return newError(http.StatusBadRequest, e.Code, "%s", e.Message)
	}
	return nil
}

// checkQuery holds query strings to the rules of bodies: well-formed
// percent-encoding, UTF-8, no NUL. url.Values drops a malformed pair
// silently, and a value can reach a query (?endpoint=).
func checkQuery(raw string) *Error {
	if raw == "" {
		return nil
	}
	q, err := url.ParseQuery(raw)
	if err != nil {
		return newError(http.StatusBadRequest, errMalformedRequest, "the query string is not well-formed percent-encoding")
	}
	for k, vs := range q {
		for _, v := range append(vs, k) {
			if !utf8.ValidString(v) || strings.IndexByte(v, 0) >= 0 {
				return newError(http.StatusBadRequest, errInvalidEncoding, "query parameter %q is not UTF-8 text without NUL", strings.ToValidUTF8(k, "\uFFFD"))
			}
		}
	}
	return nil
}

// decodeStrict decodes exactly one JSON object from b into v, after
// checkJSON.
func decodeStrict(b []byte, v any, disallowUnknown bool) *Error {
	if len(bytes.TrimSpace(b)) == 0 || bytes.TrimSpace(b)[0] != '{' {
		return newError(http.StatusBadRequest, errMalformedJSON, "request body must be a JSON object")
	}
	if e := checkJSON(b, v); e != nil {
		return e
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
