package webpush

import (
	"runtime"
	"sync"
)

// sealer encrypts messages on one long-lived goroutine per core.
//
// Send is called from thousands of goroutines that spend most of their life
// parked waiting for the push service; the garbage collector shrinks their
// stacks meanwhile, and the P-256 code then grew them again on every
// message — about 5% of the sender's CPU in profiles. Sealing on a few
// goroutines whose stacks stay grown removes that, and keeps CPU-bound
// work bounded by the number of cores whatever the number of callers.
type sealer struct {
	jobs chan *sealJob
	quit chan struct{}
	// mu is read-held while a job is handed over, so stop cannot close quit
	// between a sender's check and its hand-over: every job handed over is
	// processed (run drains the queue after quit).
	mu      sync.RWMutex
	stopped bool
}

type sealJob struct {
	keys    Keys
	payload []byte
	padTo   int
	dst     []byte
	body    []byte
	err     error
	done    chan struct{} // capacity 1, reused
}

var sealJobs = sync.Pool{New: func() any { return &sealJob{done: make(chan struct{}, 1)} }}

func newSealer() *sealer {
	n := runtime.GOMAXPROCS(0)
	s := &sealer{jobs: make(chan *sealJob, 4*n), quit: make(chan struct{})}
	for range n {
		go s.run()
	}
	return s
}

func (s *sealer) run() {
	for {
		select {
		case j := <-s.jobs:
			j.do()
		case <-s.quit:
			for {
				select {
				case j := <-s.jobs:
					j.do()
				default:
					return
				}
			}
		}
	}
}

func (j *sealJob) do() {
	j.body, j.err = AppendEncrypt(j.dst, j.keys, j.payload, j.padTo)
	j.done <- struct{}{}
}

// seal encrypts on a sealer goroutine, appending to dst. After stop it
// encrypts on the caller's goroutine.
func (s *sealer) seal(dst []byte, k Keys, payload []byte, padTo int) ([]byte, error) {
	s.mu.RLock()
	if s.stopped {
		s.mu.RUnlock()
		return AppendEncrypt(dst, k, payload, padTo)
	}
	j := sealJobs.Get().(*sealJob)
	j.keys, j.payload, j.padTo, j.dst = k, payload, padTo, dst
	s.jobs <- j // the sealers run until stop, which waits for this RLock
	s.mu.RUnlock()
	<-j.done
	body, err := j.body, j.err
	*j = sealJob{done: j.done}
	sealJobs.Put(j)
	return body, err
}

// stop ends the sealer goroutines once the jobs handed over are done.
func (s *sealer) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.stopped {
		s.stopped = true
		close(s.quit)
	}
}
