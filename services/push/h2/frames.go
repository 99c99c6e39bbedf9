package h2

import (
	"errors"
	"fmt"
	"strconv"

	"golang.org/x/net/http2"
)

func appendFrameHeader(b []byte, length int, t http2.FrameType, flags http2.Flags, streamID uint32) []byte {
	return append(b, byte(length>>16), byte(length>>8), byte(length), byte(t), byte(flags),
		byte(streamID>>24)&0x7f, byte(streamID>>16), byte(streamID>>8), byte(streamID))
}

func appendSetting(b []byte, id http2.SettingID, v uint32) []byte {
	return append(b, byte(id>>8), byte(id), byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}

func appendUint32(b []byte, v uint32) []byte {
	return append(b, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}

func appendWindowUpdate(b []byte, streamID uint32, inc uint32) []byte {
	b = appendFrameHeader(b, 4, http2.FrameWindowUpdate, 0, streamID)
	return appendUint32(b, inc&0x7fffffff)
}

func appendRSTStream(b []byte, streamID uint32, code http2.ErrCode) []byte {
	b = appendFrameHeader(b, 4, http2.FrameRSTStream, 0, streamID)
	return appendUint32(b, uint32(code))
}

// handle acts on one frame; it fails with errEnhanceYourCalm when the
// frame left too many replies waiting.
func (cc *h2Conn) handle(f http2.Frame) (err error) {
	cc.mu.Lock()
	defer func() {
		if err == nil && cc.calmLocked() {
			err = errEnhanceYourCalm
		}
		cc.mu.Unlock()
	}()
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		st := cc.streams[f.StreamID]
		if st == nil {
			return nil // cancelled; the decoder has kept its table in sync
		}
		status, err := strconv.Atoi(f.PseudoValue("status"))
		if err != nil {
			cc.rstLocked(st.id, http2.ErrCodeProtocol)
			cc.finishLocked(st, fmt.Errorf("push service sent a malformed :status %q", f.PseudoValue("status")))
			return nil
		}
		if status >= 100 && status < 200 {
			return nil // informational
		}
		if st.resp.Status == 0 {
			st.resp.Status = status
			for _, hf := range f.Fields {
				if hf.Name == "retry-after" {
					st.resp.RetryAfter = hf.Value
				}
			}
		}
		if f.StreamEnded() {
			cc.finishLocked(st, nil)
		}
	case *http2.DataFrame:
		n := int64(f.Header().Length)
		if n > 0 {
			cc.recvUnacked += n
			if cc.recvUnacked >= h2ConnRecvWindow/4 {
				cc.wbuf = appendWindowUpdate(cc.wbuf, 0, uint32(cc.recvUnacked))
				cc.controlQueuedLocked()
				cc.recvUnacked = 0
				cc.signalFlushLocked()
			}
		}
		st := cc.streams[f.StreamID]
		if st == nil {
			return nil
		}
		if st.resp.Status == 0 {
			cc.rstLocked(st.id, http2.ErrCodeProtocol)
			cc.finishLocked(st, errors.New("push service sent data before headers"))
			return nil
		}
		data := f.Data()
		// A 2xx body is dropped: callers need its status only.
		if st.resp.Status >= 300 || st.resp.Status < 200 {
			if room := st.maxErrorBody - len(st.resp.Body); room > 0 && len(data) > 0 {
				if st.resp.Body == nil {
					st.resp.Body = make([]byte, 0, min(st.maxErrorBody, max(len(data), 512)))
				}
				st.resp.Body = append(st.resp.Body, data[:min(room, len(data))]...)
			}
		}
		st.received += len(data)
		switch {
		case f.StreamEnded():
			cc.finishLocked(st, nil)
		case st.received > maxResponseBody:
			cc.rstLocked(st.id, http2.ErrCodeCancel) // the status is all we need
			cc.finishLocked(st, nil)
		}
	case *http2.RSTStreamFrame:
		if st := cc.streams[f.StreamID]; st != nil {
			if f.ErrCode == http2.ErrCodeRefusedStream {
				cc.finishLocked(st, fmt.Errorf("%w: stream refused", ErrNotProcessed))
			} else if f.ErrCode == http2.ErrCodeNo && st.resp.Status != 0 {
				cc.finishLocked(st, nil) // answered, and asked us to stop sending the body
			} else {
				cc.finishLocked(st, fmt.Errorf("push service reset the stream: %v", f.ErrCode))
			}
		}
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil
		}
		return cc.onSettingsLocked(f)
	case *http2.WindowUpdateFrame:
		inc := int64(f.Increment)
		if f.StreamID == 0 {
			cc.connWindow += inc
			if cc.connWindow > 1<<31-1 {
				return errors.New("push service overflowed the connection flow-control window")
			}
		} else if st := cc.streams[f.StreamID]; st != nil {
			st.window += inc
		}
		cc.sendPendingLocked()
		cc.signalFlushLocked()
	case *http2.PingFrame:
		if !f.IsAck() {
			cc.wbuf = appendFrameHeader(cc.wbuf, 8, http2.FramePing, http2.FlagPingAck, 0)
			cc.wbuf = append(cc.wbuf, f.Data[:]...)
			cc.controlQueuedLocked()
			cc.signalFlushLocked()
		}
	case *http2.GoAwayFrame:
		cc.goAway = true
		for id, st := range cc.streams {
			if id > f.LastStreamID {
				cc.finishLocked(st, fmt.Errorf("%w: connection going away", ErrNotProcessed))
			}
		}
		// Once per connection and truncated: the debug data is the
		// peer's text, and a peer may repeat GOAWAY.
		if f.ErrCode != http2.ErrCodeNo && !cc.goAwayLogged {
			cc.goAwayLogged = true
			debug := f.DebugData()
			debug = debug[:min(len(debug), h2MaxLoggedDebug)]
			cc.pool.log.Warn("push service closed a connection", "addr", cc.pool.addr, "code", f.ErrCode.String(), "debug", string(debug))
		}
		if len(cc.streams) == 0 {
			go cc.close(errors.New("connection closed by the push service (GOAWAY)"))
		}
	case *http2.PushPromiseFrame:
		return errors.New("push service sent PUSH_PROMISE although push is disabled")
	}
	return nil
}

func (cc *h2Conn) onSettingsLocked(f *http2.SettingsFrame) error {
	err := f.ForeachSetting(func(s http2.Setting) error {
		switch s.ID {
		case http2.SettingMaxConcurrentStreams:
			cc.maxStreams = s.Val
		case http2.SettingInitialWindowSize:
			if s.Val > 1<<31-1 {
				return errors.New("push service sent an invalid INITIAL_WINDOW_SIZE")
			}
			delta := int64(s.Val) - cc.initWindow
			for _, st := range cc.streams {
				st.window += delta
			}
			cc.initWindow = int64(s.Val)
		case http2.SettingMaxFrameSize:
			if s.Val < 16384 || s.Val > 1<<24-1 {
				return fmt.Errorf("push service sent an invalid MAX_FRAME_SIZE %d", s.Val)
			}
			cc.maxFrame = int(s.Val)
		case http2.SettingHeaderTableSize:
			cc.henc.setLimit(s.Val)
		case http2.SettingMaxHeaderListSize:
			cc.maxHeaderList = s.Val
		}
		return nil
	})
	if err != nil {
		return err
	}
	cc.wbuf = appendFrameHeader(cc.wbuf, 0, http2.FrameSettings, http2.FlagSettingsAck, 0)
	cc.controlQueuedLocked()
	cc.sendPendingLocked()
	cc.signalFlushLocked()
	return nil
}

func (cc *h2Conn) rstLocked(id uint32, code http2.ErrCode) {
	cc.wbuf = appendRSTStream(cc.wbuf, id, code)
	cc.controlQueuedLocked()
	cc.signalFlushLocked()
}

// resetStream handles a stream-level protocol error found by the framer;
// it fails with errEnhanceYourCalm when too many replies wait.
func (cc *h2Conn) resetStream(id uint32, code http2.ErrCode, err error) error {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.rstLocked(id, code)
	if st := cc.streams[id]; st != nil {
		st.body = nil
		cc.finishLocked(st, err)
	}
	if cc.calmLocked() {
		return errEnhanceYourCalm
	}
	return nil
}
