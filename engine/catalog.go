// The table catalog: the descriptor that names a table's current
// incarnation, and creating, listing, opening and dropping tables and
// collecting what drops left behind (doc.go, step 8).

package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rollstore/rollstore/engine/keyspace"
	"github.com/rollstore/rollstore/objstore"
)

// the current incarnation.
type descriptor struct {
	Name        string    `json:"name"`
	Incarnation string    `json:"incarnation"`
	CreatedAt   time.Time `json:"created_at"`
	Schema      int       `json:"schema"`
	// Partitions: the ids' hash partitions; 0 in tables created before
	// partitions (schema 2), whose shards are their writers.
	Partitions int `json:"partitions,omitempty"`
}

const schemaVersion = 3

func (db *DB) readDescriptor(ctx context.Context, lay keyspace.Table) (descriptor, objstore.Attrs, error) {
	data, attrs, err := objstore.ReadAll(ctx, db.store, lay.Descriptor(), 64<<10)
	if err != nil {
		return descriptor{}, objstore.Attrs{}, err
	}
	var d descriptor
	if err := json.Unmarshal(data, &d); err != nil {
		return descriptor{}, objstore.Attrs{}, fmt.Errorf("descriptor of %s: %w", lay.Name(), err)
	}
	if err := keyspace.ValidateIncarnation(d.Incarnation); err != nil || d.Name != lay.Name() {
		return descriptor{}, objstore.Attrs{}, fmt.Errorf("descriptor of %s names %q/%q", lay.Name(), d.Name, d.Incarnation)
	}
	if d.Schema > schemaVersion {
		return descriptor{}, objstore.Attrs{}, fmt.Errorf("table %s has schema %d; this rollstore knows up to %d", lay.Name(), d.Schema, schemaVersion)
	}
	return d, attrs, nil
}

// TableOptions are fixed when a table is created.
type TableOptions struct {
	// Partitions is the number of hash partitions of the ids (1 to
	// MaxPartitions); 0 takes Config.Partitions. Negative creates a table
	// without partitions, each writer process with its own shard (the
	// layout of tables created before partitions; tests of it only).
	Partitions int
}

// CreateTable creates an empty table with the default options.
func (db *DB) CreateTable(ctx context.Context, name string) error {
	return db.CreateTableWith(ctx, name, TableOptions{})
}

// CreateTableWith creates an empty table: a new incarnation, its registry,
// then the descriptor that names it (the commit point). A descriptor whose
// incarnation was dropped without the drop finishing is replaced.
func (db *DB) CreateTableWith(ctx context.Context, name string, opts TableOptions) error {
	switch {
	case opts.Partitions == 0:
		opts.Partitions = db.cfg.Partitions
	case opts.Partitions > MaxPartitions:
		return fmt.Errorf("%w: %d partitions exceeds %d", ErrInvalid, opts.Partitions, MaxPartitions)
	}
	start := db.rt.Now()
	if err := db.createTable(ctx, name, max(opts.Partitions, 0)); err != nil {
		return err
	}
	// CollectDropped deletes an incarnation no descriptor names once its
	// objects are older than OrphanGrace: a create that took half of it
	// between its registry and its descriptor may have lost its registry.
	if grace := db.cfg.OrphanGrace; grace > 0 && db.rt.Now().Sub(start) > grace/2 {
		lay, _ := keyspace.ForTable(name)
		desc, _, err := db.readDescriptor(ctx, lay)
		if err != nil {
			return fmt.Errorf("creating %s: checking a slow create: %w", name, err)
		}
		if dropped, err := db.incarnationDropped(ctx, lay, desc.Incarnation); err != nil || dropped {
			return fmt.Errorf("%w: creating %s took more than half the orphan grace (%v), and its registry is gone (%v): create it again",
				ErrTooSlow, name, grace, err)
		}
	}
	return nil
}

func (db *DB) createTable(ctx context.Context, name string, partitions int) error {
	lay, err := keyspace.ForTable(name)
	if err != nil {
		return err
	}
	now := db.rt.Now().UTC()
	inc, err := lay.Incarnation(keyspace.NewIncarnationName(now, db.rt.Rand()))
	if err != nil {
		return err
	}
	if err := createRegistry(ctx, db, inc); err != nil {
		return err
	}
	body, _ := json.Marshal(descriptor{Name: name, Incarnation: inc.Name(), CreatedAt: now, Schema: schemaVersion, Partitions: partitions})
	put := func(opts objstore.PutOptions) error {
		opts.Size, opts.ContentType = int64(len(body)), "application/json"
		_, err := db.store.Put(ctx, lay.Descriptor(), bytes.NewReader(body), opts)
		return err
	}
	db.mu.Lock()
	earlier := db.unsure[name]
	db.mu.Unlock()
	settle := func(unknown bool) {
		db.mu.Lock()
		defer db.mu.Unlock()
		if unknown {
			db.unsure[name] = inc.Name()
		} else if db.unsure[name] == earlier {
			delete(db.unsure, name)
		}
	}
	err = put(objstore.PutOptions{IfNotExists: true})
	if errors.Is(err, objstore.ErrPrecondition) {
		old, attrs, rerr := db.readDescriptor(ctx, lay)
		if rerr != nil && !errors.Is(rerr, objstore.ErrNotFound) {
			return rerr
		}
		if rerr == nil && old.Incarnation == inc.Name() {
			settle(false)
			return nil // this create's own write, whose answer was lost
		}
		if rerr == nil && earlier != "" && old.Incarnation == earlier {
			// An earlier call of this process whose outcome stayed unknown
			// landed: this is the caller's retry, and that table is the one
			// asked for. This call's registry is an orphan.
			settle(false)
			_ = db.store.Delete(context.WithoutCancel(ctx), inc.Registry())
			return nil
		}
		dropped, derr := db.incarnationDropped(ctx, lay, old.Incarnation)
		switch {
		case errors.Is(rerr, objstore.ErrNotFound):
			// Deleted meanwhile (a drop finishing): try again.
			err = put(objstore.PutOptions{IfNotExists: true})
		case derr != nil:
			return derr
		case dropped:
			err = put(objstore.PutOptions{IfMatch: attrs.ETag})
		}
		if errors.Is(err, objstore.ErrPrecondition) {
			err = fmt.Errorf("%w: %s", ErrTableExists, name)
		}
	}
	if err != nil && !errors.Is(err, ErrTableExists) && !errors.Is(err, objstore.ErrPrecondition) {
		// The outcome may be unknown (a lost answer): the descriptor says.
		old, _, rerr := db.readDescriptor(ctx, lay)
		switch {
		case rerr == nil && old.Incarnation == inc.Name():
			settle(false)
			return nil
		case rerr != nil && !errors.Is(rerr, objstore.ErrNotFound):
			// Still unknown: keep the registry, which the table needs if
			// the descriptor landed (CollectDropped removes an orphan),
			// and remember the incarnation for the caller's retry.
			settle(true)
			return fmt.Errorf("creating %s: %w (checking the outcome: %v)", name, err, rerr)
		}
	}
	settle(false)
	if err != nil {
		// The new incarnation's registry is an orphan now (CollectDropped
		// would remove it later).
		_ = db.store.Delete(context.WithoutCancel(ctx), inc.Registry())
		return err
	}
	return nil
}

// incarnationDropped reports whether a drop tombstoned the incarnation's
// registry (a drop that stopped before removing the descriptor).
func (db *DB) incarnationDropped(ctx context.Context, lay keyspace.Table, inc string) (bool, error) {
	l, err := lay.Incarnation(inc)
	if err != nil {
		return false, nil
	}
	reg, _, err := readRegistry(ctx, db, l)
	if errors.Is(err, objstore.ErrNotFound) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return reg.Dropped, nil
}

// ListTables lists table names in order.
func (db *DB) ListTables(ctx context.Context) ([]string, error) {
	var names []string
	err := db.store.List(ctx, "", objstore.ListOptions{Delimited: true}, func(e objstore.Entry) error {
		if !e.IsPrefix {
			return nil
		}
		name := strings.TrimSuffix(e.Key, "/")
		if keyspace.ValidateTable(name) != nil {
			return nil
		}
		lay, _ := keyspace.ForTable(name)
		if _, err := db.store.Head(ctx, lay.Descriptor()); err == nil {
			names = append(names, name)
		} else if !errors.Is(err, objstore.ErrNotFound) {
			return err
		}
		return nil
	})
	return names, err
}

// Table opens a table. The handle is shared by the process and stays valid
// until the table is dropped (here or by another process, which the
// handle notices at its next refresh or write) or the DB is closed.
func (db *DB) Table(ctx context.Context, name string) (*Table, error) {
	lay, err := keyspace.ForTable(name)
	if err != nil {
		return nil, err
	}
	db.mu.Lock()
	if db.closed {
		db.mu.Unlock()
		return nil, ErrClosed
	}
	t := db.tables[name]
	db.mu.Unlock()
	if t != nil && t.retiredErr() == nil {
		return t, nil
	}
	t, _, err = db.tableNow(ctx, lay)
	return t, err
}

// tableNow returns the handle of the incarnation the descriptor names now,
// retiring a cached handle of another (dropped and created again
// elsewhere), and the descriptor's ETag.
func (db *DB) tableNow(ctx context.Context, lay keyspace.Table) (*Table, string, error) {
	name := lay.Name()
	desc, attrs, err := db.readDescriptor(ctx, lay)
	if err != nil {
		if errors.Is(err, objstore.ErrNotFound) {
			return nil, "", fmt.Errorf("%w: %s", ErrTableNotFound, name)
		}
		return nil, "", err
	}
	inc, err := lay.Incarnation(desc.Incarnation)
	if err != nil {
		return nil, "", err
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.closed {
		return nil, "", ErrClosed
	}
	if t := db.tables[name]; t != nil && t.retiredErr() == nil {
		if t.keys.Name() == inc.Name() {
			return t, attrs.ETag, nil
		}
		// Dropped and created again elsewhere: this handle is for the
		// old incarnation.
		t.retire(fmt.Errorf("%w: %s was dropped", errDropped, name))
	}
	t := newTable(db, inc, attrs.ETag, desc.Partitions)
	db.tables[name] = t
	return t, attrs.ETag, nil
}

// forget removes t from the open tables if it is still the one there.
func (db *DB) forget(t *Table) {
	db.mu.Lock()
	if db.tables[t.Name()] == t {
		delete(db.tables, t.Name())
	}
	db.mu.Unlock()
	db.resident.Remove(t)
}

// DropTable drops a table, even while writes to it are running:
//
//  1. Local writers and merges of the table stop at once; appends not yet
//     acknowledged are refused.
//  2. The registry is replaced by a tombstone, and so is every shard's
//     head: any writer of the incarnation, in any process, fails its next
//     compare-and-swap on the head and acknowledges nothing more (a write
//     whose head swap landed before this step happened before the drop).
//  3. The descriptor is deleted if it still names this incarnation (a
//     conditional delete: a table created again meanwhile keeps its own):
//     the name is free, and a new table of that name is a new incarnation
//     sharing no key with this one.
//  4. The incarnation's objects are deleted. What cannot be deleted yet (a
//     lease another process holds, a late write of a stopped process) is
//     left under the dead incarnation for CollectDropped.
func (db *DB) DropTable(ctx context.Context, name string) error {
	lay, err := keyspace.ForTable(name)
	if err != nil {
		return err
	}
	// The incarnation dropped is the one the descriptor names now, not a
	// cached handle's, which may be of one dropped elsewhere already.
	t, etag, err := db.tableNow(ctx, lay)
	if err != nil {
		return err
	}
	t.retire(fmt.Errorf("%w: %s was dropped", errDropped, name))
	_ = t.closeWriters(ctx)
	db.forget(t)
	if err := tombstone(ctx, db, t.keys); err != nil {
		return fmt.Errorf("dropping %s: %w", name, err)
	}
	if err := db.point(ctx, hookDropFenced); err != nil {
		return err
	}
	// Only the descriptor naming this incarnation is deleted: a create
	// may have replaced it since it was read (the incarnation's registry is
	// a tombstone now, which a create takes for a free name), and that
	// table stays.
	err = db.store.DeleteIfMatch(ctx, t.tableKeys.Descriptor(), etag)
	if err != nil && !errors.Is(err, objstore.ErrPrecondition) {
		return err
	}
	_, err = deleteIncarnation(ctx, db, t.keys, 0, true)
	return err
}

// deleteIncarnation deletes the objects of a dead incarnation older than
// grace (all when grace is 0), keeping the registry and head tombstones
// when keepTombstones is set. Leased objects are skipped.
func deleteIncarnation(ctx context.Context, db *DB, inc keyspace.Inc, grace time.Duration, keepTombstones bool) (int, error) {
	cutoff := db.rt.Now().Add(-grace)
	var keys []string
	err := db.store.List(ctx, inc.Root(), objstore.ListOptions{}, func(e objstore.Entry) error {
		if grace > 0 && e.LastModified.After(cutoff) {
			return nil
		}
		if keepTombstones {
			if k, ok := inc.ParseWAL(e.Key); ok && (k.Registry || k.IsHead) {
				return nil
			}
		}
		keys = append(keys, e.Key)
		return nil
	})
	if err != nil {
		return 0, err
	}
	n := 0
	for start := 0; start < len(keys); start += 256 {
		chunk := keys[start:min(start+256, len(keys))]
		if err := db.store.DeleteMany(ctx, chunk); err != nil {
			// A held lease blob fails the batch on some backends: delete
			// one by one and leave the leased ones.
			for _, k := range chunk {
				if err := db.store.Delete(ctx, k); err != nil && !errors.Is(err, objstore.ErrLeased) {
					return n, err
				}
				n++
			}
			continue
		}
		n += len(chunk)
	}
	return n, nil
}

// CollectDropped deletes what drops left behind: objects of incarnations
// no descriptor names, older than grace (a late write of a stopped process
// cannot land that long after its drop, and a create gives up if it took
// half of it). The descriptor is read again before each incarnation is
// deleted, so one created meanwhile is never taken for a dead one. A grace
// of 0 is for tests with nothing else running.
func (db *DB) CollectDropped(ctx context.Context, grace time.Duration) (int, error) {
	var roots []string
	err := db.store.List(ctx, "", objstore.ListOptions{Delimited: true}, func(e objstore.Entry) error {
		if name := strings.TrimSuffix(e.Key, "/"); e.IsPrefix && keyspace.ValidateTable(name) == nil {
			roots = append(roots, name)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	total := 0
	for _, name := range roots {
		lay, _ := keyspace.ForTable(name)
		current := ""
		if d, _, err := db.readDescriptor(ctx, lay); err == nil {
			current = d.Incarnation
		} else if !errors.Is(err, objstore.ErrNotFound) {
			return total, err
		}
		var incs []string
		err := db.store.List(ctx, lay.Root(), objstore.ListOptions{Delimited: true}, func(e objstore.Entry) error {
			inc := strings.TrimSuffix(strings.TrimPrefix(e.Key, lay.Root()), "/")
			if e.IsPrefix && keyspace.ValidateIncarnation(inc) == nil && inc != current {
				incs = append(incs, inc)
			}
			return nil
		})
		if err != nil {
			return total, err
		}
		for _, name := range incs {
			if d, _, err := db.readDescriptor(ctx, lay); err == nil && d.Incarnation == name {
				continue // created since the listing began
			} else if err != nil && !errors.Is(err, objstore.ErrNotFound) {
				return total, err
			}
			inc, _ := lay.Incarnation(name)
			n, err := deleteIncarnation(ctx, db, inc, grace, false)
			total += n
			if err != nil {
				return total, err
			}
		}
	}
	return total, nil
}
