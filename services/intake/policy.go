package intake

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/notify-dev/notify/services/notifications"
)

// DefaultService is the sender (notification_events.sender_service) of a
// source rule that names none.
const DefaultService = "intake"

// Source is who may send what: the CloudEvents whose source starts with
// Prefix (the longest matching prefix of all rules decides), the
// notification types they may create and the audiences they may name.
type Source struct {
	// Prefix is matched against the CloudEvent's source attribute, as a
	// plain string prefix ("https://grades.example.edu/",
	// "/courses/"). Required, unique.
	Prefix string `json:"prefix"`
	// Service is the sender the events are created as ("service:NAME" in
	// NotificationCreated). Default DefaultService.
	Service string `json:"service,omitempty"`
	// Types are the notification types allowed: exact names, or a prefix
	// ending in "*" ("grade.*"). Empty: any type (the request's own rules
	// still refuse material.published).
	Types []string `json:"types,omitempty"`
	// Courses allows course audiences (audience.course_id). Default true.
	Courses *bool `json:"courses,omitempty"`
	// Users allows user-list audiences (audience.user_ids): any user notify
	// knows, so off unless set. Default false.
	Users bool `json:"users,omitempty"`
}

// Sources is the intake's policy: every source it accepts.
type Sources []Source

// ParseSources reads --allowed-sources: a comma-separated list of
// prefixes (each allowed any type to course audiences, as sender
// DefaultService), or a JSON array of Source (starting with "["), or
// "@FILE" naming a file holding that JSON array.
func ParseSources(spec string) (Sources, error) {
	spec = strings.TrimSpace(spec)
	if name, ok := strings.CutPrefix(spec, "@"); ok {
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("read sources file: %w", err)
		}
		spec = strings.TrimSpace(string(b))
		if !strings.HasPrefix(spec, "[") {
			return nil, fmt.Errorf("sources file %s: want a JSON array of {prefix, service, types, courses, users}", name)
		}
	}
	var out Sources
	if strings.HasPrefix(spec, "[") {
		dec := json.NewDecoder(bytes.NewReader([]byte(spec)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&out); err != nil {
			return nil, fmt.Errorf("sources: %w", err)
		}
	} else {
		for p := range strings.SplitSeq(spec, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, Source{Prefix: p})
			}
		}
	}
	return out, out.Validate()
}

// Validate checks every rule: a prefix, unique; a service name; types
// that are notification types or type prefixes; at least one audience.
func (ss Sources) Validate() error {
	if len(ss) == 0 {
		return errors.New("no allowed source: give at least one source prefix")
	}
	seen := map[string]bool{}
	for i, s := range ss {
		switch {
		case s.Prefix == "":
			return fmt.Errorf("source %d: the prefix is required", i+1)
		case seen[s.Prefix]:
			return fmt.Errorf("source %q is given twice", s.Prefix)
		case !s.allowsCourses() && !s.Users:
			return fmt.Errorf("source %q allows no audience: set courses or users", s.Prefix)
		}
		seen[s.Prefix] = true
		if s.Service != "" {
			if err := notifications.CheckType(s.Service); err != nil {
				return fmt.Errorf("source %q: service %q: want 1–64 of a-z 0-9 . _ -", s.Prefix, s.Service)
			}
		}
		for _, t := range s.Types {
			if err := notifications.CheckType(strings.TrimSuffix(t, "*")); err != nil && t != "*" {
				return fmt.Errorf("source %q: type %q: want a notification type or a prefix of one ending in *", s.Prefix, t)
			}
		}
	}
	return nil
}

// Match returns the rule of source: the one with the longest prefix of it.
func (ss Sources) Match(source string) (Source, bool) {
	var best Source
	found := false
	for _, s := range ss {
		if strings.HasPrefix(source, s.Prefix) && (!found || len(s.Prefix) > len(best.Prefix)) {
			best, found = s, true
		}
	}
	return best, found
}

func (s Source) allowsCourses() bool { return s.Courses == nil || *s.Courses }

func (s Source) service() string {
	if s.Service == "" {
		return DefaultService
	}
	return s.Service
}

// allowsType reports whether typ is one of s's types.
func (s Source) allowsType(typ string) bool {
	if len(s.Types) == 0 {
		return true
	}
	return slices.ContainsFunc(s.Types, func(t string) bool {
		if p, ok := strings.CutSuffix(t, "*"); ok {
			return strings.HasPrefix(typ, p)
		}
		return t == typ
	})
}

// check refuses what s may not send: another type, an audience kind it
// does not allow. r is valid (Validate passed): exactly one audience.
func (s Source) check(r notifications.Request) error {
	if !s.allowsType(r.Type) {
		return fmt.Errorf("source %q may send types %s, not %q", s.Prefix, strings.Join(s.Types, ", "), r.Type)
	}
	if r.Audience.CourseID != nil && !s.allowsCourses() {
		return fmt.Errorf("source %q may not notify a course's students", s.Prefix)
	}
	if r.Audience.UserIDs != nil && !s.Users {
		return fmt.Errorf("source %q may not notify a list of users (set users in its rule)", s.Prefix)
	}
	return nil
}
