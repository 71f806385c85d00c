// Consumer groups of the feed: named consumers whose committed positions
// live in the store, and whose members split the partitions among them.

package engine

import (
	"context"
	"errors"
	"time"
)

// ErrRebalanced: a consumer-group member committed a cursor of an
// assignment that is no longer current (the group's members changed); it
// must resume from the group's committed positions.
var ErrRebalanced = errors.New("consumer group rebalanced")

// ErrGroupNotFound: no consumer group of that name.
var ErrGroupNotFound = errors.New("consumer group not found")

// Group is a consumer group as stored.
type Group struct {
	Name string
	// Epoch counts membership changes; assignments are a function of the
	// member names and the partition count, fixed per epoch.
	Epoch   uint64
	Members map[string]GroupMember
	// Committed holds the committed position per partition.
	Committed   map[int]Position
	CommittedAt time.Time
}

// GroupMember is one member of a group.
type GroupMember struct {
	Beat       time.Time
	Partitions []int // its assignment in the group's epoch
}

// Assignment is what a member reads: its partitions in the group's
// current epoch and where to start each (the committed positions).
type Assignment struct {
	Group, Member string
	Epoch         uint64
	Partitions    []int
	Start         Cursor
}

// GroupLag is a group's committed position in one partition, against what
// the partition has acknowledged.
type GroupLag struct {
	Partition  int
	Committed  uint64 // offset of the next row to deliver
	Acked      uint64
	LagRows    uint64
	LagSeconds float64
}

// GroupStatus is a group with its lag.
type GroupStatus struct {
	Group
	Lag        []GroupLag
	LagRows    uint64
	LagSeconds float64
}

// JoinGroup adds member to group (creating the group), or heartbeats it,
// and returns its assignment.
func (t *Table) JoinGroup(ctx context.Context, group, member string) (Assignment, error) {
	return Assignment{}, errors.New("consumer groups: not implemented yet")
}

// CommitGroup stores c's positions as the group's committed positions.
func (t *Table) CommitGroup(ctx context.Context, group, member string, c Cursor) (Group, error) {
	return Group{}, errors.New("consumer groups: not implemented yet")
}

// LeaveGroup removes member from group.
func (t *Table) LeaveGroup(ctx context.Context, group, member string) error {
	return errors.New("consumer groups: not implemented yet")
}

// DeleteGroup deletes a group and its committed positions.
func (t *Table) DeleteGroup(ctx context.Context, group string) error {
	return errors.New("consumer groups: not implemented yet")
}

// Groups lists the table's consumer groups with their lag.
func (t *Table) Groups(ctx context.Context) ([]GroupStatus, error) {
	return nil, errors.New("consumer groups: not implemented yet")
}

// GroupStatusOf reports one group with its lag (ErrGroupNotFound).
func (t *Table) GroupStatusOf(ctx context.Context, group string) (GroupStatus, error) {
	return GroupStatus{}, errors.New("consumer groups: not implemented yet")
}
