package apps

import (
	"crypto/ecdsa"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/notify-dev/notify/services/push/apns"
	"github.com/notify-dev/notify/services/push/fcm"
	"github.com/notify-dev/notify/services/push/webpush"
)

// Default is the app the environment variables define.
const Default = "default"

// Sentinel errors; match with errors.Is.
var (
	// ErrNotFound: no app of that name.
	ErrNotFound = errors.New("no such app")
	// ErrExists: an app of that name exists already.
	ErrExists = errors.New("app exists already")
	// ErrDefault: the default app is defined by the environment.
	ErrDefault = errors.New("the default app is defined by the environment (NOTIFY_VAPID_*, NOTIFY_FCM_*, NOTIFY_APNS_*): change those variables")
	// ErrHasDevices: an app with devices cannot be removed.
	ErrHasDevices = errors.New("app has devices")
	// ErrNoSecretsKey: credentials are to be sealed or opened but no key
	// is configured.
	ErrNoSecretsKey = errors.New("no secrets key: set NOTIFY_SECRETS_KEY or NOTIFY_SECRETS_KEY_FILE (make one with `notify apps secrets-key`)")
)

// InvalidError is a refused Spec: Field names the input (as the CLI flag
// and the API body name it), the message says what is wrong.
type InvalidError struct {
	Field string
	Msg   string
}

func (e *InvalidError) Error() string { return e.Field + ": " + e.Msg }

func invalid(field, format string, args ...any) error {
	return &InvalidError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// CheckName accepts 1–63 of a-z 0-9 . _ -, starting with a letter or
// digit: app names appear in paths, logs and metric labels as they are.
func CheckName(name string) error {
	if !nameRE.MatchString(name) {
		return invalid("name", "%q: want 1–63 of a-z 0-9 . _ -, starting with a letter or digit", name)
	}
	return nil
}

// App is one app. Only Store.Load fills the private parts (the Secret
// fields); they print as "[redacted]" and are left out of JSON.
type App struct {
	Name string `json:"name"`
	// Source is "database", or "environment" for the default app.
	Source    string    `json:"source"`
	Version   int64     `json:"version"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	WebPush   *WebPush  `json:"webpush,omitempty"`
	FCM       *FCM      `json:"fcm,omitempty"`
	APNs      *APNs     `json:"apns,omitempty"`
}

// WebPush is an app's VAPID identity: the subject and its key pairs,
// newest first; Keys[0] is the current one unless retired (then none is).
type WebPush struct {
	Subject string     `json:"subject"`
	Keys    []VAPIDKey `json:"keys"`
}

// Current is the key new subscriptions are made with, or nil.
func (w *WebPush) Current() *VAPIDKey {
	if w == nil || len(w.Keys) == 0 || w.Keys[0].RetiredAt != nil {
		return nil
	}
	return &w.Keys[0]
}

// Key returns the key of that id, or nil.
func (w *WebPush) Key(id int64) *VAPIDKey {
	if w == nil {
		return nil
	}
	for i := range w.Keys {
		if w.Keys[i].ID == id {
			return &w.Keys[i]
		}
	}
	return nil
}

// VAPIDKey is one key pair. ID is what push_subscriptions.vapid_key_id
// names; 0 for the default app's key from the environment.
type VAPIDKey struct {
	ID        int64                     `json:"id"`
	PublicKey string                    `json:"public_key"`
	CreatedAt time.Time                 `json:"created_at"`
	RetiredAt *time.Time                `json:"retired_at,omitempty"`
	Private   Secret[*webpush.VAPIDKey] `json:"-"`
}

// FCM is an app's Firebase project.
type FCM struct {
	ProjectID   string `json:"project_id"`
	ClientEmail string `json:"client_email"`
	// Endpoint is FCM's origin; "" is fcm.DefaultEndpoint.
	Endpoint string `json:"endpoint,omitempty"`
	// RateLimit is the messages a minute each push worker sends to the
	// project; 0: the worker's default (600,000, FCM's published default
	// quota).
	RateLimit   int                      `json:"rate_limit,omitempty"`
	Credentials Secret[*fcm.Credentials] `json:"-"`
}

// APNs is an app's Apple token-authentication key and bundle ids.
type APNs struct {
	TeamID string `json:"team_id"`
	KeyID  string `json:"key_id"`
	// Topics are the bundle ids this app's devices may name; a device
	// naming none is sent with Topics[0].
	Topics      []string `json:"topics"`
	Environment string   `json:"environment"`
	// Endpoint replaces Apple's origins; "" is Apple's (production or
	// sandbox by the device's environment).
	Endpoint string `json:"endpoint,omitempty"`
	// Connections is the HTTP/2 connections each push worker opens to
	// APNs with this key; 0: the client's default (16).
	Connections int                       `json:"connections,omitempty"`
	Key         Secret[*ecdsa.PrivateKey] `json:"-"`
}

// HasTopic reports whether topic is one of the app's bundle ids.
func (a *APNs) HasTopic(topic string) bool { return a != nil && slices.Contains(a.Topics, topic) }

// LogValue is the app for slog: its name, version and platforms only.
func (a App) LogValue() slog.Value {
	var p []string
	if a.WebPush != nil {
		p = append(p, "webpush")
	}
	if a.FCM != nil {
		p = append(p, "fcm")
	}
	if a.APNs != nil {
		p = append(p, "apns")
	}
	return slog.GroupValue(slog.String("name", a.Name), slog.Int64("version", a.Version), slog.String("platforms", strings.Join(p, ",")))
}

// Secret holds a private value so that it cannot reach a log, a %v or a
// JSON document by accident: only Value returns it.
type Secret[T any] struct{ v T }

// NewSecret wraps v.
func NewSecret[T any](v T) Secret[T] { return Secret[T]{v: v} }

// Value is the secret.
func (s Secret[T]) Value() T { return s.v }

func (Secret[T]) String() string   { return "[redacted]" }
func (Secret[T]) GoString() string { return "[redacted]" }

// LogValue keeps the secret out of slog.
func (Secret[T]) LogValue() slog.Value { return slog.StringValue("[redacted]") }

// MarshalJSON keeps the secret out of JSON.
func (Secret[T]) MarshalJSON() ([]byte, error) { return json.Marshal("[redacted]") }

// Spec is what Store.Add and Store.Rotate are given: the CLI's flags and
// the API's body. Empty fields are not given.
type Spec struct {
	Name string
	// VAPID: a private key (base64url scalar, as `notify vapid generate`
	// prints it) and the subject. On Add, a subject without a key makes
	// a new key pair; on Rotate, NewVAPIDKey makes one.
	VAPIDPrivateKey string
	VAPIDSubject    string
	NewVAPIDKey     bool
	// FCM: the service-account JSON and FCM's origin.
	FCMCredentials []byte
	FCMEndpoint    string
	// FCMRateLimit is messages a minute per push worker (1–100,000,000);
	// 0 keeps the stored one (the default when none).
	FCMRateLimit int
	// APNs: the .p8 PEM, its key id, the team id, the bundle ids, the
	// environment (default production) and an origin replacing Apple's.
	APNsKey         []byte
	APNsKeyID       string
	APNsTeamID      string
	APNsTopics      []string
	APNsEnvironment string
	APNsEndpoint    string
	// APNsConnections is connections per push worker (1–100); 0 keeps
	// the stored one (the default when none).
	APNsConnections int
}

var appleIDRE = regexp.MustCompile(`^[A-Za-z0-9]{1,64}$`)

// parsed is a validated Spec: the parsed private parts beside their
// serialised forms, which are what get sealed.
type parsed struct {
	vapid      *webpush.VAPIDKey
	fcm        *fcm.Credentials
	fcmJSON    []byte
	apnsKeyPEM []byte
}

func (s Spec) hasVAPID() bool {
	return s.VAPIDPrivateKey != "" || s.VAPIDSubject != "" || s.NewVAPIDKey
}
func (s Spec) hasFCM() bool {
	return len(s.FCMCredentials) > 0 || s.FCMEndpoint != "" || s.FCMRateLimit != 0
}
func (s Spec) hasAPNs() bool {
	return len(s.APNsKey) > 0 || s.APNsKeyID != "" || s.APNsTeamID != "" || len(s.APNsTopics) > 0 || s.APNsEnvironment != "" ||
		s.APNsEndpoint != "" || s.APNsConnections != 0
}

// parse checks every field given and parses the private parts. It never
// puts key material in an error.
func (s Spec) parse() (parsed, error) {
	var p parsed
	var err error
	if s.VAPIDPrivateKey != "" {
		if s.NewVAPIDKey {
			return p, invalid("vapid-private-key", "give a key or ask for a new one, not both")
		}
		if p.vapid, err = webpush.ParseVAPIDKey(s.VAPIDPrivateKey); err != nil {
			return p, invalid("vapid-private-key", "want the base64url 32-byte P-256 scalar `notify vapid generate` prints")
		}
	}
	if s.VAPIDSubject != "" {
		if !strings.HasPrefix(s.VAPIDSubject, "mailto:") && !strings.HasPrefix(s.VAPIDSubject, "https://") || len(s.VAPIDSubject) > 255 {
			return p, invalid("vapid-subject", "%q: want a mailto: or https: URI (RFC 8292)", s.VAPIDSubject)
		}
	}
	if len(s.FCMCredentials) > 0 {
		if p.fcm, err = fcm.ParseCredentials(s.FCMCredentials); err != nil {
			return p, invalid("fcm-credentials", "%v", redactFCMError(err))
		}
		// Sealed as parsed and re-encoded: only the fields the client
		// uses, whatever else the file carried.
		if p.fcmJSON, err = json.Marshal(p.fcm); err != nil {
			return p, err
		}
	}
	if s.FCMEndpoint != "" {
		if err := checkOrigin(s.FCMEndpoint); err != nil {
			return p, invalid("fcm-endpoint", "%v", err)
		}
	}
	if s.FCMRateLimit < 0 || s.FCMRateLimit > 100_000_000 {
		return p, invalid("fcm-rate-limit", "%d: want messages a minute, 1 to 100000000", s.FCMRateLimit)
	}
	if s.APNsConnections < 0 || s.APNsConnections > 100 {
		return p, invalid("apns-connections", "%d: want 1 to 100 connections", s.APNsConnections)
	}
	if len(s.APNsKey) > 0 {
		if _, err := apns.ParsePrivateKey(s.APNsKey); err != nil {
			return p, invalid("apns-key", "%v", err)
		}
		p.apnsKeyPEM = s.APNsKey
	}
	if s.APNsKeyID != "" && !appleIDRE.MatchString(s.APNsKeyID) {
		return p, invalid("apns-key-id", "%q: want Apple's key id (letters and digits)", s.APNsKeyID)
	}
	if s.APNsTeamID != "" && !appleIDRE.MatchString(s.APNsTeamID) {
		return p, invalid("apns-team-id", "%q: want Apple's team id (letters and digits)", s.APNsTeamID)
	}
	seen := map[string]bool{}
	for _, t := range s.APNsTopics {
		if t == "" {
			return p, invalid("apns-topics", "an empty bundle id")
		}
		if err := apns.ValidateTopic(t); err != nil {
			return p, invalid("apns-topics", "%v", err)
		}
		if seen[t] {
			return p, invalid("apns-topics", "%q twice", t)
		}
		seen[t] = true
	}
	if len(s.APNsTopics) > 100 {
		return p, invalid("apns-topics", "%d bundle ids, at most 100", len(s.APNsTopics))
	}
	if s.APNsEnvironment != "" && s.APNsEnvironment != "sandbox" && s.APNsEnvironment != "production" {
		return p, invalid("apns-environment", "%q: want sandbox or production", s.APNsEnvironment)
	}
	if s.APNsEndpoint != "" {
		if _, err := apns.ParseEndpoint(s.APNsEndpoint); err != nil {
			return p, invalid("apns-endpoint", "%v", err)
		}
	}
	return p, nil
}

// redactFCMError keeps only fcm.ParseCredentials' field-level message: it
// never quotes private_key, but a JSON syntax error could quote input.
func redactFCMError(err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("service-account JSON is not JSON (at byte %d)", se.Offset)
	}
	return err
}

func checkOrigin(raw string) error {
	// The same shape as APNs's: https://host[:port] and nothing after it.
	_, err := apns.ParseEndpoint(raw)
	if err != nil {
		return errors.New(strings.Replace(err.Error(), "APNs is https only", "https only", 1))
	}
	return nil
}
