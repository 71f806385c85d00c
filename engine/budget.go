package engine

import (
	"fmt"
	"sync"
)

// budget bounds the payload bytes being read at once. Reservations never
// wait: a read that does not fit is refused with ErrOverloaded so the client
// retries, instead of queueing memory behind slow consumers.
type budget struct {
	mu    sync.Mutex
	max   int64
	inUse int64
}

func newBudget(max int64) *budget { return &budget{max: max} }

// reserve takes n bytes (at most the whole budget, so one payload larger
// than the budget can still be read alone) and returns the release func.
func (b *budget) reserve(n int64) (func(), error) {
	n = min(n, b.max)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.inUse+n > b.max {
		return nil, fmt.Errorf("%w: %d payload bytes in flight, budget %d", ErrOverloaded, b.inUse, b.max)
	}
	b.inUse += n
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			b.inUse -= n
			b.mu.Unlock()
		})
	}, nil
}

func (b *budget) used() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inUse
}
