package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/notify-dev/notify/services/apps"
	"github.com/notify-dev/notify/services/auth"
)

// The apps routes (/v1/apps) manage the apps one notify serves and their
// push credentials (package apps); a service with apps:admin only.
// Private parts go in and never come out: every answer is an app's
// public parts. Sealing needs Config.SecretsKey; without it, adding or
// rotating credentials is 503 secrets_key_not_configured.

// Error codes of the apps routes and of devices' apps.
const (
	errInvalidApp       = "invalid_app"
	errAppNotFound      = "app_not_found"
	errAppExists        = "app_exists"
	errAppIsDefault     = "app_is_default"
	errAppHasDevices    = "app_has_devices"
	errUnknownApp       = "unknown_app"
	errAppPlatform      = "app_platform_not_configured"
	errUnknownVAPIDKey  = "unknown_vapid_key"
	errSecretsKeyNotSet = "secrets_key_not_configured"
)

// appWire is the body of POST /v1/apps and POST /v1/apps/{app}/rotate.
type appWire struct {
	Name  *string `json:"name"`
	VAPID *struct {
		PrivateKey *string `json:"private_key"`
		Subject    *string `json:"subject"`
		NewKey     *bool   `json:"new_key"`
	} `json:"vapid"`
	FCM *struct {
		Credentials json.RawMessage `json:"credentials"`
		Endpoint    *string         `json:"endpoint"`
		RateLimit   *int            `json:"rate_limit"`
	} `json:"fcm"`
	APNs *struct {
		Key         *string  `json:"key"`
		KeyID       *string  `json:"key_id"`
		TeamID      *string  `json:"team_id"`
		Topics      []string `json:"topics"`
		Environment *string  `json:"environment"`
		Endpoint    *string  `json:"endpoint"`
		Connections *int     `json:"connections"`
	} `json:"apns"`
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// decodeAppSpec reads an apps body; rotate takes no name.
func decodeAppSpec(b []byte, rotate bool) (apps.Spec, *Error) {
	var w appWire
	if e := decodeStrict(b, &w, true); e != nil {
		return apps.Spec{}, e
	}
	var s apps.Spec
	if rotate && w.Name != nil {
		return s, newError(http.StatusBadRequest, errInvalidApp, "name is the path's; leave it out of the body")
	}
	s.Name = str(w.Name)
	if v := w.VAPID; v != nil {
		s.VAPIDPrivateKey, s.VAPIDSubject = str(v.PrivateKey), str(v.Subject)
		s.NewVAPIDKey = v.NewKey != nil && *v.NewKey
		if !rotate && v.NewKey != nil {
			return s, newError(http.StatusBadRequest, errInvalidApp, "vapid.new_key is for rotate; a new app gets a new key when vapid.private_key is left out")
		}
		if rotate && s.VAPIDPrivateKey == "" && s.VAPIDSubject == "" && !s.NewVAPIDKey {
			return s, newError(http.StatusBadRequest, errInvalidApp, "vapid: give private_key, new_key or subject")
		}
		if !rotate && s.VAPIDSubject == "" {
			return s, newError(http.StatusBadRequest, errInvalidApp, "vapid.subject is required: a mailto: or https: contact for the push services")
		}
	}
	if f := w.FCM; f != nil {
		if len(f.Credentials) > 0 && string(f.Credentials) != "null" {
			if f.Credentials[0] != '{' {
				return s, newError(http.StatusBadRequest, errInvalidApp, "fcm.credentials: want the service-account JSON object")
			}
			s.FCMCredentials = f.Credentials
		}
		s.FCMEndpoint = str(f.Endpoint)
		if f.RateLimit != nil {
			if *f.RateLimit < 1 {
				return s, newError(http.StatusBadRequest, errInvalidApp, "fcm.rate_limit: want messages a minute, at least 1")
			}
			s.FCMRateLimit = *f.RateLimit
		}
		if len(s.FCMCredentials) == 0 && s.FCMEndpoint == "" && s.FCMRateLimit == 0 {
			return s, newError(http.StatusBadRequest, errInvalidApp, "fcm: give credentials, endpoint or rate_limit")
		}
	}
	if a := w.APNs; a != nil {
		s.APNsKey = []byte(str(a.Key))
		if len(s.APNsKey) == 0 {
			s.APNsKey = nil
		}
		s.APNsKeyID, s.APNsTeamID, s.APNsTopics = str(a.KeyID), str(a.TeamID), a.Topics
		s.APNsEnvironment, s.APNsEndpoint = str(a.Environment), str(a.Endpoint)
		if a.Connections != nil {
			if *a.Connections < 1 {
				return s, newError(http.StatusBadRequest, errInvalidApp, "apns.connections: want at least 1")
			}
			s.APNsConnections = *a.Connections
		}
	}
	return s, nil
}

// appFields maps package apps' field names (the CLI's flags) to the
// body's paths.
var appFields = map[string]string{
	"name": "name", "credentials": "body",
	"vapid-private-key": "vapid.private_key", "vapid-subject": "vapid.subject",
	"fcm-credentials": "fcm.credentials", "fcm-endpoint": "fcm.endpoint",
	"apns-key": "apns.key", "apns-key-id": "apns.key_id", "apns-team-id": "apns.team_id",
	"apns-topics": "apns.topics", "apns-environment": "apns.environment", "apns-endpoint": "apns.endpoint",
	"fcm-rate-limit": "fcm.rate_limit", "apns-connections": "apns.connections",
}

// appError answers a Store error.
func (s *Server) appError(w http.ResponseWriter, r *http.Request, what string, err error) {
	var ie *apps.InvalidError
	switch {
	case errors.As(err, &ie):
		f := appFields[ie.Field]
		if f == "" {
			f = ie.Field
		}
		writeError(w, newError(http.StatusBadRequest, errInvalidApp, "%s: %s", f, ie.Msg))
	case errors.Is(err, apps.ErrNotFound):
		writeError(w, newError(http.StatusNotFound, errAppNotFound, "no app %q", r.PathValue("app")))
	case errors.Is(err, apps.ErrExists):
		writeError(w, newError(http.StatusConflict, errAppExists, "%v", err))
	case errors.Is(err, apps.ErrDefault):
		writeError(w, newError(http.StatusConflict, errAppIsDefault, "%v", err))
	case errors.Is(err, apps.ErrHasDevices):
		writeError(w, newError(http.StatusConflict, errAppHasDevices, "%v", err))
	case errors.Is(err, apps.ErrNoSecretsKey):
		writeError(w, newError(http.StatusServiceUnavailable, errSecretsKeyNotSet,
			"this API has no secrets key to seal credentials with: set NOTIFY_SECRETS_KEY or NOTIFY_SECRETS_KEY_FILE (the push workers' key)"))
	default:
		s.internalError(w, r, what, err)
	}
}

// AppList is the body of GET /v1/apps.
type AppList struct {
	Apps []apps.App `json:"apps"`
}

func (s *Server) handleListApps(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.authorize(w, r, auth.ScopeAppsAdmin); !ok {
		return
	}
	list, err := s.apps.List(r.Context())
	if err != nil {
		s.appError(w, r, "list apps", err)
		return
	}
	writeJSON(w, http.StatusOK, AppList{Apps: list})
}

func (s *Server) handleGetApp(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.authorize(w, r, auth.ScopeAppsAdmin); !ok {
		return
	}
	a, err := s.apps.Get(r.Context(), r.PathValue("app"))
	if err != nil {
		s.appError(w, r, "get app", err)
		return
	}
	writeJSON(w, http.StatusOK, a)
}

func (s *Server) handleAddApp(w http.ResponseWriter, r *http.Request) {
	p, ok := s.authorize(w, r, auth.ScopeAppsAdmin)
	if !ok {
		return
	}
	body, e := readJSONBody(w, r)
	if e != nil {
		writeError(w, e)
		return
	}
	spec, e := decodeAppSpec(body, false)
	if e != nil {
		writeError(w, e)
		return
	}
	a, err := s.apps.Add(r.Context(), spec)
	if err != nil {
		s.appError(w, r, "add app", err)
		return
	}
	s.log.Info("app added", "app", a, "by", p.String())
	writeJSON(w, http.StatusCreated, a)
}

func (s *Server) handleRotateApp(w http.ResponseWriter, r *http.Request) {
	p, ok := s.authorize(w, r, auth.ScopeAppsAdmin)
	if !ok {
		return
	}
	body, e := readJSONBody(w, r)
	if e != nil {
		writeError(w, e)
		return
	}
	spec, e := decodeAppSpec(body, true)
	if e != nil {
		writeError(w, e)
		return
	}
	a, err := s.apps.Rotate(r.Context(), r.PathValue("app"), spec)
	if err != nil {
		s.appError(w, r, "rotate app", err)
		return
	}
	s.log.Info("app credentials rotated", "app", a, "by", p.String())
	writeJSON(w, http.StatusOK, a)
}

func (s *Server) handleRemoveApp(w http.ResponseWriter, r *http.Request) {
	p, ok := s.authorize(w, r, auth.ScopeAppsAdmin)
	if !ok {
		return
	}
	if err := s.apps.Remove(r.Context(), r.PathValue("app")); err != nil {
		s.appError(w, r, "remove app", err)
		return
	}
	s.log.Info("app removed", "app", r.PathValue("app"), "by", p.String())
	w.WriteHeader(http.StatusNoContent)
}

// AppVAPIDKey is the body of GET /v1/apps/{app}/vapid-public-key. KeyID
// is what a subscription names as vapid_key_id; 0 for the default app,
// whose key is the environment's.
type AppVAPIDKey struct {
	App       string `json:"app"`
	KeyID     int64  `json:"key_id"`
	PublicKey string `json:"public_key"`
}

// handleAppVAPIDKey is public, as GET /v1/vapid-public-key is: a page
// needs the key before anyone signs in.
func (s *Server) handleAppVAPIDKey(w http.ResponseWriter, r *http.Request) {
	a, err := s.apps.Get(r.Context(), r.PathValue("app"))
	if err != nil {
		s.appError(w, r, "get app", err)
		return
	}
	k := a.WebPush.Current()
	if k == nil {
		writeError(w, newError(http.StatusNotFound, errAppPlatform, "app %q has no VAPID key", a.Name))
		return
	}
	writeJSON(w, http.StatusOK, AppVAPIDKey{App: a.Name, KeyID: k.ID, PublicKey: k.PublicKey})
}

// deviceApp looks up the app a device names ("" is the default app) and
// checks it can serve the platform. The default app is the environment's:
// the API does not know which of its platforms the workers have
// credentials for, so it accepts every device for it.
func (s *Server) deviceApp(ctx context.Context, name, platform string) (apps.App, *Error, error) {
	if name == "" {
		name = apps.Default
	}
	a, err := s.apps.Get(ctx, name)
	if errors.Is(err, apps.ErrNotFound) {
		return a, newError(http.StatusBadRequest, errUnknownApp, "no app %q (GET /v1/apps lists them)", name), nil
	}
	if err != nil || name == apps.Default {
		return a, nil, err
	}
	var has bool
	switch platform {
	case PlatformWebPush:
		has = a.WebPush.Current() != nil
	case PlatformFCM:
		has = a.FCM != nil
	case PlatformAPNs:
		has = a.APNs != nil
	}
	if !has {
		return a, newError(http.StatusBadRequest, errAppPlatform, "app %q has no %s credentials", name, platform), nil
	}
	return a, nil, nil
}

// checkAPNsTopic: an APNs device of an app names one of its bundle ids;
// the default app's devices may name any (its topic is the worker's
// NOTIFY_APNS_TOPIC setting, unknown to the API).
func checkAPNsTopic(a apps.App, topic string) *Error {
	if a.Name == apps.Default || topic == "" || a.APNs.HasTopic(topic) {
		return nil
	}
	return newError(http.StatusBadRequest, errInvalidTopic, "topic %q is not a bundle id of app %q (%s)", topic, a.Name, strings.Join(a.APNs.Topics, ", "))
}

// subscriptionVAPIDKey is the key a new subscription of app a is recorded
// with: the one it names (any of the app's, a retired one too: the
// browser may have fetched the key just before a rotation), else the
// app's current one. nil for the default app (the environment's key).
func subscriptionVAPIDKey(a apps.App, id *int64) (*int64, *Error) {
	if a.Name == apps.Default {
		if id != nil && *id != 0 {
			return nil, newError(http.StatusBadRequest, errUnknownVAPIDKey, "the default app has one VAPID key, key_id 0")
		}
		return nil, nil
	}
	if id == nil {
		cur := a.WebPush.Current().ID
		return &cur, nil
	}
	if a.WebPush.Key(*id) == nil {
		return nil, newError(http.StatusBadRequest, errUnknownVAPIDKey, "vapid_key_id %d is not a key of app %q", *id, a.Name)
	}
	return id, nil
}
