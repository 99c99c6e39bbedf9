package notifications

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/notify-dev/notify/streams"
)

// Template is a notification type's texts per locale: a title and a body
// with {{variables}} (a name, or a dotted path into an object:
// {{course.title}}, {{assignment.due}}). Variables come from the send's
// vars, from the course of a course audience ({{course.title}},
// {{course.id}}) and from the event ({{event.type}}, {{event.id}}). A
// send naming a variable it does not give is refused, never sent with a
// hole.
type Template struct {
	DefaultLocale string                `json:"default_locale"`
	Locales       map[string]LocaleText `json:"locales"`
	// Required are variables every send must give in vars (beyond those
	// the texts name, which are required anyway).
	Required []string `json:"required,omitempty"`
	// Mandatory makes the type one no student's preference silences
	// (push or inbox off, the hourly cap): an exam room change. Quiet
	// hours still defer its push unless the send is high priority.
	Mandatory bool `json:"mandatory,omitempty"`
	// UpdatedAt and UpdatedBy are set by the store.
	UpdatedAt time.Time `json:"updated_at,omitzero"`
	UpdatedBy string    `json:"updated_by,omitempty"`
}

// LocaleText is one locale's title and body.
type LocaleText = streams.LocaleText

// Template errors (codes of *Error).
const (
	CodeInvalidTemplateDef = "invalid_template_definition"
	CodeMissingVariable    = "missing_variable"
	CodeUnknownTemplate    = "unknown_template"
)

// MaxLocales bounds a template's locales.
const MaxLocales = 50

var (
	localeRE = regexp.MustCompile(`^[A-Za-z]{2,8}(-[A-Za-z0-9]{1,8})*$`)
	varRE    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)
)

// DecodeTemplate parses a template strictly and validates it.
func DecodeTemplate(b []byte) (Template, error) {
	var t Template
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		return Template{}, invalid(CodeMalformed, "", "%v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Template{}, invalid(CodeMalformed, "", "unexpected data after the JSON object")
	}
	t.UpdatedAt, t.UpdatedBy = time.Time{}, ""
	return t, t.Validate()
}

// Validate checks the locales (BCP 47 tags, at most MaxLocales, the
// default among them), that every title is given and every text parses.
func (t Template) Validate() error {
	if len(t.Locales) == 0 || len(t.Locales) > MaxLocales {
		return invalid(CodeInvalidTemplateDef, "locales", "want 1–%d locales, got %d", MaxLocales, len(t.Locales))
	}
	if _, ok := t.Locales[t.DefaultLocale]; !ok {
		return invalid(CodeInvalidTemplateDef, "default_locale", "%q is not one of the locales", t.DefaultLocale)
	}
	seen := map[string]string{}
	for tag, lt := range t.Locales {
		if !localeRE.MatchString(tag) {
			return invalid(CodeInvalidTemplateDef, "locales."+tag, "not a BCP 47 language tag (e.g. ko, ko-KR, en)")
		}
		if other, dup := seen[strings.ToLower(tag)]; dup {
			return invalid(CodeInvalidTemplateDef, "locales."+tag, "the same tag as %q (tags are case-insensitive)", other)
		}
		seen[strings.ToLower(tag)] = tag
		if strings.TrimSpace(lt.Title) == "" {
			return invalid(CodeInvalidTemplateDef, "locales."+tag+".title", "is required")
		}
		for field, text := range map[string]string{"title": lt.Title, "body": lt.Body} {
			if _, err := placeholders(text); err != nil {
				return invalid(CodeInvalidTemplateDef, "locales."+tag+"."+field, "%v", err)
			}
		}
	}
	for _, v := range t.Required {
		if !varRE.MatchString(v) {
			return invalid(CodeInvalidTemplateDef, "required", "%q is not a variable name", v)
		}
	}
	return nil
}

// placeholders lists the variables text names, in order.
func placeholders(text string) ([]string, error) {
	var out []string
	for rest := text; ; {
		i := strings.Index(rest, "{{")
		if i < 0 {
			if strings.Contains(rest, "}}") {
				return nil, errors.New(`"}}" without "{{"`)
			}
			return out, nil
		}
		if strings.Contains(rest[:i], "}}") {
			return nil, errors.New(`"}}" without "{{"`)
		}
		j := strings.Index(rest[i:], "}}")
		if j < 0 {
			return nil, errors.New(`"{{" without "}}"`)
		}
		name := strings.TrimSpace(rest[i+2 : i+j])
		if !varRE.MatchString(name) {
			return nil, fmt.Errorf("{{%s}} is not a variable (a name, or a dotted path like course.title)", name)
		}
		out = append(out, name)
		rest = rest[i+j+2:]
	}
}

// lookup resolves a dotted variable name in vars.
func lookup(vars map[string]any, name string) (string, bool) {
	var cur any = vars
	for part := range strings.SplitSeq(name, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return "", false
		}
		if cur, ok = m[part]; !ok {
			return "", false
		}
	}
	switch v := cur.(type) {
	case string:
		return v, true
	case nil, map[string]any, []any:
		return "", false // no text to show
	case json.Number:
		return v.String(), true
	default:
		b, err := json.Marshal(v)
		return string(b), err == nil
	}
}

// render fills text's variables from vars; the first missing one is an
// *Error naming it.
func render(text string, vars map[string]any, field string) (string, error) {
	var b strings.Builder
	for rest := text; ; {
		i := strings.Index(rest, "{{")
		if i < 0 {
			b.WriteString(rest)
			return b.String(), nil
		}
		j := strings.Index(rest[i:], "}}")
		name := strings.TrimSpace(rest[i+2 : i+j])
		v, ok := lookup(vars, name)
		if !ok {
			return "", invalid(CodeMissingVariable, "vars."+name, "the template's %s names {{%s}}, which this send does not give (in vars, or course/event)", field, name)
		}
		b.WriteString(rest[:i])
		b.WriteString(v)
		rest = rest[i+j+2:]
	}
}

// Render renders every locale of t with vars, checking each as a
// notification's title and body (and the payload limit with r's other
// fields). It is the only place texts are rendered: once per locale per
// event, never per student.
func (t Template) Render(vars map[string]any, r Request) (map[string]LocaleText, error) {
	for _, v := range t.Required {
		if _, ok := lookup(vars, v); !ok {
			return nil, invalid(CodeMissingVariable, "vars."+v, "the template requires {{%s}}, which this send does not give", v)
		}
	}
	tags := make([]string, 0, len(t.Locales))
	for tag := range t.Locales {
		tags = append(tags, tag)
	}
	slices.Sort(tags) // the first error is the same on every try
	out := make(map[string]LocaleText, len(t.Locales))
	for _, tag := range tags {
		lt := t.Locales[tag]
		title, err := render(lt.Title, vars, "title ("+tag+")")
		if err != nil {
			return nil, err
		}
		body, err := render(lt.Body, vars, "body ("+tag+")")
		if err != nil {
			return nil, err
		}
		title = strings.TrimSpace(title)
		if err := CheckTitle(title); err != nil {
			e := err.(*Error)
			e.Message = "rendered for " + tag + ": " + e.Message
			return nil, e
		}
		if err := CheckBody(body); err != nil {
			e := err.(*Error)
			e.Message = "rendered for " + tag + ": " + e.Message
			return nil, e
		}
		if err := CheckPayloadSize(title, body, r); err != nil {
			e := err.(*Error)
			e.Message = "rendered for " + tag + ": " + e.Message
			return nil, e
		}
		out[tag] = LocaleText{Title: title, Body: body}
	}
	return out, nil
}

// PickLocale chooses a student's rendered locale: their users.locale (BCP
// 47) exactly, else its language alone (ko-KR → ko), else def. Tags
// compare case-insensitively; the result is one of locales' keys (or
// def).
func PickLocale(userLocale string, locales map[string]LocaleText, def string) string {
	if userLocale == "" || len(locales) == 0 {
		return def
	}
	userLocale = strings.ReplaceAll(userLocale, "_", "-") // ko_KR, as some platforms spell it
	lang, _, _ := strings.Cut(userLocale, "-")
	var byLang string
	for tag := range locales {
		if strings.EqualFold(tag, userLocale) {
			return tag
		}
		if strings.EqualFold(tag, lang) {
			byLang = tag
		}
	}
	if byLang != "" {
		return byLang
	}
	return def
}

// Store statements (Put, Get, Delete).
const (
	sqlPutTemplate = `
INSERT INTO notification_templates (type, default_locale, locales, required, updated_by, updated_at, mandatory)
VALUES ($1, $2, $3::text::jsonb, $4, $5, now(), $6)
ON CONFLICT (type) DO UPDATE SET default_locale = excluded.default_locale, locales = excluded.locales,
    required = excluded.required, updated_by = excluded.updated_by, updated_at = now(), mandatory = excluded.mandatory
RETURNING updated_at, xmax = 0`
	sqlGetTemplate    = `SELECT default_locale, locales::text, required, updated_by, updated_at, mandatory FROM notification_templates WHERE type = $1`
	sqlDeleteTemplate = `DELETE FROM notification_templates WHERE type = $1`
)

// Querier is what the store needs: a pool, a connection or a transaction.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// ErrNoTemplate: no template of that type.
var ErrNoTemplate = errors.New("no such template")

// PutTemplate stores t as typ's template (created reports a new one).
func PutTemplate(ctx context.Context, q Querier, typ string, t Template, by string) (Template, bool, error) {
	if err := CheckType(typ); err != nil {
		return Template{}, false, err
	}
	if err := t.Validate(); err != nil {
		return Template{}, false, err
	}
	b, err := json.Marshal(t.Locales)
	if err != nil {
		return Template{}, false, fmt.Errorf("encode locales: %w", err)
	}
	req := t.Required
	if req == nil {
		req = []string{}
	}
	var created bool
	if err := q.QueryRow(ctx, sqlPutTemplate, typ, t.DefaultLocale, string(b), req, by, t.Mandatory).Scan(&t.UpdatedAt, &created); err != nil {
		return Template{}, false, fmt.Errorf("store template %s: %w", typ, err)
	}
	t.UpdatedBy, t.UpdatedAt = by, t.UpdatedAt.UTC()
	return t, created, nil
}

// GetTemplate reads typ's template, or ErrNoTemplate.
func GetTemplate(ctx context.Context, q Querier, typ string) (Template, error) {
	var t Template
	var locales string
	err := q.QueryRow(ctx, sqlGetTemplate, typ).Scan(&t.DefaultLocale, &locales, &t.Required, &t.UpdatedBy, &t.UpdatedAt, &t.Mandatory)
	if errors.Is(err, pgx.ErrNoRows) {
		return Template{}, ErrNoTemplate
	}
	if err != nil {
		return Template{}, fmt.Errorf("read template %s: %w", typ, err)
	}
	if err := json.Unmarshal([]byte(locales), &t.Locales); err != nil {
		return Template{}, fmt.Errorf("decode template %s: %w", typ, err)
	}
	if len(t.Required) == 0 {
		t.Required = nil
	}
	t.UpdatedAt = t.UpdatedAt.UTC()
	return t, nil
}

// DeleteTemplate removes typ's template, or answers ErrNoTemplate.
// Events already created keep their rendered texts.
func DeleteTemplate(ctx context.Context, q Querier, typ string) error {
	tag, err := q.Exec(ctx, sqlDeleteTemplate, typ)
	if err != nil {
		return fmt.Errorf("delete template %s: %w", typ, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNoTemplate
	}
	return nil
}
