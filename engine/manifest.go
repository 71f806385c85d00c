package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/rollstore/rollstore/engine/keyspace"
	"github.com/rollstore/rollstore/objstore"
)

// Manifest is base version Version: an immutable list of data files and,
// per shard, the highest generation merged into it. Every generation of a
// shard up to its watermark is in the base; every later one is pending.
type Manifest struct {
	Version uint64 `json:"version"`
	Parent  uint64 `json:"parent"`
	// ID is random per commit, and ParentID the parent's: together they
	// tell the version a later one was built on from an object created at
	// a collected version's key by a merger that had lost its lease (its
	// create-if-absent succeeds once the key is gone). The object's
	// metadata repeats both, so a HEAD tells.
	ID         string            `json:"id"`
	ParentID   string            `json:"parent_id"`
	CreatedAt  time.Time         `json:"created_at"`
	Schema     int               `json:"schema"`
	Files      []FileMeta        `json:"files"`
	Watermarks map[string]uint64 `json:"watermarks"`
	Rows       int64             `json:"rows"`
	// PayloadBytes sums payload sizes (inline and external).
	PayloadBytes int64 `json:"payload_bytes"`
	// Duplicates counts ids dropped as cross-shard duplicates so far.
	Duplicates int64 `json:"duplicates"`
	// Retained holds, per shard, the oldest generation kept for the feed
	// (FeedRetention): merged generations from it up to the watermark stay
	// in the WAL, where the feed reads them; the ones below it may be
	// reclaimed. A shard absent keeps none (watermark + 1).
	Retained map[string]uint64 `json:"retained,omitempty"`
}

// FileMeta describes one data file. Per-batch id ranges and row locations
// are in the file's index object (rowfile.Layout), loaded on first use.
type FileMeta struct {
	Name       string `json:"name"`
	Rows       int64  `json:"rows"`
	Bytes      int64  `json:"bytes"`
	IndexBytes int64  `json:"index_bytes"`
	MinID      string `json:"min_id"`
	MaxID      string `json:"max_id"`
}

func (f FileMeta) covers(id string) bool { return f.Rows > 0 && id >= f.MinID && id <= f.MaxID }

func (t *Table) loadManifest(ctx context.Context, v uint64) (*Manifest, error) {
	data, _, err := objstore.ReadAll(ctx, t.db.store, t.keys.Version(v), t.db.cfg.MaxManifestBytes)
	if err != nil {
		return nil, err
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%w: base manifest %d: %v", ErrCorruptObject, v, err)
	}
	if m.Version != v {
		return nil, fmt.Errorf("%w: base manifest %d claims version %d", ErrCorruptObject, v, m.Version)
	}
	if m.Watermarks == nil {
		m.Watermarks = map[string]uint64{}
	}
	return &m, nil
}

// latestVersion finds the newest committed version without listing every
// version ever written. From a version known to exist (or have existed),
// it HEADs that version and the next one at once: the next missing and the
// known present means the known is the newest (versions are collected
// oldest first, so the next cannot have been collected while the known
// survives). Without a known version, or when it was collected, it lists
// the retained versions, which retention keeps short. Version 0 means "no
// base yet".
func (t *Table) latestVersion(ctx context.Context, known uint64) (uint64, error) {
	if known == 0 {
		return t.listLatest(ctx)
	}
	var knownErr, nextErr error
	knownDone := t.db.rt.NewEvent()
	t.db.rt.Go(func() {
		defer knownDone.Fire()
		_, knownErr = t.db.store.Head(ctx, t.keys.Version(known))
	})
	_, nextErr = t.db.store.Head(ctx, t.keys.Version(known+1))
	if _, err := t.db.rt.Wait(context.WithoutCancel(ctx), knownDone); err != nil {
		return 0, err
	}
	switch {
	case nextErr == nil:
		// Newer versions exist: walk forward a little, then list.
		v := known + 1
		for probes := 0; probes < 8; probes++ {
			_, err := t.db.store.Head(ctx, t.keys.Version(v+1))
			if errors.Is(err, objstore.ErrNotFound) {
				return v, nil
			}
			if err != nil {
				return 0, err
			}
			v++
		}
		return t.listLatest(ctx)
	case !errors.Is(nextErr, objstore.ErrNotFound):
		return 0, nextErr
	case knownErr == nil:
		return known, nil
	case errors.Is(knownErr, objstore.ErrNotFound):
		return t.listLatest(ctx) // the known version was collected
	default:
		return 0, knownErr
	}
}

// newestVersion is latestVersion checked against the collection floor,
// read after the probe answered: a version found below it is an object a
// merger that had lost its lease created at a collected key (which a probe
// by key cannot tell), and one below the registry's base is a stale find;
// either way the probe starts again from the base, which retention keeps
// at or above the floor. It returns the registry it checked against.
func (t *Table) newestVersion(ctx context.Context, known uint64) (uint64, *registry, error) {
	for attempt := 0; ; attempt++ {
		v, err := t.latestVersion(ctx, known)
		if err != nil {
			return 0, nil, err
		}
		reg, err := t.liveRegistry(ctx)
		if err != nil {
			return 0, nil, err
		}
		if v >= reg.Floor && v >= reg.Base {
			return v, reg, nil
		}
		if attempt == 3 {
			return reg.Base, reg, nil // committed, and at or above the floor
		}
		known = reg.Base
	}
}

func (t *Table) listLatest(ctx context.Context) (uint64, error) {
	var latest uint64
	err := t.db.store.List(ctx, t.keys.VersionsPrefix(), objstore.ListOptions{}, func(e objstore.Entry) error {
		if v, ok := t.keys.ParseVersion(e.Key); ok && v > latest {
			latest = v
		}
		return nil
	})
	return latest, err
}

// listVersions lists every retained version number in ascending order.
func (t *Table) listVersions(ctx context.Context) ([]objstore.Entry, []uint64, error) {
	var es []objstore.Entry
	var vs []uint64
	err := t.db.store.List(ctx, t.keys.VersionsPrefix(), objstore.ListOptions{}, func(e objstore.Entry) error {
		if v, ok := t.keys.ParseVersion(e.Key); ok {
			es = append(es, e)
			vs = append(vs, v)
		}
		return nil
	})
	return es, vs, err
}

// commitManifest creates version m.Version; ErrPrecondition means another
// committer won that number.
func (t *Table) commitManifest(ctx context.Context, m *Manifest) error {
	body, err := json.Marshal(m)
	if err != nil {
		return err
	}
	_, err = t.db.store.Put(ctx, t.keys.Version(m.Version), bytes.NewReader(body),
		objstore.PutOptions{IfNotExists: true, Size: int64(len(body)), ContentType: "application/json",
			Metadata: map[string]string{"id": m.ID, "parent": m.ParentID}})
	return err
}

// emptyManifest is version 0: no files, nothing merged.
func emptyManifest() *Manifest {
	return &Manifest{Watermarks: map[string]uint64{}, Schema: schemaVersion}
}

func (m *Manifest) watermark(shard string) uint64 { return m.Watermarks[shard] }

// retainedFrom is the oldest generation of shard the feed can read: the
// ones below it are reclaimed, or may be at any time.
func (m *Manifest) retainedFrom(shard string) uint64 {
	if g, ok := m.Retained[shard]; ok {
		return g
	}
	return m.watermark(shard) + 1
}

func (m *Manifest) clone() *Manifest {
	c := *m
	c.Files = append([]FileMeta(nil), m.Files...)
	c.Watermarks = make(map[string]uint64, len(m.Watermarks))
	for k, v := range m.Watermarks {
		c.Watermarks[k] = v
	}
	c.Retained = maps.Clone(m.Retained)
	return &c
}

// dataKeys returns the keys of a data file and its index. Names come from
// manifests and are validated there; a bad one is reported, not panicked on.
func dataKeys(lay keyspace.Inc, name string) (data, index string, err error) {
	if data, err = lay.DataFile(name); err != nil {
		return "", "", err
	}
	index, err = lay.DataIndex(name)
	return data, index, err
}
