// Package strictjson refuses what encoding/json accepts silently in a
// request body: bytes that are not UTF-8, \u escapes of lone surrogates
// and NUL (decoded as U+FFFD or stored as nothing), a name repeated within
// one object (encoding/json keeps the last), and a name that matches a
// field only when case is ignored (encoding/json would fill that field).
// The API's routes and the CloudEvents intake read bodies through it, so a
// body means the same at both doors.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// Error codes, as the API answers them (400).
const (
	CodeInvalidEncoding = "invalid_encoding"
	CodeMalformedJSON   = "malformed_json"
	CodeDuplicateField  = "duplicate_field"
	CodeUnknownField    = "unknown_field"
)

// Error is one refusal: its code and what to tell the sender.
type Error struct {
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Message }

func newError(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// maxJSONDepth bounds how deeply a request body may nest: the deepest body
// the API reads is two objects deep, and the check below recurses.
const maxJSONDepth = 16

// Check refuses what encoding/json would accept silently: bytes that are not UTF-8 and
// \u escapes of lone surrogates (both decoded as U+FFFD), a name repeated
// within one object (encoding/json keeps the last), and a name that matches
// a field of v only when case is ignored (encoding/json would fill that
// field). v is the value the body will be decoded into; its json tags
// decide which names are fields. Syntax errors are left to the decoder.
func Check(b []byte, v any) *Error {
	if !utf8.Valid(b) {
		return newError(CodeInvalidEncoding, "request body is not valid UTF-8")
	}
	c := jsonChecker{dec: json.NewDecoder(bytes.NewReader(b)), raw: b}
	c.dec.UseNumber()
	e := c.value(reflect.TypeOf(v), "", 0)
	if errors.Is(e, errJSONSyntax) {
		return nil // the decoder reports it with its own message
	}
	if e != nil {
		return e.(*Error)
	}
	return nil
}

// errJSONSyntax stops the walk at malformed input.
var errJSONSyntax = errors.New("json syntax")

type jsonChecker struct {
	dec *json.Decoder
	raw []byte
	off int64 // input offset before the last token
}

func (c *jsonChecker) token() (json.Token, error) {
	c.off = c.dec.InputOffset()
	t, err := c.dec.Token()
	if err != nil {
		return nil, errJSONSyntax
	}
	return t, nil
}

func (c *jsonChecker) value(t reflect.Type, path string, depth int) error {
	if depth > maxJSONDepth {
		return newError(CodeMalformedJSON, "JSON nests deeper than %d levels", maxJSONDepth)
	}
	tok, err := c.token()
	if err != nil {
		return err
	}
	t = deref(t)
	switch v := tok.(type) {
	case json.Delim:
		switch v {
		case '{':
			return c.object(t, path, depth)
		case '[':
			var elem reflect.Type
			if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
				elem = t.Elem()
			}
			for c.dec.More() {
				if err := c.value(elem, path+"[]", depth+1); err != nil {
					return err
				}
			}
			_, err := c.token() // ']'
			return err
		}
	case string:
		return c.checkString(v, path)
	}
	return nil
}

func (c *jsonChecker) object(t reflect.Type, path string, depth int) error {
	var seen map[string]struct{}
	for c.dec.More() {
		tok, err := c.token()
		if err != nil {
			return err
		}
		name, ok := tok.(string)
		if !ok {
			return errJSONSyntax
		}
		field := path + name
		if err := c.checkString(name, field); err != nil {
			return err
		}
		if _, dup := seen[name]; dup {
			return newError(CodeDuplicateField, "field %q appears more than once", field)
		}
		if seen == nil {
			seen = make(map[string]struct{}, 4)
		}
		seen[name] = struct{}{}
		var ft reflect.Type
		if t != nil {
			switch t.Kind() {
			case reflect.Struct:
				f, ok := jsonFieldsOf(t).lookup(name)
				if !ok && f.name != "" {
					return newError(CodeUnknownField, "unknown field %q (names are case-sensitive: did you mean %q?)", field, path+f.name)
				}
				ft = f.typ
			case reflect.Map:
				ft = t.Elem()
			}
		}
		if err := c.value(ft, field+".", depth+1); err != nil {
			return err
		}
	}
	_, err := c.token() // '}'
	return err
}

// checkString refuses NUL, which no text column can store (Postgres
// SQLSTATE 22021), and a string the decoder changed: U+FFFD in the decoded
// value that the raw token did not spell (as the character or \ufffd) was
// a lone surrogate escape.
func (c *jsonChecker) checkString(s, path string) error {
	if strings.IndexByte(s, 0) >= 0 {
		return newError(CodeInvalidEncoding, "%s contains NUL (\\u0000), which cannot be stored", describeJSONPath(path))
	}
	n := strings.Count(s, "\uFFFD")
	if n == 0 {
		return nil
	}
	raw := c.raw[c.off:c.dec.InputOffset()]
	spelled := bytes.Count(raw, []byte("\uFFFD")) + bytes.Count(bytes.ToLower(raw), []byte(`\ufffd`))
	if n > spelled {
		return newError(CodeInvalidEncoding, "%s has a \\u escape of a lone UTF-16 surrogate", describeJSONPath(path))
	}
	return nil
}

func describeJSONPath(path string) string {
	if path == "" {
		return "a field name"
	}
	return "field " + strconv.Quote(strings.TrimSuffix(path, "."))
}

func deref(t reflect.Type) reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

type jsonField struct {
	name string
	typ  reflect.Type
}

type jsonFields []jsonField

// lookup finds name exactly; when only a case-insensitive match exists it
// returns that field with ok false.
func (fs jsonFields) lookup(name string) (jsonField, bool) {
	for _, f := range fs {
		if f.name == name {
			return f, true
		}
	}
	for _, f := range fs {
		if strings.EqualFold(f.name, name) {
			return f, false
		}
	}
	return jsonField{}, false
}

var jsonFieldCache sync.Map // reflect.Type → jsonFields

// jsonFieldsOf lists the JSON names of a struct's exported fields as
// encoding/json sees them (tag name, else the Go name; "-" skipped).
// Request types have no embedded structs, so those are not flattened.
func jsonFieldsOf(t reflect.Type) jsonFields {
	if fs, ok := jsonFieldCache.Load(t); ok {
		return fs.(jsonFields)
	}
	var fs jsonFields
	for i := range t.NumField() {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		fs = append(fs, jsonField{name: name, typ: sf.Type})
	}
	jsonFieldCache.Store(t, fs)
	return fs
}
