package auth

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Scope is one right a service credential carries, in the token's scope
// claim (RFC 9068 §2.2.3: space-separated, RFC 6749 §3.3 syntax). Users
// carry none: what a person may do follows from the roster (the
// instructor of a course publishes to it), never from their token.
type Scope string

// The scopes notify knows. Each grants its right on every course and
// every event: a service acts for the platform, not for one course.
const (
	// ScopeRosterWrite: write users, courses and enrollments.
	ScopeRosterWrite Scope = "roster:write"
	// ScopeNotificationsSend: publish a material to any course, send
	// notifications of any type to any audience, manage templates.
	ScopeNotificationsSend Scope = "notifications:send"
	// ScopeEventsRead: read any event's status.
	ScopeEventsRead Scope = "events:read"
	// ScopeEventsControl: pause, resume and cancel any event.
	ScopeEventsControl Scope = "events:control"
	// ScopeTemplatesWrite: write and delete the templates of any
	// notification type (notifications:send may too, as it may send them).
	ScopeTemplatesWrite Scope = "templates:write"
	// ScopeAppsAdmin: add, rotate and remove apps and their push
	// credentials (/v1/apps).
	ScopeAppsAdmin Scope = "apps:admin"
)

// Scopes lists every known scope.
var Scopes = []Scope{ScopeRosterWrite, ScopeNotificationsSend, ScopeEventsRead, ScopeEventsControl, ScopeTemplatesWrite, ScopeAppsAdmin}

// ServicePrefix starts the subject of a service credential: "service:NAME".
// A platform user id never starts with it (ids are uuids or the
// platform's own keys), so the two cannot be confused.
const ServicePrefix = "service:"

var serviceName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// CheckServiceName accepts 1–63 characters of lower-case letters, digits,
// '.', '_' and '-', starting with a letter or digit: names appear in logs
// and metrics as they are.
func CheckServiceName(name string) error {
	if !serviceName.MatchString(name) {
		return fmt.Errorf("service name %q: want 1–63 of a-z 0-9 . _ -, starting with a letter or digit", name)
	}
	return nil
}

// ParseScopes reads a list of scopes separated by commas or spaces (a
// flag's value) and refuses any it does not know, naming the known ones.
func ParseScopes(s string) ([]Scope, error) {
	var out []Scope
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		sc := Scope(f)
		if !slices.Contains(Scopes, sc) {
			return nil, fmt.Errorf("unknown scope %q (known: %s)", f, joinScopes(Scopes, ", "))
		}
		if !slices.Contains(out, sc) {
			out = append(out, sc)
		}
	}
	return out, nil
}

// FormatScopes is the scope claim's value: known scopes only, space-separated.
func FormatScopes(scopes []Scope) (string, error) {
	for _, sc := range scopes {
		if !slices.Contains(Scopes, sc) {
			return "", fmt.Errorf("unknown scope %q (known: %s)", sc, joinScopes(Scopes, ", "))
		}
	}
	return joinScopes(scopes, " "), nil
}

// parseScopes reads a verified token's scope claim. Scopes notify does not
// know are dropped, as RFC 9068 has a resource server do: an issuer may
// put other audiences' scopes in the same token.
func parseScopes(claim string) []Scope {
	var out []Scope
	for _, f := range strings.Fields(claim) {
		if sc := Scope(f); slices.Contains(Scopes, sc) && !slices.Contains(out, sc) {
			out = append(out, sc)
		}
	}
	return out
}

func joinScopes(scopes []Scope, sep string) string {
	ss := make([]string, len(scopes))
	for i, sc := range scopes {
		ss[i] = string(sc)
	}
	return strings.Join(ss, sep)
}
