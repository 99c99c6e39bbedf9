package api

import (
	"context"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/notify-dev/notify/services/startstop"
)

// heldStatus holds GET /v1/events requests: until release is closed, or,
// when release is nil, until the request's context ends (reported on
// cancelled).
type heldStatus struct {
	entered    chan struct{}
	release    chan struct{}
	cancelled  chan struct{}
	course     UUID
	instructor UUID
}

func (h *heldStatus) EventOwner(context.Context, UUID) (UUID, UUID, error) {
	return h.course, h.instructor, nil
}

func (h *heldStatus) EventStatus(ctx context.Context, _ UUID) (UUID, any, error) {
	h.entered <- struct{}{}
	if h.release == nil {
		<-ctx.Done()
		close(h.cancelled)
		return UUID{}, nil, ctx.Err()
	}
	<-h.release
	return h.course, map[string]string{"state": "answered"}, nil
}

// getEvent sends GET /v1/events/{id} and yields its status (0 on a
// transport error).
func getEvent(e *testEnv, srv *Server) <-chan int {
	tok := e.token(e.instructor)
	status := make(chan int, 1)
	go func() {
		rq, _ := http.NewRequest("GET", "http://"+srv.Addr()+"/v1/events/"+NewUUID().String(), nil)
		rq.Header.Set("Authorization", "Bearer "+tok)
		res, err := http.DefaultClient.Do(rq)
		if err != nil {
			status <- 0
			return
		}
		res.Body.Close()
		status <- res.StatusCode
	}()
	return status
}

func refusesConnections(srv *Server) bool {
	c, err := net.DialTimeout("tcp", srv.Addr(), time.Second)
	if err != nil {
		return true
	}
	c.Close()
	return false
}

// TestLifecycleStartContext: a second Start fails; the end of Start's
// context closes the listener but the request in flight gets its answer;
// Stop then returns, twice, with the same result.
func TestLifecycleStartContext(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	hs := &heldStatus{entered: make(chan struct{}), release: make(chan struct{}), course: e.course, instructor: e.instructor}
	srv := newTestServer(t, e.db.Pool, Config{Addr: "127.0.0.1:0", Status: hs})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); !errors.Is(err, startstop.ErrAlreadyStarted) {
		t.Fatalf("second Start = %v, want ErrAlreadyStarted", err)
	}
	status := getEvent(e, srv)
	<-hs.entered
	cancel()
	for deadline := time.Now().Add(10 * time.Second); !refusesConnections(srv); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the API still accepts connections after its Start context ended")
		}
	}
	close(hs.release)
	if got := <-status; got != http.StatusOK {
		t.Fatalf("request in flight at the Start context's end: status %d, want 200", got)
	}
	if err := srv.Stop(context.Background()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := srv.Stop(context.Background()); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}

// TestLifecycleHardStop: when Stop's context ends with a request in flight,
// the request's context is cancelled (its transaction would roll back),
// Stop says the drain did not finish, and a second Stop says the same.
func TestLifecycleHardStop(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	hs := &heldStatus{entered: make(chan struct{}), cancelled: make(chan struct{}), course: e.course, instructor: e.instructor}
	srv := newTestServer(t, e.db.Pool, Config{Addr: "127.0.0.1:0", Status: hs})
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	status := getEvent(e, srv)
	<-hs.entered
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := srv.Stop(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop past its deadline = %v, want DeadlineExceeded", err)
	}
	select {
	case <-hs.cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the request's context was not cancelled by the hard stop")
	}
	if got := <-status; got == http.StatusOK {
		t.Fatal("a request abandoned by the hard stop was answered 200")
	}
	if again := srv.Stop(context.Background()); again != err {
		t.Fatalf("second Stop = %v, want the first result %v", again, err)
	}
}
