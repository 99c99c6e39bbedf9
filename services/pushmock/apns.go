package pushmock

import (
	"crypto/ecdsa"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/notify-dev/notify/services/push/apns"
)

// APNsConfig turns on the mock's APNs side: POST /3/device/<hex token> on
// the same TLS listener, HTTP/2 only, checked as APNs checks it. The
// server-wide faults apply to it too: GoneFraction (tokens chosen by
// APNsGoneToken answer 410 Unregistered), Always5xxFraction (tokens chosen
// by APNsAlways5xxToken answer 500), Rate429 (429 TooManyRequests), Rate5xx
// (503 ServiceUnavailable), Latency and Jitter.
type APNsConfig struct {
	// KeyFile holds the key provider tokens are verified with: the .p8
	// the senders sign with, or its public half as a "PUBLIC KEY" PEM.
	// Default empty: the APNs side is off (/3/device answers 404).
	KeyFile string
	// KeyID and TeamID are the kid and iss a token must carry. Required
	// with KeyFile.
	KeyID, TeamID string
	// Topic, when set, is the only apns-topic accepted (others answer 400
	// TopicDisallowed). Default empty: any topic.
	Topic string
	// TokenMaxAge is the age beyond which a provider token answers 403
	// ExpiredProviderToken. Default 1 h, as APNs; tests shorten it.
	TokenMaxAge time.Duration
}

func (c APNsConfig) withDefaults() APNsConfig {
	if c.TokenMaxAge == 0 {
		c.TokenMaxAge = apns.MaxTokenAge
	}
	return c
}

func (c APNsConfig) validate() error {
	switch {
	case c.KeyFile == "" && (c.KeyID != "" || c.TeamID != "" || c.Topic != ""):
		return errors.New("pushmock: apns-key-file is required with apns-key-id, apns-team-id or apns-topic")
	case c.KeyFile == "":
		return nil
	case c.KeyID == "" || c.TeamID == "":
		return errors.New("pushmock: apns-key-id and apns-team-id are required with apns-key-file")
	case c.TokenMaxAge < 0:
		return fmt.Errorf("pushmock: apns-token-max-age %s: must not be negative", c.TokenMaxAge)
	}
	return nil
}

// APNsStats is the APNs side of Stats.
type APNsStats struct {
	// Received counts requests to /3/device/.
	Received int64 `json:"received"`
	// Unique counts distinct (device token, apns-collapse-id) pairs
	// answered 200; Duplicates the 200s for a pair already answered 200.
	Unique     int64 `json:"unique"`
	Duplicates int64 `json:"duplicates"`
	// ByStatus and ByReason count answers by HTTP status and by APNs
	// reason.
	ByStatus map[string]int64 `json:"by_status"`
	ByReason map[string]int64 `json:"by_reason"`
	// AuthFailures counts requests refused for their provider token
	// (missing, invalid or expired).
	AuthFailures int64 `json:"auth_failures"`
}

// APNsGoneToken reports whether a device token answers 410 Unregistered
// under Config.GoneFraction f.
func APNsGoneToken(tok string, f float64) bool { return inFraction(tokenID(tok), saltGone, f) }

// APNsAlways5xxToken reports whether a device token answers 500 forever
// under Config.Always5xxFraction f (unless APNsGoneToken also holds).
func APNsAlways5xxToken(tok string, f float64) bool {
	return inFraction(tokenID(tok), saltAlways5xx, f)
}

// tokenID maps a device token onto the id space the fraction sets hash;
// upper and lower case hex are one token.
func tokenID(tok string) int64 {
	h := fnv.New64a()
	io.WriteString(h, strings.ToLower(tok))
	return int64(h.Sum64() >> 1)
}

const apnsPrefix = "/3/device/"

// apnsMock is the APNs side's state.
type apnsMock struct {
	cfg APNsConfig
	pub *ecdsa.PublicKey

	received, unique, duplicates, authFail atomic.Int64
	byStatus                               [600]atomic.Int64

	mu        sync.Mutex
	byReason  map[string]int64
	delivered map[string]struct{}

	// trusted, when set, replaces cfg's key as the signing keys provider
	// tokens are accepted from (TrustAPNsKeys).
	trusted atomic.Pointer[[]APNsKey]

	// tokens caches verified provider tokens (JWT → iat): senders reuse
	// one for many requests, and an ECDSA verify each would make the mock
	// the bottleneck. The age check still runs per request.
	tokMu  sync.RWMutex
	tokens map[string]time.Time
}

func newAPNsMock(cfg APNsConfig) (*apnsMock, error) {
	pub, err := apns.LoadPublicKey(cfg.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("pushmock: apns-key-file: %w", err)
	}
	return &apnsMock{cfg: cfg, pub: pub, byReason: map[string]int64{}, delivered: map[string]struct{}{}, tokens: map[string]time.Time{}}, nil
}

func (m *apnsMock) stats() APNsStats {
	st := APNsStats{
		Received: m.received.Load(), Unique: m.unique.Load(), Duplicates: m.duplicates.Load(),
		AuthFailures: m.authFail.Load(), ByStatus: map[string]int64{}, ByReason: map[string]int64{},
	}
	for code := range m.byStatus {
		if n := m.byStatus[code].Load(); n > 0 {
			st.ByStatus[strconv.Itoa(code)] = n
		}
	}
	m.mu.Lock()
	for r, n := range m.byReason {
		st.ByReason[r] = n
	}
	m.mu.Unlock()
	return st
}

func (m *apnsMock) reset() {
	for _, c := range []*atomic.Int64{&m.received, &m.unique, &m.duplicates, &m.authFail} {
		c.Store(0)
	}
	for i := range m.byStatus {
		m.byStatus[i].Store(0)
	}
	m.mu.Lock()
	m.byReason = map[string]int64{}
	m.delivered = map[string]struct{}{}
	m.mu.Unlock()
}

// handleAPNs answers POST /3/device/{token} after the injected latency.
func (s *Server) handleAPNs(w http.ResponseWriter, r *http.Request) {
	m := s.apns
	start := time.Now()
	m.received.Add(1)
	status, reason := s.judgeAPNs(r, start)
	if !s.awaitLatency(w, r, start) {
		return
	}
	m.byStatus[status].Add(1)
	if status == http.StatusOK {
		w.Header().Set("apns-id", apnsID(r.Header.Get("apns-id")))
		w.WriteHeader(status)
		return
	}
	m.mu.Lock()
	m.byReason[reason]++
	m.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if status == http.StatusGone {
		fmt.Fprintf(w, `{"reason":%q,"timestamp":%d}`, reason, start.UnixMilli())
		return
	}
	fmt.Fprintf(w, `{"reason":%q}`, reason)
}

// apnsID echoes the request's apns-id or makes one, as APNs does.
func apnsID(given string) string {
	if given != "" {
		return given
	}
	var b [16]byte
	for i := range 2 {
		v := rand.Uint64()
		for j := range 8 {
			b[i*8+j] = byte(v >> (8 * j))
		}
	}
	const hex = "0123456789ABCDEF"
	out := make([]byte, 0, 36)
	for i, c := range b {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			out = append(out, '-')
		}
		out = append(out, hex[c>>4], hex[c&0xf])
	}
	return string(out)
}

// judgeAPNs checks a request as APNs does, in its order: protocol, path,
// provider token, headers, body; then the faults.
func (s *Server) judgeAPNs(r *http.Request, now time.Time) (int, string) {
	m := s.apns
	if r.ProtoMajor != 2 {
		io.Copy(io.Discard, io.LimitReader(r.Body, maxBody+1))
		return http.StatusHTTPVersionNotSupported, "HTTP2Required" // APNs speaks HTTP/2 only
	}
	tok := r.PathValue("token")
	if apns.ValidateDeviceToken(tok) != nil {
		return http.StatusBadRequest, "BadDeviceToken"
	}
	auth := r.Header.Get("Authorization")
	jwt, ok := strings.CutPrefix(auth, "bearer ")
	if !ok || jwt == "" {
		m.authFail.Add(1)
		return http.StatusForbidden, "MissingProviderToken"
	}
	if reason := m.checkToken(jwt, now); reason != "" {
		m.authFail.Add(1)
		return http.StatusForbidden, reason
	}
	topic := r.Header.Get("apns-topic")
	switch pt := r.Header.Get("apns-push-type"); {
	case topic == "":
		return http.StatusBadRequest, "MissingTopic"
	case m.cfg.Topic != "" && topic != m.cfg.Topic:
		return http.StatusBadRequest, "TopicDisallowed"
	case pt != "alert" && pt != "background" && pt != "voip" && pt != "complication" && pt != "fileprovider" &&
		pt != "mdm" && pt != "location" && pt != "liveactivity" && pt != "pushtotalk":
		return http.StatusBadRequest, "InvalidPushType"
	}
	if p := r.Header.Get("apns-priority"); p != "" && p != "10" && p != "5" && p != "1" {
		return http.StatusBadRequest, "BadPriority"
	}
	if e := r.Header.Get("apns-expiration"); e != "" {
		if v, err := strconv.ParseInt(e, 10, 64); err != nil || v < 0 {
			return http.StatusBadRequest, "BadExpirationDate"
		}
	}
	collapse := r.Header.Get("apns-collapse-id")
	if len(collapse) > apns.MaxCollapseID {
		return http.StatusBadRequest, "BadCollapseId"
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if s.cfg.Observe != nil && err == nil {
		s.cfg.Observe(Observed{Platform: "apns", Device: strings.TrimPrefix(r.URL.Path, "/3/device/"),
			CollapseKey: collapse, Priority: r.Header.Get("apns-priority"), Body: body})
	}
	switch {
	case err != nil:
		return http.StatusBadRequest, "BadRequest"
	case len(body) > maxBody:
		return http.StatusRequestEntityTooLarge, "PayloadTooLarge"
	case len(body) == 0:
		return http.StatusBadRequest, "PayloadEmpty"
	}
	var payload struct {
		APS *struct {
			Alert json.RawMessage `json:"alert"`
		} `json:"aps"`
	}
	if json.Unmarshal(body, &payload) != nil || payload.APS == nil || len(payload.APS.Alert) == 0 || string(payload.APS.Alert) == "null" {
		return http.StatusBadRequest, "BadPayload" // the mock's own: not JSON, or no aps.alert
	}
	id := tokenID(tok)
	switch {
	case inFraction(id, saltGone, s.cfg.GoneFraction):
		return http.StatusGone, "Unregistered"
	case inFraction(id, saltAlways5xx, s.cfg.Always5xxFraction):
		return http.StatusInternalServerError, "InternalServerError"
	case s.cfg.Rate429 > 0 && rand.Float64() < s.cfg.Rate429:
		return http.StatusTooManyRequests, "TooManyRequests"
	case s.cfg.Rate5xx > 0 && rand.Float64() < s.cfg.Rate5xx:
		return http.StatusServiceUnavailable, "ServiceUnavailable"
	}
	key := strings.ToLower(tok) + "\x00" + collapse
	m.mu.Lock()
	_, dup := m.delivered[key]
	m.delivered[key] = struct{}{}
	m.mu.Unlock()
	if dup {
		m.duplicates.Add(1)
	} else {
		m.unique.Add(1)
	}
	return http.StatusOK, ""
}

// checkToken returns "" for a valid provider token, or APNs's reason.
func (m *apnsMock) checkToken(jwt string, now time.Time) string {
	m.tokMu.RLock()
	iat, ok := m.tokens[jwt]
	m.tokMu.RUnlock()
	if !ok {
		// Verified with no age limit here: the age is checked below, per
		// request, so a cached token still expires.
		keys := []APNsKey{{Public: m.pub, KeyID: m.cfg.KeyID, TeamID: m.cfg.TeamID}}
		if t := m.trusted.Load(); t != nil {
			keys = *t
		}
		var t apns.Token
		err := errors.New("no key is trusted")
		for _, k := range keys {
			if t, err = apns.VerifyToken(jwt, k.Public, k.KeyID, k.TeamID, now, 1<<62); err == nil {
				break
			}
		}
		if err != nil {
			return "InvalidProviderToken"
		}
		iat = t.IssuedAt
		m.tokMu.Lock()
		if len(m.tokens) >= 10000 { // bound the cache against a token-per-request sender
			m.tokens = map[string]time.Time{}
		}
		m.tokens[jwt] = iat
		m.tokMu.Unlock()
	}
	if now.Sub(iat) > m.cfg.TokenMaxAge {
		return "ExpiredProviderToken"
	}
	return ""
}

// APNsKey is a signing key the APNs side accepts provider tokens of.
type APNsKey struct {
	Public        *ecdsa.PublicKey
	KeyID, TeamID string
}

// TrustAPNsKeys makes the APNs side accept provider tokens signed by
// these keys only (at start: Config.APNs's), as revoking a key in Apple's
// developer account does; tokens verified before are checked again.
func (s *Server) TrustAPNsKeys(keys ...APNsKey) {
	if s.apns == nil {
		return
	}
	k := append([]APNsKey(nil), keys...)
	s.apns.trusted.Store(&k)
	s.apns.tokMu.Lock()
	s.apns.tokens = map[string]time.Time{}
	s.apns.tokMu.Unlock()
}
