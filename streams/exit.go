package streams

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// groupExit is how both consumers (Consumer, BatchConsumer) leave their
// group and close their client, whatever the group's state. During a
// rebalance — above all one waiting out a member that vanished without
// leaving (kill -9), which lasts that member's session timeout — the
// client's own LeaveGroup and Close can wait for the join in flight; the
// member then stayed in the group (refusing `notify replay`) for its own
// session timeout more. So a LeaveGroup request of ours goes beside the
// client's (the coordinator accepts it while it prepares a rebalance), and
// the close is bounded by the stop's context (leaveAndClose).
type groupExit struct {
	cl      *kgo.Client
	group   string
	log     *slog.Logger
	closing atomic.Bool // the client's Close has started
}

// leaveAndClose makes this member leave the group, then closes the
// client, waiting for that at most until ctx ends (the close then goes on
// in the background). ctx must have a deadline (stopStepContext).
//
// Two leaves, in this order. The client's own (LeaveGroupContext) stops
// its group management and, once that has stopped, sends a LeaveGroup for
// the member id it then has; it can be held up behind a join in flight.
// Ours goes at once for the id the client has now. Ours alone is not
// enough: a join in flight that our leave answers (UNKNOWN_MEMBER_ID)
// makes a management loop not yet stopped join again under a new member
// id (KIP-394), and that member stayed in the group for its session
// timeout. So once the client's leave has returned — or had half the
// time — a member id other than the one we left with is left too.
func (x *groupExit) leaveAndClose(ctx context.Context) {
	clientLeft := make(chan struct{})
	go func() {
		_ = x.cl.LeaveGroupContext(ctx) // its errors are the ones ours reports
		close(clientLeft)
	}()
	left, err := x.leave(ctx, "")
	dl, _ := ctx.Deadline() // stopStepContext's: there is one
	select {
	case <-clientLeft:
	case <-time.After(time.Until(dl) / 2):
	case <-ctx.Done():
	}
	if err == nil {
		_, err = x.leave(ctx, left)
	}
	if err != nil {
		x.log.Warn("leave group; the group drops this member after its session timeout", "err", err)
	}
	closed := make(chan struct{})
	go func() {
		x.close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-ctx.Done():
		x.log.Warn("stop: the Kafka client is still closing; leaving it to finish in the background")
	}
}

// close closes the client once. A later call returns at once rather than
// waiting for that close: leaveAndClose may have left one waiting on a
// join in the background, and a Stop's own call (for a consumer stopped
// before it started) must not then wait for it — it did, and a stop
// during a rebalance took as long as the rebalance.
func (x *groupExit) close() {
	if x.closing.CompareAndSwap(false, true) {
		x.cl.Close()
	}
}

// leave sends a LeaveGroup for the member id the client has, unless it
// has none or it is done (the id already left); it returns the id.
func (x *groupExit) leave(ctx context.Context, done string) (string, error) {
	memberID, _ := x.cl.GroupMetadata()
	if memberID == "" || memberID == done {
		return memberID, nil // never joined, or left already
	}
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group, req.MemberID = x.group, memberID
	m := kmsg.NewLeaveGroupRequestMember()
	m.MemberID = memberID
	m.Reason = kmsg.StringPtr("consumer stopping")
	req.Members = append(req.Members, m)
	resp, err := req.RequestWith(ctx, x.cl)
	if err != nil {
		return memberID, err
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil && !errors.Is(err, kerr.UnknownMemberID) {
		return memberID, err
	}
	for _, m := range resp.Members {
		if err := kerr.ErrorForCode(m.ErrorCode); err != nil && !errors.Is(err, kerr.UnknownMemberID) {
			return memberID, err
		}
	}
	return memberID, nil
}

// stopStepTimeout is the least time Stop's last steps — the final commit,
// leaving the group, closing the client — get together: finished work is
// worth committing even when Stop's ctx ran out, and none of them may wait
// for the group. With more of Stop's deadline left they share that; one
// budget for the three, so a loaded broker cannot stretch a stop to three
// times the bound. 2 s: a stop whose handlers took the whole deadline ends
// at most 2 s past it (the bound an operator's stop timeout is told to
// allow, TestStopDuringRebalanceLeavesTheGroup); a commit that does not fit
// leaves its records to the next owner, as after a crash.
const stopStepTimeout = 2 * time.Second

// stopStepContext is the context of a stop's last steps: the rest of
// Stop's deadline, and at least stopStepTimeout even when it ran out.
func stopStepContext(ctx context.Context) (context.Context, context.CancelFunc) {
	budget := stopStepTimeout
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) > budget {
		budget = time.Until(dl)
	}
	return context.WithTimeout(context.WithoutCancel(ctx), budget)
}
