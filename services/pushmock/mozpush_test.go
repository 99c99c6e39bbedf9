package pushmock_test

import (
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/notify-dev/notify/services/push/webpush"
	"github.com/notify-dev/notify/services/pushmock"
)

// browser is the client side of Mozilla's push protocol, as Firefox's
// PushServiceWebSocket speaks it, with its own subscription keys.
type browser struct {
	t    *testing.T
	ws   *websocket.Conn
	uaid string
	priv *ecdh.PrivateKey
	auth []byte
}

func connectBrowser(t *testing.T, m *pushmock.Server, uaid string) *browser {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, m.WebSocketURL(), &websocket.DialOptions{Subprotocols: []string{"push-notification"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.CloseNow() })
	b := &browser{t: t, ws: ws}
	b.send(map[string]any{"messageType": "hello", "uaid": uaid, "use_webpush": true})
	hello := b.read()
	if hello["messageType"] != "hello" || hello["status"] != float64(200) || hello["use_webpush"] != true {
		t.Fatalf("hello answered %v", hello)
	}
	b.uaid = hello["uaid"].(string)
	if uaid != "" && b.uaid != uaid {
		t.Fatalf("uaid %q, want %q kept", b.uaid, uaid)
	}
	return b
}

func (b *browser) send(v any) {
	b.t.Helper()
	raw, _ := json.Marshal(v)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := b.ws.Write(ctx, websocket.MessageText, raw); err != nil {
		b.t.Fatal(err)
	}
}

func (b *browser) read() map[string]any {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, raw, err := b.ws.Read(ctx)
	if err != nil {
		b.t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		b.t.Fatal(err)
	}
	return m
}

// register subscribes a channel and returns the subscription a page would
// post to the API.
func (b *browser) register(channel string) webpush.Subscription {
	b.t.Helper()
	b.send(map[string]any{"messageType": "register", "channelID": channel, "key": "BExampleVapidKey"})
	r := b.read()
	if r["messageType"] != "register" || r["status"] != float64(200) || r["channelID"] != channel {
		b.t.Fatalf("register answered %v", r)
	}
	priv, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		b.t.Fatal(err)
	}
	b.priv, b.auth = priv, make([]byte, 16)
	rand.Read(b.auth)
	return webpush.Subscription{Endpoint: r["pushEndpoint"].(string), P256DH: priv.PublicKey().Bytes(), Auth: b.auth}
}

// receive reads one notification, decrypts it as Firefox does and acks it.
func (b *browser) receive(channel string) []byte {
	b.t.Helper()
	n := b.read()
	if n["messageType"] != "notification" || n["channelID"] != channel {
		b.t.Fatalf("got %v, want a notification for %s", n, channel)
	}
	if h, _ := n["headers"].(map[string]any); h["encoding"] != "aes128gcm" {
		b.t.Fatalf("notification headers %v", n["headers"])
	}
	body, err := base64.RawURLEncoding.DecodeString(n["data"].(string))
	if err != nil {
		b.t.Fatal(err)
	}
	plain, err := webpush.Decrypt(b.priv, b.auth, body)
	if err != nil {
		b.t.Fatalf("decrypt what the browser received: %v", err)
	}
	b.send(map[string]any{"messageType": "ack", "updates": []map[string]any{{"channelID": channel, "version": n["version"]}}})
	return plain
}

func TestMozillaPushProtocolRoundTrip(t *testing.T) {
	t.Parallel()
	m := startMock(t, pushmock.Config{WebSocketAddr: "127.0.0.1:0"})
	if m.WebSocketURL() == "" {
		t.Fatal("no WebSocket URL with WebSocketAddr set")
	}
	s := newSender(t, m, nil)
	b := connectBrowser(t, m, "")
	const channel = "0f3f5a4e-6a2b-4c1e-9d0f-123456789abc"
	sub := b.register(channel)

	payload := []byte(`{"title":"새 강의 자료","event_id":"e1"}`)
	if out := s.Send(context.Background(), webpush.Message{Subscription: sub, Payload: payload}); out.Kind != webpush.Delivered || out.Status != 201 {
		t.Fatalf("send to a registered channel: %+v", out)
	}
	if got := b.receive(channel); string(got) != string(payload) {
		t.Fatalf("browser decrypted %q, want %q", got, payload)
	}

	// Offline: the message waits for the browser's next hello.
	if n := m.Stats().Browser.Connected; n != 1 {
		t.Fatalf("%d browsers connected, want 1", n)
	}
	b.ws.Close(websocket.StatusNormalClosure, "")
	for deadline := time.Now().Add(10 * time.Second); m.Stats().Browser.Connected != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the mock still counts the closed browser connected after 10 s")
		}
	}
	second := []byte(`{"title":"second","event_id":"e2"}`)
	if out := s.Send(context.Background(), webpush.Message{Subscription: sub, Payload: second}); out.Kind != webpush.Delivered {
		t.Fatalf("send while the browser is offline: %+v", out)
	}
	b2 := connectBrowser(t, m, b.uaid)
	b2.priv, b2.auth = b.priv, b.auth
	if got := b2.receive(channel); string(got) != string(second) {
		t.Fatalf("queued message decrypted to %q", got)
	}

	// Unsubscribed in the browser: the push service answers 410 Gone.
	b2.send(map[string]any{"messageType": "unregister", "channelID": channel})
	if r := b2.read(); r["messageType"] != "unregister" || r["status"] != float64(200) {
		t.Fatalf("unregister answered %v", r)
	}
	if out := s.Send(context.Background(), webpush.Message{Subscription: sub, Payload: payload}); out.Kind != webpush.Gone || out.Status != 410 {
		t.Fatalf("send to an unregistered channel: %+v, want Gone 410", out)
	}

	// Pings are answered.
	b2.send(map[string]any{})
	if r := b2.read(); len(r) != 0 {
		t.Fatalf("ping answered %v, want {}", r)
	}
	st := m.Stats().Browser
	if st.Forwarded != 2 || st.Gone != 1 || st.Acked != 2 {
		t.Fatalf("browser stats %+v, want 2 forwarded, 1 gone, 2 acked", st)
	}
}
