package pushmock

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// The browser side: Mozilla's push protocol, the WebSocket protocol Firefox
// speaks to its push service (dom.push.serverURL). A Firefox whose profile
// points that pref at Config.WebSocketAddr subscribes through the mock:
//
//	browser → {"messageType":"hello","uaid":"",…}
//	mock    → {"messageType":"hello","uaid":U,"status":200,"use_webpush":true}
//	browser → {"messageType":"register","channelID":C,"key":…}
//	mock    → {"messageType":"register","channelID":C,"status":200,"pushEndpoint":"https://<mock>/moz/C"}
//	browser → {"messageType":"unregister","channelID":C}
//	mock    → {"messageType":"unregister","channelID":C,"status":200}
//	browser → {} (ping)            mock → {}
//
// A push sent to https://<mock>/moz/C (TLS, HTTP/2 or 1.1, the same listener
// as the seeded /wpush/<id> resources) is forwarded, body untouched, as
//
//	{"messageType":"notification","channelID":C,"version":V,"data":<base64url body>,"headers":{"encoding":"aes128gcm"}}
//
// and answered 201 once the frame is written to the browser's socket (or
// queued while the browser is offline, as a real push service stores
// messages). Firefox decrypts it with its own RFC 8291 code and answers
// {"messageType":"ack","updates":[{"channelID":C,"version":V}]}. An
// unregistered or unknown channel answers 410 Gone, so the sender deletes
// the subscription.

const mozPrefix = "/moz/"

// mozPush keeps the browsers' registrations. Channels live in memory: a
// restarted mock forgets them, as a real push service that lost its
// storage would (the browser re-registers on its next hello).
type mozPush struct {
	log *slog.Logger
	url func() string // the mock's https URL, for endpoints

	mu       sync.Mutex
	channels map[string]string       // channelID → uaid
	conns    map[string]*mozConn     // uaid → live connection
	queued   map[string][]mozMessage // uaid → notifications while offline

	srv     *http.Server
	ln      net.Listener
	served  chan struct{}
	version atomic.Int64

	forwarded, acked, gone atomic.Int64
}

type mozConn struct {
	ws   *websocket.Conn
	wmu  sync.Mutex
	uaid string
}

// mozMessage is a notification as the browser receives it.
type mozMessage struct {
	MessageType string            `json:"messageType"`
	ChannelID   string            `json:"channelID"`
	Version     string            `json:"version"`
	Data        string            `json:"data,omitempty"`
	Headers     map[string]string `json:"headers,omitempty"`
}

// mozRequest is every message a browser sends.
type mozRequest struct {
	MessageType string `json:"messageType"`
	UAID        string `json:"uaid"`
	ChannelID   string `json:"channelID"`
	Updates     []struct {
		ChannelID string `json:"channelID"`
		Version   string `json:"version"`
	} `json:"updates"`
}

func newMozPush(log *slog.Logger, url func() string) *mozPush {
	return &mozPush{log: log, url: url, channels: map[string]string{}, conns: map[string]*mozConn{},
		queued: map[string][]mozMessage{}, served: make(chan struct{})}
}

// start listens on addr (plain HTTP: Firefox's testing pref
// dom.push.testing.allowInsecureServerURL accepts ws://).
func (m *mozPush) start(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("pushmock: websocket listen on %s: %w", addr, err)
	}
	m.ln = ln
	m.srv = &http.Server{Handler: http.HandlerFunc(m.serveWS), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(m.served)
		if err := m.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			m.log.Error("pushmock: websocket server", "err", err)
		}
	}()
	m.log.Info("mozilla push protocol listening", "url", m.wsURL())
	return nil
}

func (m *mozPush) wsURL() string {
	if m.ln == nil {
		return ""
	}
	return "ws://" + m.ln.Addr().String() + "/"
}

// connected counts the browser connections that said hello.
func (m *mozPush) connected() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.conns)
}

// stop closes the listener and every browser connection.
func (m *mozPush) stop(ctx context.Context) error {
	if m.srv == nil {
		return nil
	}
	err := m.srv.Shutdown(ctx) // hijacked websockets are not tracked by Shutdown
	m.mu.Lock()
	for _, c := range m.conns {
		c.ws.Close(websocket.StatusGoingAway, "push service stopping")
	}
	m.mu.Unlock()
	<-m.served
	return err
}

func (m *mozPush) serveWS(w http.ResponseWriter, r *http.Request) {
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		// Firefox sends Origin-less upgrades from its push service; any
		// local client may connect to a test service.
		InsecureSkipVerify: true,
		Subprotocols:       []string{"push-notification"},
	})
	if err != nil {
		return
	}
	ws.SetReadLimit(64 << 10)
	c := &mozConn{ws: ws}
	ctx := r.Context()
	defer func() {
		m.mu.Lock()
		if c.uaid != "" && m.conns[c.uaid] == c {
			delete(m.conns, c.uaid)
		}
		m.mu.Unlock()
		ws.CloseNow()
	}()
	for {
		_, b, err := ws.Read(ctx)
		if err != nil {
			return
		}
		var req mozRequest
		if err := json.Unmarshal(b, &req); err != nil {
			ws.Close(websocket.StatusUnsupportedData, "not JSON")
			return
		}
		if err := m.handle(ctx, c, req); err != nil {
			m.log.Debug("pushmock: browser connection", "err", err)
			return
		}
	}
}

func (m *mozPush) handle(ctx context.Context, c *mozConn, req mozRequest) error {
	switch req.MessageType {
	case "": // ping
		return c.send(ctx, struct{}{})
	case "hello":
		uaid := req.UAID
		if uaid == "" {
			uaid = randomHex(16)
		}
		m.mu.Lock()
		if old := m.conns[uaid]; old != nil && old != c {
			old.ws.Close(websocket.StatusPolicyViolation, "another connection took over")
		}
		c.uaid = uaid
		m.conns[uaid] = c
		queued := m.queued[uaid]
		delete(m.queued, uaid)
		m.mu.Unlock()
		m.log.Info("browser connected", "uaid", uaid)
		if err := c.send(ctx, map[string]any{"messageType": "hello", "uaid": uaid, "status": 200, "use_webpush": true}); err != nil {
			return err
		}
		for _, msg := range queued {
			if err := c.send(ctx, msg); err != nil {
				return err
			}
		}
		return nil
	case "register":
		if c.uaid == "" || req.ChannelID == "" {
			return c.send(ctx, map[string]any{"messageType": "register", "channelID": req.ChannelID, "status": 401})
		}
		m.mu.Lock()
		m.channels[req.ChannelID] = c.uaid
		m.mu.Unlock()
		m.log.Info("browser registered", "uaid", c.uaid, "channel", req.ChannelID)
		return c.send(ctx, map[string]any{"messageType": "register", "channelID": req.ChannelID, "status": 200,
			"pushEndpoint": m.url() + mozPrefix + req.ChannelID})
	case "unregister":
		m.mu.Lock()
		if m.channels[req.ChannelID] == c.uaid {
			delete(m.channels, req.ChannelID)
		}
		m.mu.Unlock()
		m.log.Info("browser unregistered", "uaid", c.uaid, "channel", req.ChannelID)
		return c.send(ctx, map[string]any{"messageType": "unregister", "channelID": req.ChannelID, "status": 200})
	case "ack":
		m.acked.Add(int64(len(req.Updates)))
		return nil
	default: // nack, broadcast_subscribe, …: nothing the mock acts on
		return nil
	}
}

func (c *mozConn) send(ctx context.Context, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return c.ws.Write(wctx, websocket.MessageText, b)
}

// handlePush is POST /moz/{channel}: forward a push message to the browser
// that registered the channel.
func (m *mozPush) handlePush(w http.ResponseWriter, r *http.Request) {
	channel := r.PathValue("channel")
	switch {
	case r.Header.Get("TTL") == "":
		http.Error(w, "TTL header required (RFC 8030 §5.2)", http.StatusBadRequest)
		return
	case r.Header.Get("Content-Encoding") != "aes128gcm":
		http.Error(w, "Content-Encoding must be aes128gcm (RFC 8291)", http.StatusUnsupportedMediaType)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		http.Error(w, "read body", http.StatusBadRequest)
		return
	}
	if len(body) > maxBody {
		http.Error(w, "payload larger than 4096 bytes", http.StatusRequestEntityTooLarge)
		return
	}
	msg := mozMessage{MessageType: "notification", ChannelID: channel,
		Version: strconv.FormatInt(m.version.Add(1), 10),
		Data:    base64.RawURLEncoding.EncodeToString(body), Headers: map[string]string{"encoding": "aes128gcm"}}
	m.mu.Lock()
	uaid, ok := m.channels[channel]
	c := m.conns[uaid]
	if ok && c == nil {
		m.queued[uaid] = append(m.queued[uaid], msg)
	}
	m.mu.Unlock()
	if !ok {
		m.gone.Add(1)
		http.Error(w, "no such subscription", http.StatusGone)
		return
	}
	if c != nil {
		if err := c.send(r.Context(), msg); err != nil {
			// The browser went away mid-send: keep the message for its
			// next hello, as a push service stores undelivered messages.
			m.mu.Lock()
			m.queued[uaid] = append(m.queued[uaid], msg)
			m.mu.Unlock()
		}
	}
	m.forwarded.Add(1)
	w.Header().Set("Location", m.url()+"/m/"+channel+"-"+msg.Version)
	w.WriteHeader(http.StatusCreated)
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
