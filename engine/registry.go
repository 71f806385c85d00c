package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rollstore/rollstore/engine/keyspace"
	"github.com/rollstore/rollstore/objstore"
)

// registry is an incarnation's directory of shards: which exist, which are
// active (have a writer that may acknowledge), and when each last changed,
// plus a hint of the newest base version. It is small and changes rarely
// (a writer taking a shard or going idle, a merge committing), so readers
// check it with one HEAD per refresh and read it only when its ETag moved.
//
// The active set is what makes a refresh cost one round trip however many
// shards a table has: a reader probes the heads of active shards, and of
// shards that changed since the registry version its view was built from;
// an idle shard's head was probed when it went idle and cannot have moved
// since (a writer re-registers as active before it acknowledges again).
type registry struct {
	Version uint64 `json:"version"`
	Dropped bool   `json:"dropped,omitempty"`
	Base    uint64 `json:"base"`
	// Floor: base versions below it are collected, whatever object is at
	// their key (a merger that lost its lease may create one there once
	// the key is free). Retention raises it before it deletes a manifest,
	// and raises Base to at least the newest version it listed.
	Floor  uint64                `json:"floor,omitempty"`
	Shards map[string]shardEntry `json:"shards"`

	etag string
}

// shardEntry is a shard's activity: the writers that registered as active
// and have not left. A shard is active while any has not: a writer leaves
// only itself, so a stopped writer of the shard (a zombie) leaving cannot
// make the shard look idle while its current writer commits; a new owner
// clears the writers it fenced.
type shardEntry struct {
	Active  bool       `json:"active"`
	Writers []regEntry `json:"writers,omitempty"`
	Changed uint64     `json:"changed"`
}

// regEntry is one registered writer and the generation it claimed when it
// registered (0: not yet, it is still taking the shard). A new owner
// removes only entries older than its own claim: the writers it fenced,
// never one that took the shard after it.
type regEntry struct {
	Name string `json:"name"`
	Gen  uint64 `json:"gen"`
}

// errDropped reports an incarnation whose registry or head is a drop's
// tombstone.
var errDropped = fmt.Errorf("%w: dropped", ErrTableNotFound)

func encodeRegistry(r *registry) []byte {
	if r.Shards == nil {
		r.Shards = map[string]shardEntry{}
	}
	b, _ := json.Marshal(r)
	return b
}

func createRegistry(ctx context.Context, db *DB, inc keyspace.Inc) error {
	body := encodeRegistry(&registry{Version: 1})
	_, err := db.store.Put(ctx, inc.Registry(), bytes.NewReader(body),
		objstore.PutOptions{IfNotExists: true, Size: int64(len(body)), ContentType: "application/json"})
	return err
}

func readRegistry(ctx context.Context, db *DB, inc keyspace.Inc) (*registry, objstore.Attrs, error) {
	data, attrs, err := objstore.ReadAll(ctx, db.store, inc.Registry(), db.cfg.MaxManifestBytes)
	if err != nil {
		return nil, attrs, err
	}
	var r registry
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, attrs, fmt.Errorf("registry of %s: %w", inc.Table(), err)
	}
	if r.Shards == nil {
		r.Shards = map[string]shardEntry{}
	}
	r.etag = attrs.ETag
	return &r, attrs, nil
}

// liveRegistry reads the registry of an incarnation that was not dropped:
// a missing registry or a drop's tombstone is errDropped.
func (t *Table) liveRegistry(ctx context.Context) (*registry, error) {
	r, _, err := readRegistry(ctx, t.db, t.keys)
	if errors.Is(err, objstore.ErrNotFound) || err == nil && r.Dropped {
		return nil, t.noteGone(fmt.Errorf("%w: %s", errDropped, t.Name()))
	}
	return r, err
}

// updateRegistry applies fn to the registry by compare-and-swap until it
// lands or fn reports no change. fn must be idempotent: after a lost
// response it is applied to the registry as that write left it.
func updateRegistry(ctx context.Context, db *DB, inc keyspace.Inc, fn func(r *registry) bool) (*registry, error) {
	for attempt := 0; ; attempt++ {
		r, _, err := readRegistry(ctx, db, inc)
		if errors.Is(err, objstore.ErrNotFound) {
			return nil, fmt.Errorf("%w: %s has no registry", errDropped, inc.Table())
		}
		if err != nil {
			return nil, err
		}
		if r.Dropped {
			return nil, fmt.Errorf("%w: %s", errDropped, inc.Table())
		}
		if !fn(r) {
			return r, nil
		}
		r.Version++
		body := encodeRegistry(r)
		attrs, err := db.store.Put(ctx, inc.Registry(), bytes.NewReader(body),
			objstore.PutOptions{IfMatch: r.etag, Size: int64(len(body)), ContentType: "application/json"})
		if err == nil {
			r.etag = attrs.ETag
			return r, nil
		}
		// A lost condition means someone else changed it; a transient
		// failure may or may not have landed. Either way fn is applied
		// again to what is there now.
		if !errors.Is(err, objstore.ErrPrecondition) && !errors.Is(err, objstore.ErrNotFound) && (!retryable(err) || attempt >= 5) {
			return nil, err
		}
		if attempt == 50 {
			return nil, fmt.Errorf("registry of %s: %d compare-and-swap attempts lost: %w", inc.Table(), attempt+1, err)
		}
		// Someone else changed it: back off at random within a window that
		// doubles (2 ms … 256 ms), so many writers starting at once (a
		// StatefulSet rolled) spread out instead of colliding in step.
		window := uint64(2) << min(attempt, 7)
		backoff := time.Duration(1+db.rt.Rand()%window) * time.Millisecond
		if _, err := db.rt.Wait(ctx, db.rt.After(backoff)); err != nil {
			return nil, err
		}
	}
}

// setActive registers writer (claiming gen) as active on shard, or
// removes it. With only, the shard's entries claimed below gen are
// removed too: a new owner, once it fenced them. An entry at or above gen
// belongs to a writer that took the shard after this one (this writer is
// being fenced and will commit nothing), so it stays: removing it could
// make the shard look idle while its owner commits.
func setActive(ctx context.Context, db *DB, inc keyspace.Inc, shard, writer string, gen uint64, active, only bool) error {
	_, err := updateRegistry(ctx, db, inc, func(r *registry) bool {
		e := r.Shards[shard]
		var ws []regEntry
		for _, x := range e.Writers {
			if x.Name == writer || (only && x.Gen < gen) {
				continue
			}
			ws = append(ws, x)
		}
		if active {
			ws = append(ws, regEntry{Name: writer, Gen: gen})
			slices.SortFunc(ws, func(a, b regEntry) int { return strings.Compare(a.Name, b.Name) })
		}
		if _, ok := r.Shards[shard]; ok && slices.Equal(ws, e.Writers) {
			return false
		}
		r.Shards[shard] = shardEntry{Active: len(ws) > 0, Writers: ws, Changed: r.Version + 1}
		return true
	})
	return err
}

// noteBase records v as the newest base version in the registry, so that
// readers learn of it without probing. Best effort: a missed hint costs
// readers a probe, never correctness.
func noteBase(ctx context.Context, db *DB, inc keyspace.Inc, v uint64) {
	_, err := updateRegistry(ctx, db, inc, func(r *registry) bool {
		if r.Base >= v {
			return false
		}
		r.Base = v
		return true
	})
	if err != nil && !errors.Is(err, ErrTableNotFound) {
		db.cfg.Logger.Warn("recording the base version in the registry", "table", inc.Table(), "version", v, "err", err)
	}
}

// tombstone replaces the registry and every registered shard's head by a
// drop's tombstone. A writer registering meanwhile makes the registry swap
// fail and is seen on the retry, so no shard escapes.
func tombstone(ctx context.Context, db *DB, inc keyspace.Inc) error {
	var shards []string
	for attempt := 0; ; attempt++ {
		r, attrs, err := readRegistry(ctx, db, inc)
		opts := objstore.PutOptions{IfMatch: attrs.ETag, ContentType: "application/json"}
		switch {
		case errors.Is(err, objstore.ErrNotFound):
			r, opts = &registry{}, objstore.PutOptions{IfNotExists: true, ContentType: "application/json"}
		case err != nil:
			return err
		case r.Dropped:
			shards = sortedKeys(r.Shards)
			return tombstoneHeads(ctx, db, inc, shards)
		}
		r.Version++
		r.Dropped = true
		body := encodeRegistry(r)
		opts.Size = int64(len(body))
		_, err = db.store.Put(ctx, inc.Registry(), bytes.NewReader(body), opts)
		if err == nil {
			return tombstoneHeads(ctx, db, inc, sortedKeys(r.Shards))
		}
		// Lost to another swap, or failed in a way that may have landed
		// (a lost answer): read again; a tombstone there is this drop's.
		if attempt == 50 || (!errors.Is(err, objstore.ErrPrecondition) && (!retryable(err) || attempt >= 5)) {
			return fmt.Errorf("tombstoning the registry: %w", err)
		}
	}
}

func tombstoneHeads(ctx context.Context, db *DB, inc keyspace.Inc, shards []string) error {
	for _, s := range shards {
		body := []byte(`{"dropped":true}`)
		_, err := db.store.Put(ctx, inc.Head(s), bytes.NewReader(body), objstore.PutOptions{
			Size: int64(len(body)), ContentType: "application/json", Metadata: map[string]string{"dropped": "1"}})
		if err != nil && !errors.Is(err, objstore.ErrLeased) {
			return fmt.Errorf("tombstoning the head of shard %s: %w", s, err)
		}
	}
	return nil
}
