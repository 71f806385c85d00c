package server

import "time"

// pacer bounds how long a client may keep a transfer waiting, uploads and
// streamed answers alike: each wait for the client ends at the earlier of
// idle from now (a client that stalls) and the moment by which it must
// have moved the bytes so far at minRate on average, after a head start
// of idle (a client that trickles, which the idle bound alone would never
// cut off). Only time spent waiting for the client counts, not time spent
// on the store, so a slow store never makes a client look slow.
type pacer struct {
	idle    time.Duration
	minRate int64 // bytes per second; 0: none
	waited  time.Duration
	// slow is set while the rate's bound is the earlier one.
	slow bool
}

// wait is how long the next wait for the client may last, once it has
// moved done bytes.
func (p *pacer) wait(done int64) time.Duration {
	w := p.idle
	p.slow = false
	if p.minRate > 0 {
		left := p.idle + time.Duration(float64(done)/float64(p.minRate)*float64(time.Second)) - p.waited
		if left < w {
			w, p.slow = left, true
		}
	}
	return w
}
