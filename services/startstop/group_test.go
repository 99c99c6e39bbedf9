package startstop_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/notify-dev/notify/services/startstop"
)

var logMu sync.Mutex // Group.Stop stops its members concurrently

type fake struct {
	name     string
	startErr error
	log      *[]string
}

func (f *fake) Start(context.Context) error {
	logMu.Lock()
	defer logMu.Unlock()
	*f.log = append(*f.log, "start "+f.name)
	return f.startErr
}

func (f *fake) Stop(context.Context) error {
	logMu.Lock()
	defer logMu.Unlock()
	*f.log = append(*f.log, "stop "+f.name)
	return nil
}

// TestGroup: members start in order; a failed start stops the ones
// already started (not the failed one, not the later ones) and is
// returned.
func TestGroup(t *testing.T) {
	var log []string
	boom := errors.New("boom")
	g := startstop.NewGroup(&fake{name: "a", log: &log}, &fake{name: "b", log: &log, startErr: boom}, &fake{name: "c", log: &log})
	if err := g.Start(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("start: %v", err)
	}
	want := []string{"start a", "start b", "stop a"}
	if len(log) != len(want) {
		t.Fatalf("log %v, want %v", log, want)
	}
	for i := range want {
		if log[i] != want[i] {
			t.Fatalf("log %v, want %v", log, want)
		}
	}
	log = nil
	f := &failing{failed: make(chan error, 1)}
	ok := startstop.NewGroup(&fake{name: "a", log: &log}, &fake{name: "b", log: &log}, f)
	if err := ok.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	boom2 := errors.New("consumer died")
	f.failed <- boom2
	if err := <-ok.Failed(); !errors.Is(err, boom2) {
		t.Fatalf("Failed: %v", err)
	}
	if err := ok.Stop(context.Background()); err != nil || len(log) != 4 {
		t.Fatalf("stop: %v, log %v", err, log)
	}
}

// failing is a member with a Failed channel of its own.
type failing struct{ failed chan error }

func (f *failing) Start(context.Context) error { return nil }
func (f *failing) Stop(context.Context) error  { return nil }
func (f *failing) Failed() <-chan error        { return f.failed }
