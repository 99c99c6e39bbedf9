package webpush

import (
	"testing"
	"time"
)

func TestRateWindowTellsSparseFromSustained(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	// 2% of 429s, 10,000 answers a second for 5 s: never the origin's.
	w := newRateWindow(DefaultRateLimitWindow, DefaultRateLimitRatio, DefaultRateLimitMinAnswers)
	for i := 0; i < 50_000; i++ {
		if w.add(t0.Add(time.Duration(i)*100*time.Microsecond), i%50 == 49) {
			t.Fatalf("answer %d: a 2%% rate of 429s counted as sustained", i)
		}
	}
	// Half of them 429: sustained as soon as the window holds enough answers.
	w = newRateWindow(DefaultRateLimitWindow, DefaultRateLimitRatio, DefaultRateLimitMinAnswers)
	first := -1
	for i := 0; i < 200; i++ {
		if w.add(t0.Add(time.Duration(i)*time.Millisecond), i%2 == 1) && first < 0 {
			first = i
		}
	}
	if first < DefaultRateLimitMinAnswers-1 || first > DefaultRateLimitMinAnswers+1 {
		t.Fatalf("50%% of 429s first counted as sustained at answer %d, want about %d", first, DefaultRateLimitMinAnswers)
	}
	// Once the 429s stop and the window has moved on, a lone 429 is sparse
	// again: old answers leave the window.
	later := t0.Add(time.Second)
	for i := 0; i < 100; i++ {
		w.add(later.Add(time.Duration(i)*time.Millisecond), false)
	}
	if w.add(later.Add(DefaultRateLimitWindow+100*time.Millisecond), true) {
		t.Fatal("a lone 429 after the window moved on counted as sustained")
	}
}
