package backends

import (
	"context"
	"fmt"
	"sync"
)

// MemStore is an in-process Store for tests and single-process jobs. Get
// waits on a channel (no polling).
type MemStore struct {
	mu      sync.Mutex
	kv      map[string][]byte
	waiters map[string][]chan struct{}
}

// NewMemStore returns an empty in-memory store.
func NewMemStore() *MemStore {
	return &MemStore{kv: map[string][]byte{}, waiters: map[string][]chan struct{}{}}
}

// Set implements Store.
func (m *MemStore) Set(_ context.Context, key string, value []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.kv[key] = append([]byte(nil), value...)
	for _, ch := range m.waiters[key] {
		close(ch)
	}
	delete(m.waiters, key)
	return nil
}

// Delete implements StoreDeleter.
func (m *MemStore) Delete(_ context.Context, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.kv, key)
	return nil
}

// Len is the number of keys stored (for tests that check nothing piles up).
func (m *MemStore) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.kv)
}

var (
	_ StoreDeleter   = (*MemStore)(nil)
	_ StoreTryGetter = (*MemStore)(nil)
)

// TryGet implements StoreTryGetter.
func (m *MemStore) TryGet(_ context.Context, key string) ([]byte, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.kv[key]
	return append([]byte(nil), v...), ok, nil
}

// Get implements Store.
func (m *MemStore) Get(ctx context.Context, key string) ([]byte, error) {
	for {
		m.mu.Lock()
		if v, ok := m.kv[key]; ok {
			m.mu.Unlock()
			return append([]byte(nil), v...), nil
		}
		ch := make(chan struct{})
		m.waiters[key] = append(m.waiters[key], ch)
		m.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("hvd: store: key %q not set: %w", key, ctx.Err())
		}
	}
}
