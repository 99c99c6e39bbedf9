package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/notify-dev/notify/services/apps"
	"github.com/notify-dev/notify/services/push/apns"
	"github.com/notify-dev/notify/services/push/fcm"
)

// Devices of every platform live in push_subscriptions (migration
// 0007_devices): a browser's PushSubscription is a webpush device, saved by
// POST /v1/me/push-subscriptions; an FCM registration token or an APNs
// device token is saved by POST /v1/me/devices. Both count against one
// cap, Config.MaxSubscriptionsPerUser, and both are listed and deleted by
// id under /v1/me/devices.

// Platforms a device can be.
const (
	PlatformWebPush = "webpush"
	PlatformFCM     = "fcm"
	PlatformAPNs    = "apns"
)

// APNs environments: which APNs a token was issued by. A token of one
// environment is unknown to the other.
const (
	APNsSandbox    = "sandbox"
	APNsProduction = "production"
)

// Error codes of the devices endpoints.
const (
	errInvalidPlatform    = "invalid_platform"
	errInvalidDeviceToken = "invalid_device_token"
	errInvalidTopic       = "invalid_topic"
	errInvalidEnvironment = "invalid_environment"
	errTokenOwned         = "token_owned_by_another_user"
	errDeviceNotFound     = "device_not_found"
)

// DeviceRequest is a validated POST /v1/me/devices body. An APNs token is
// lower-cased: APNs treats hex case as one token, so must the uniqueness
// of (platform, token).
type DeviceRequest struct {
	Platform    string
	Token       string
	Topic       string // apns only; empty: the app's first bundle id (the default app's: the worker's NOTIFY_APNS_TOPIC); see Config.APNsTopics
	Environment string // apns only; empty: the app's (the default app's: production)
	App         string // "": the default app
}

type deviceWire struct {
	Platform    *string `json:"platform"`
	Token       *string `json:"token"`
	Topic       *string `json:"topic"`
	Environment *string `json:"environment"`
	App         *string `json:"app"`
}

// DecodeDeviceRequest parses and validates a device body. Unknown fields
// are refused: the body is this API's own, not a browser object.
func DecodeDeviceRequest(b []byte) (DeviceRequest, *Error) {
	var w deviceWire
	if e := decodeStrict(b, &w, true); e != nil {
		return DeviceRequest{}, e
	}
	if w.Platform == nil || *w.Platform == "" {
		return DeviceRequest{}, newError(http.StatusBadRequest, errInvalidPlatform, "platform is required: fcm or apns")
	}
	req := DeviceRequest{Platform: *w.Platform}
	if w.App != nil {
		if *w.App == "" {
			return DeviceRequest{}, newError(http.StatusBadRequest, errUnknownApp, "app must not be empty; leave it out for the default app")
		}
		req.App = *w.App
	}
	if w.Token == nil || *w.Token == "" {
		return DeviceRequest{}, newError(http.StatusBadRequest, errInvalidDeviceToken, "token is required")
	}
	switch req.Platform {
	case PlatformFCM:
		if e := checkFCMToken(*w.Token); e != nil {
			return DeviceRequest{}, e
		}
		req.Token = *w.Token
		if w.Topic != nil {
			return DeviceRequest{}, newError(http.StatusBadRequest, errInvalidTopic, "topic is for apns devices only")
		}
		if w.Environment != nil {
			return DeviceRequest{}, newError(http.StatusBadRequest, errInvalidEnvironment, "environment is for apns devices only")
		}
	case PlatformAPNs:
		if err := apns.ValidateDeviceToken(*w.Token); err != nil {
			return DeviceRequest{}, newError(http.StatusBadRequest, errInvalidDeviceToken, "token: %v", err)
		}
		req.Token = strings.ToLower(*w.Token)
		if w.Topic != nil {
			if *w.Topic == "" {
				return DeviceRequest{}, newError(http.StatusBadRequest, errInvalidTopic, "topic must not be empty; leave it out for the server's default")
			}
			if err := apns.ValidateTopic(*w.Topic); err != nil {
				return DeviceRequest{}, newError(http.StatusBadRequest, errInvalidTopic, "%v", err)
			}
			req.Topic = *w.Topic
		}
		if w.Environment != nil {
			if *w.Environment != APNsSandbox && *w.Environment != APNsProduction {
				return DeviceRequest{}, newError(http.StatusBadRequest, errInvalidEnvironment, "environment must be sandbox or production")
			}
			req.Environment = *w.Environment
		}
	case PlatformWebPush:
		return DeviceRequest{}, newError(http.StatusBadRequest, errInvalidPlatform,
			"a webpush device is a browser PushSubscription (endpoint and keys): save it with POST /v1/me/push-subscriptions")
	default:
		return DeviceRequest{}, newError(http.StatusBadRequest, errInvalidPlatform, "unknown platform %q: want fcm or apns", req.Platform)
	}
	return req, nil
}

// checkFCMToken: FCM registration tokens are URL-safe text ("<id>:APA91b…",
// about 160 characters); anything else would be refused by FCM at every
// send, so it is refused here.
func checkFCMToken(t string) *Error {
	if len(t) > fcm.MaxTokenLen {
		return newError(http.StatusBadRequest, errInvalidDeviceToken, "token is %d characters, at most %d", len(t), fcm.MaxTokenLen)
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == ':' || c == '.') {
			return newError(http.StatusBadRequest, errInvalidDeviceToken, "token has %q at %d: an FCM token is letters, digits and - _ : .", c, i)
		}
	}
	return nil
}

// DeviceResponse is the body of a created or updated device.
type DeviceResponse struct {
	ID        int64     `json:"id"`
	Platform  string    `json:"platform"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Device is one entry of GET /v1/me/devices. Web Push keys are never
// returned.
type Device struct {
	ID          int64      `json:"id"`
	Platform    string     `json:"platform"`
	App         string     `json:"app"`
	Endpoint    string     `json:"endpoint,omitempty"`
	Token       string     `json:"token,omitempty"`
	Topic       string     `json:"topic,omitempty"`
	Environment string     `json:"environment,omitempty"`
	DisabledAt  *time.Time `json:"disabled_at,omitempty"`
	CreatedAt   time.Time  `json:"created_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
}

// DeviceList is the body of GET /v1/me/devices.
type DeviceList struct {
	Devices []Device `json:"devices"`
}

const (
	// Counted under sqlLockUserSubscriptions, like a subscription.
	sqlCountDevices = `SELECT count(*), coalesce(bool_or(platform = $2 AND token = $3), false) FROM push_subscriptions WHERE user_id = $1`
	// Upsert by (platform, token), only for its owner (no row: 409), as
	// sqlUpsertSubscription does by endpoint.
	sqlUpsertDevice = `INSERT INTO push_subscriptions (user_id, platform, token, topic, environment, app)
		VALUES ($1, $2, $3, nullif($4, ''), nullif($5, ''), $6)
		ON CONFLICT (platform, token) DO UPDATE
		SET topic = EXCLUDED.topic, environment = EXCLUDED.environment, app = EXCLUDED.app, updated_at = now(),
		    -- The app registered again: it vouches for the token.
		    consecutive_failures = 0, disabled_at = NULL
		WHERE push_subscriptions.user_id = EXCLUDED.user_id
		RETURNING id, created_at, updated_at, xmax = 0`
	sqlListDevices = `SELECT id, platform, app, coalesce(endpoint, ''), coalesce(token, ''), coalesce(topic, ''),
		coalesce(environment, ''), disabled_at, created_at, updated_at
		FROM push_subscriptions WHERE user_id = $1 ORDER BY id`
	sqlDeleteDevice = `DELETE FROM push_subscriptions WHERE id = $1 AND user_id = $2`
)

func (s *Server) handleRegisterDevice(w http.ResponseWriter, r *http.Request, user UUID) {
	body, e := readJSONBody(w, r)
	if e != nil {
		writeError(w, e)
		return
	}
	req, e := DecodeDeviceRequest(body)
	if e != nil {
		writeError(w, e)
		return
	}
	resp := DeviceResponse{Platform: req.Platform}
	var inserted bool
	err := pgx.BeginFunc(r.Context(), s.pool, func(tx pgx.Tx) (err error) {
		app, refused, err := s.deviceApp(r.Context(), req.App, req.Platform)
		if refused != nil || err != nil {
			e = refused
			return err
		}
		if req.Platform == PlatformAPNs {
			// The default app's topics are the deployment's
			// (NOTIFY_APNS_TOPICS); another app's, its bundle ids.
			if app.Name == apps.Default {
				e = s.checkAPNsTopic(req)
			} else {
				e = checkAPNsTopic(app, req.Topic)
			}
			if e != nil {
				return nil
			}
			if req.Environment == "" {
				req.Environment = APNsProduction
				if app.APNs != nil && app.APNs.Environment != "" {
					req.Environment = app.APNs.Environment
				}
			}
		}
		e, err = s.underCap(r.Context(), tx, user, sqlCountDevices, req.Platform, req.Token)
		if e != nil || err != nil {
			return err
		}
		err = tx.QueryRow(r.Context(), sqlUpsertDevice, user, req.Platform, req.Token, req.Topic, req.Environment, app.Name).
			Scan(&resp.ID, &resp.CreatedAt, &resp.UpdatedAt, &inserted)
		if errors.Is(err, pgx.ErrNoRows) {
			s.tokenOwnedElsewhere(r, user, req)
			e = newError(http.StatusConflict, errTokenOwned,
				"this %s token is registered by another user; the app must register again after that user signs out", req.Platform)
			return nil
		}
		return err
	})
	resp.CreatedAt, resp.UpdatedAt = resp.CreatedAt.UTC(), resp.UpdatedAt.UTC()
	s.answerSaved(w, r, "save device", e, err, inserted, resp)
}

// underCap takes the user's subscription lock and refuses (409
// too_many_subscriptions) a new device beyond Config.MaxSubscriptionsPerUser.
// countSQL answers the user's device count and whether the device being
// saved ($2, $3, …) is already one of them: saving that one again is
// always allowed.
func (s *Server) underCap(ctx context.Context, tx pgx.Tx, user UUID, countSQL string, args ...any) (*Error, error) {
	if _, err := tx.Exec(ctx, sqlLockUserSubscriptions, user); err != nil {
		return nil, err
	}
	var n int
	var mine bool
	if err := tx.QueryRow(ctx, countSQL, append([]any{user}, args...)...).Scan(&n, &mine); err != nil {
		return nil, err
	}
	if !mine && n >= s.cfg.MaxSubscriptionsPerUser {
		return newError(http.StatusConflict, errTooManySubscriptions,
			"you have %d devices and push subscriptions, the most allowed; delete one you no longer use (GET /v1/me/devices lists them, DELETE /v1/me/devices/{id} deletes one)", n), nil
	}
	return nil, nil
}

func (s *Server) handleListDevices(w http.ResponseWriter, r *http.Request, user UUID) {
	rows, err := s.pool.Query(r.Context(), sqlListDevices, user)
	if err != nil {
		s.internalError(w, r, "list devices", err)
		return
	}
	list := DeviceList{Devices: []Device{}}
	for rows.Next() {
		var d Device
		if err := rows.Scan(&d.ID, &d.Platform, &d.App, &d.Endpoint, &d.Token, &d.Topic, &d.Environment, &d.DisabledAt, &d.CreatedAt, &d.UpdatedAt); err != nil {
			rows.Close()
			s.internalError(w, r, "list devices", err)
			return
		}
		d.CreatedAt, d.UpdatedAt = d.CreatedAt.UTC(), d.UpdatedAt.UTC()
		if d.DisabledAt != nil {
			t := d.DisabledAt.UTC()
			d.DisabledAt = &t
		}
		list.Devices = append(list.Devices, d)
	}
	if err := rows.Err(); err != nil {
		s.internalError(w, r, "list devices", err)
		return
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) handleDeleteDevice(w http.ResponseWriter, r *http.Request, user UUID) {
	raw := r.PathValue("id")
	id, err := strconv.ParseInt(raw, 10, 64)
	// Only the id's canonical decimal names it: ParseInt also takes "+7"
	// and "007", and one device must not answer to many spellings.
	if err != nil || id < 1 || strconv.FormatInt(id, 10) != raw {
		writeError(w, newError(http.StatusNotFound, errDeviceNotFound, "no such device"))
		return
	}
	tag, err := s.pool.Exec(r.Context(), sqlDeleteDevice, id, user)
	if err != nil {
		s.internalError(w, r, "delete device", err)
		return
	}
	if tag.RowsAffected() == 0 {
		writeError(w, newError(http.StatusNotFound, errDeviceNotFound, "no device of yours has id %d", id))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
