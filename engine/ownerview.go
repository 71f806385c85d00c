package engine

import "slices"

// OpenTables lists the tables this process has open (handles not retired),
// in name order, without a store call.
func (db *DB) OpenTables() []*Table {
	db.mu.Lock()
	out := make([]*Table, 0, len(db.tables))
	for _, t := range db.tables {
		if t.retiredErr() == nil {
			out = append(out, t)
		}
	}
	db.mu.Unlock()
	slices.SortFunc(out, func(a, b *Table) int {
		switch {
		case a.Name() < b.Name():
			return -1
		case a.Name() > b.Name():
			return 1
		}
		return 0
	})
	return out
}

// CachedOwners is Owners as of the members this process last read, without
// reading them again (for metrics, which must not make store calls): ok is
// false for a table without partitions and for one whose members this
// process has not read yet. A writer's heartbeat reads them every
// MembersPollInterval, so its view is that recent; Self is set only for a
// writer that has joined.
func (t *Table) CachedOwners() (owners []Owner, ok bool) {
	if t.partitions == 0 {
		return nil, false
	}
	ms := &t.membership
	ms.mu.Lock()
	view, joined := ms.view, ms.joined && !ms.left
	ms.mu.Unlock()
	if view == nil {
		return nil, false
	}
	live := t.liveMembers(view, joined)
	owners = make([]Owner, 0, t.partitions)
	for i := range t.partitions {
		owners = append(owners, t.ownerIn(view, live, joined, PartitionName(i)))
	}
	return owners, true
}

// Writing reports whether this process runs the writer of partition p:
// whether a commit of p here could still be acknowledged without taking
// the partition first. A writer that learns the partition moved hands it
// over (seals, stops) shortly after its view of the members says so.
func (t *Table) Writing(p int) bool {
	return t.partitions > 0 && t.liveWriter(PartitionName(p)) != nil
}
