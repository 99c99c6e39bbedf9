package pushmock

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/notify-dev/notify/services/push/fcm"
)

// The FCM side of the mock (Config.FCMCredentialsFile): an OAuth 2.0 token
// endpoint and FCM HTTP v1's messages:send, on the same TLS listener as
// the push resources, checked as strictly as Google checks them.
//
//	POST /token                               grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer&assertion=<JWT>
//	POST /v1/projects/{project}/messages:send {"message":{"token":…,…}} with Authorization: Bearer <access token>
//
// The token endpoint verifies the assertion (RS256 against the service
// account's public key, iss = client_email, the firebase.messaging scope,
// aud = the URL it was posted to, iat and exp) and issues an access token
// valid for Config.FCMTokenLifetime. messages:send checks the bearer
// token (401 UNAUTHENTICATED), the project (403 PERMISSION_DENIED), the
// JSON strictly (unknown fields, non-string data values, a malformed
// android.ttl: 400 INVALID_ARGUMENT) and the registration token (FCMToken;
// another project's: 403 SENDER_ID_MISMATCH; not one: 400). Faults, by
// the token's id, as for Web Push: GoneFraction answers 404 UNREGISTERED,
// Always5xxFraction 500 INTERNAL, Rate429 429 QUOTA_EXCEEDED with
// Retry-After, Rate5xx 503 UNAVAILABLE; answers wait out the latency.

// FCMTokenPath is the mock's token endpoint (the dev credentials' token_uri).
const FCMTokenPath = "/token"

// FCMStats is the FCM side of Stats.
type FCMStats struct {
	// Received counts messages:send requests.
	Received int64 `json:"received"`
	// Unique counts distinct device ids answered 200.
	Unique int64 `json:"unique"`
	// Duplicates counts 200s for an id already answered 200.
	Duplicates int64 `json:"duplicates"`
	// ByStatus counts messages:send answers by HTTP status.
	ByStatus map[string]int64 `json:"by_status"`
	// AuthFailures counts messages:send requests refused for their bearer
	// token (missing, unknown, expired) or project.
	AuthFailures int64 `json:"auth_failures"`
	// TokenExchanges counts access tokens issued.
	TokenExchanges int64 `json:"token_exchanges"`
	// AssertionFailures counts token requests refused.
	AssertionFailures int64 `json:"assertion_failures"`
	// EarlyRetries counts messages for an id that arrived before the
	// Retry-After it was given with a 429 had passed.
	EarlyRetries int64 `json:"early_retries"`
}

// fcmSide is the FCM state of a Server.
type fcmSide struct {
	s        *Server
	creds    *fcm.Credentials
	pub      *rsa.PublicKey
	lifetime time.Duration

	// trusted, when set, replaces creds' key as the service accounts
	// whose assertions the token endpoint accepts (TrustFCMCredentials).
	trusted atomic.Pointer[[]trustedAccount]

	tokens    sync.Map // access token → expiry (time.Time)
	delivered idSet
	notBefore sync.Map // id → unix nanos of the Retry-After deadline

	received, unique, duplicates           atomic.Int64
	authFail, exchanges, assertFail, early atomic.Int64
	byStatus                               [600]atomic.Int64
}

// startFCM loads the service account, or writes dev credentials pointing
// at this mock when the file does not exist.
func (s *Server) startFCM() (*fcmSide, error) {
	path := s.cfg.FCMCredentialsFile
	tokenURI := s.url + FCMTokenPath
	creds, err := fcm.LoadCredentials(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if creds, err = fcm.WriteDevCredentials(path, tokenURI); err != nil {
			return nil, fmt.Errorf("pushmock: %w", err)
		}
		s.log.Warn("FCM mock: wrote NEW DEV service-account credentials (a fresh RSA key nothing but this mock trusts); point NOTIFY_FCM_CREDENTIALS at them for local runs only",
			"file", path, "project_id", creds.ProjectID, "token_uri", tokenURI)
	case err != nil:
		return nil, fmt.Errorf("pushmock: fcm-credentials: %w", err)
	case creds.TokenURI != tokenURI:
		s.log.Warn("FCM mock: the credentials' token_uri is not this mock's token endpoint; clients using them will not exchange tokens here",
			"file", path, "token_uri", creds.TokenURI, "mock_token_uri", tokenURI)
	}
	s.log.Info("FCM mock serving", "send", s.url+"/v1/projects/"+creds.ProjectID+"/messages:send", "token_uri", tokenURI,
		"credentials", path, "access_token_lifetime", s.cfg.FCMTokenLifetime.String())
	return &fcmSide{s: s, creds: creds, pub: creds.PublicKey(), lifetime: s.cfg.FCMTokenLifetime}, nil
}

func (f *fcmSide) routes(mux *http.ServeMux) {
	mux.HandleFunc("POST "+FCMTokenPath, f.handleToken)
	mux.HandleFunc("POST /v1/projects/{project}/messages:send", f.handleSend)
}

// RevokeFCMAccessTokens makes every access token issued so far invalid,
// as a rotated key or a clock jump does: the next message with one is
// answered 401.
func (s *Server) RevokeFCMAccessTokens() {
	if s.fcm != nil {
		s.fcm.tokens.Clear()
	}
}

// trustedAccount is a service account's key the token endpoint accepts.
type trustedAccount struct {
	pub   *rsa.PublicKey
	email string
}

// TrustFCMCredentials makes the token endpoint accept assertions of these
// service accounts only (at start: the credentials file's), as adding and
// deleting keys in the Cloud console does: a key rotation is trusting
// the old and the new, then the new alone. Access tokens issued before
// stay valid until RevokeFCMAccessTokens.
func (s *Server) TrustFCMCredentials(creds ...*fcm.Credentials) {
	if s.fcm == nil {
		return
	}
	t := make([]trustedAccount, 0, len(creds))
	for _, c := range creds {
		t = append(t, trustedAccount{pub: c.PublicKey(), email: c.ClientEmail})
	}
	s.fcm.trusted.Store(&t)
}

// FCMProject is the project the FCM side serves ("" when it is off).
func (s *Server) FCMProject() string {
	if s.fcm == nil {
		return ""
	}
	return s.fcm.creds.ProjectID
}

func (f *fcmSide) stats() FCMStats {
	st := FCMStats{
		Received: f.received.Load(), Unique: f.unique.Load(), Duplicates: f.duplicates.Load(),
		ByStatus: map[string]int64{}, AuthFailures: f.authFail.Load(), TokenExchanges: f.exchanges.Load(),
		AssertionFailures: f.assertFail.Load(), EarlyRetries: f.early.Load(),
	}
	for code := range f.byStatus {
		if n := f.byStatus[code].Load(); n > 0 {
			st.ByStatus[strconv.Itoa(code)] = n
		}
	}
	return st
}

func (f *fcmSide) reset() {
	for _, c := range []*atomic.Int64{&f.received, &f.unique, &f.duplicates, &f.authFail, &f.exchanges, &f.assertFail, &f.early} {
		c.Store(0)
	}
	for i := range f.byStatus {
		f.byStatus[i].Store(0)
	}
	f.delivered.reset()
	f.notBefore.Clear()
}

// handleToken is the OAuth 2.0 token endpoint (RFC 7523 JWT bearer grant).
func (f *fcmSide) handleToken(w http.ResponseWriter, r *http.Request) {
	refuse := func(code, desc string) {
		f.assertFail.Add(1)
		f.s.log.Debug("FCM mock: token request refused", "error", code, "description", desc)
		writeFCMJSON(w, http.StatusBadRequest, map[string]string{"error": code, "error_description": desc})
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/x-www-form-urlencoded") {
		refuse("invalid_request", "Content-Type must be application/x-www-form-urlencoded")
		return
	}
	if err := r.ParseForm(); err != nil {
		refuse("invalid_request", "malformed form body")
		return
	}
	if g := r.PostForm.Get("grant_type"); g != "urn:ietf:params:oauth:grant-type:jwt-bearer" {
		refuse("unsupported_grant_type", fmt.Sprintf("grant_type %q", g))
		return
	}
	aud := "https://" + r.Host + r.URL.Path
	accounts := []trustedAccount{{pub: f.pub, email: f.creds.ClientEmail}}
	if t := f.trusted.Load(); t != nil {
		accounts = *t
	}
	err := errors.New("no service account is trusted")
	for _, a := range accounts {
		if _, err = fcm.VerifyAssertion(r.PostForm.Get("assertion"), a.pub, a.email, aud, f.s.cfg.FCMNow()); err == nil {
			break
		}
	}
	if err != nil {
		refuse("invalid_grant", err.Error())
		return
	}
	var raw [32]byte
	rand.Read(raw[:])
	tok := "ya29.mock-" + base64.RawURLEncoding.EncodeToString(raw[:])
	// Valid for exactly what expires_in tells the client: whole seconds.
	expiresIn := int64(f.lifetime / time.Second)
	f.tokens.Store(tok, f.s.cfg.FCMNow().Add(time.Duration(expiresIn)*time.Second))
	f.exchanges.Add(1)
	writeFCMJSON(w, http.StatusOK, map[string]any{
		"access_token": tok,
		"expires_in":   expiresIn,
		"token_type":   "Bearer",
	})
}

// fcmRequest is messages:send's body, decoded with unknown fields refused.
type fcmRequest struct {
	ValidateOnly bool        `json:"validate_only"`
	Message      *fcmMessage `json:"message"`
}

type fcmMessage struct {
	Token        string `json:"token"`
	Topic        string `json:"topic"`
	Condition    string `json:"condition"`
	Notification *struct {
		Title string `json:"title"`
		Body  string `json:"body"`
		Image string `json:"image"`
	} `json:"notification"`
	Data    map[string]string `json:"data"`
	Android *struct {
		TTL         string `json:"ttl"`
		CollapseKey string `json:"collapse_key"`
		Priority    string `json:"priority"`
	} `json:"android"`
}

// fcmTTL is a google.protobuf.Duration in JSON: seconds with up to nine
// fractional digits and an "s".
var fcmTTL = regexp.MustCompile(`^[0-9]{1,10}(\.[0-9]{1,9})?s$`)

// fcmReservedData are data keys FCM refuses.
func fcmReservedData(k string) bool {
	switch k {
	case "from", "notification", "message_type", "":
		return true
	}
	return strings.HasPrefix(k, "google") || strings.HasPrefix(k, "gcm")
}

// fcmMaxBody is FCM's limit on a message.
const fcmMaxBody = maxBody

func (f *fcmSide) handleSend(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	f.received.Add(1)
	status, code, msg, retryAfter, name := f.judge(r, start)
	if !f.s.awaitLatency(w, r, start) {
		return
	}
	f.byStatus[min(status, len(f.byStatus)-1)].Add(1)
	if status == http.StatusOK {
		writeFCMJSON(w, status, map[string]string{"name": name})
		return
	}
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	writeFCMError(w, status, code, msg)
}

// judge decides the answer: status, FcmError code, message, Retry-After,
// and on success the message name.
func (f *fcmSide) judge(r *http.Request, now time.Time) (status int, code, msg, retryAfter, name string) {
	auth := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(auth, "Bearer ")
	exp, known := f.tokens.Load(tok)
	if !ok || !known || !f.s.cfg.FCMNow().Before(exp.(time.Time)) {
		f.authFail.Add(1)
		io.Copy(io.Discard, io.LimitReader(r.Body, fcmMaxBody+1))
		return http.StatusUnauthorized, "", "Request had invalid authentication credentials. Expected OAuth 2 access token.", "", ""
	}
	if p := r.PathValue("project"); p != f.creds.ProjectID {
		f.authFail.Add(1)
		return http.StatusForbidden, "", fmt.Sprintf("Permission 'cloudmessaging.messages.create' denied on resource 'projects/%s'", p), "", ""
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		return http.StatusBadRequest, "INVALID_ARGUMENT", "Content-Type must be application/json", "", ""
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, fcmMaxBody+1))
	switch {
	case err != nil:
		return http.StatusBadRequest, "INVALID_ARGUMENT", "unreadable body", "", ""
	case len(body) > fcmMaxBody:
		return http.StatusBadRequest, "INVALID_ARGUMENT", "Message is too big", "", ""
	}
	var req fcmRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return http.StatusBadRequest, "INVALID_ARGUMENT", "Invalid JSON payload received. " + err.Error(), "", ""
	}
	if dec.More() {
		return http.StatusBadRequest, "INVALID_ARGUMENT", "Invalid JSON payload received. Trailing data after the message.", "", ""
	}
	if o := f.s.cfg.Observe; o != nil && req.Message != nil {
		ob := Observed{Platform: "fcm", Device: req.Message.Token, Body: body}
		if a := req.Message.Android; a != nil {
			ob.CollapseKey, ob.Priority = a.CollapseKey, a.Priority
		}
		o(ob)
	}
	if err := checkFCMMessage(req.Message); err != nil {
		return http.StatusBadRequest, "INVALID_ARGUMENT", err.Error(), "", ""
	}
	id, same, ok := FCMTokenID(req.Message.Token, f.creds.ProjectID)
	switch {
	case !ok:
		return http.StatusBadRequest, "INVALID_ARGUMENT", "The registration token is not a valid FCM registration token", "", ""
	case !same:
		return http.StatusForbidden, "SENDER_ID_MISMATCH", "SenderId mismatch", "", ""
	}
	if f.s.cfg.Rate429 > 0 { // only 429s record deadlines
		if v, ok := f.notBefore.Load(id); ok {
			if now.UnixNano() < v.(int64) {
				f.early.Add(1)
			} else {
				f.notBefore.Delete(id)
			}
		}
	}
	cfg := &f.s.cfg
	switch {
	case GoneID(id, cfg.GoneFraction):
		return http.StatusNotFound, "UNREGISTERED", "Requested entity was not found.", "", ""
	case Always5xxID(id, cfg.Always5xxFraction):
		return http.StatusInternalServerError, "INTERNAL", "Internal error encountered.", "", ""
	case cfg.Rate429 > 0 && mrand.Float64() < cfg.Rate429:
		deadline := now.Add(cfg.RetryAfter)
		f.notBefore.Store(id, deadline.UnixNano())
		ra := strconv.FormatInt(int64(math.Ceil(cfg.RetryAfter.Seconds())), 10)
		if cfg.RetryAfterDate {
			ra = deadline.Add(time.Second - 1).UTC().Format(http.TimeFormat)
		}
		return http.StatusTooManyRequests, "QUOTA_EXCEEDED", "Quota exceeded for quota metric 'Send requests' and limit 'Send requests per minute'", ra, ""
	case cfg.Rate5xx > 0 && mrand.Float64() < cfg.Rate5xx:
		return http.StatusServiceUnavailable, "UNAVAILABLE", "The service is currently unavailable.", "", ""
	}
	if req.ValidateOnly {
		return http.StatusOK, "", "", "", "projects/" + f.creds.ProjectID + "/messages/fake_message_id"
	}
	if f.delivered.add(id) {
		f.unique.Add(1)
	} else {
		f.duplicates.Add(1)
	}
	return http.StatusOK, "", "", "", "projects/" + f.creds.ProjectID + "/messages/0:" + strconv.FormatInt(id, 10) + "%" + strconv.FormatInt(now.UnixNano(), 36)
}

// checkFCMMessage applies the schema rules JSON decoding does not.
func checkFCMMessage(m *fcmMessage) error {
	if m == nil {
		return errors.New("message is required")
	}
	targets := 0
	for _, t := range []string{m.Token, m.Topic, m.Condition} {
		if t != "" {
			targets++
		}
	}
	if targets != 1 {
		return errors.New("exactly one of message.token, message.topic and message.condition is required")
	}
	if m.Token == "" {
		return errors.New("the mock delivers to message.token only")
	}
	for k := range m.Data {
		if fcmReservedData(k) {
			return fmt.Errorf("Invalid data payload key: %q is reserved", k)
		}
	}
	if a := m.Android; a != nil {
		if a.TTL != "" {
			if !fcmTTL.MatchString(a.TTL) {
				return fmt.Errorf("Invalid value at 'message.android.ttl' (type.googleapis.com/google.protobuf.Duration), %q", a.TTL)
			}
			secs, _ := strconv.ParseFloat(strings.TrimSuffix(a.TTL, "s"), 64)
			if secs > 28*24*3600 {
				return fmt.Errorf("message.android.ttl %s exceeds 28 days", a.TTL)
			}
		}
		switch a.Priority {
		case "", "NORMAL", "HIGH", "normal", "high":
		default:
			return fmt.Errorf("Invalid value at 'message.android.priority', %q", a.Priority)
		}
	}
	return nil
}

// writeFCMError writes a google.rpc.Status body as FCM does, with an
// FcmError detail when code is set.
func writeFCMError(w http.ResponseWriter, status int, code, msg string) {
	type detail struct {
		Type      string `json:"@type"`
		ErrorCode string `json:"errorCode"`
	}
	body := struct {
		Error struct {
			Code    int      `json:"code"`
			Message string   `json:"message"`
			Status  string   `json:"status"`
			Details []detail `json:"details,omitempty"`
		} `json:"error"`
	}{}
	body.Error.Code, body.Error.Message, body.Error.Status = status, msg, rpcStatus(status)
	if code != "" {
		body.Error.Details = []detail{{Type: "type.googleapis.com/google.firebase.fcm.v1.FcmError", ErrorCode: code}}
	}
	writeFCMJSON(w, status, body)
}

func rpcStatus(status int) string {
	switch status {
	case 400:
		return "INVALID_ARGUMENT"
	case 401:
		return "UNAUTHENTICATED"
	case 403:
		return "PERMISSION_DENIED"
	case 404:
		return "NOT_FOUND"
	case 429:
		return "RESOURCE_EXHAUSTED"
	case 503:
		return "UNAVAILABLE"
	}
	return "INTERNAL"
}

func writeFCMJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}
