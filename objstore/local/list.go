package local

import (
	"context"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/rollstore/rollstore/objstore"
)

// List calls fn for every key under prefix in lexical order of the keys,
// which is not the order of any directory walk: it merges each directory's
// files and subdirectories, comparing a subdirectory "a" as "a/" so that
// the file "a-b" ('-' < '/') comes before every key under "a/". The prefix
// may end in the middle of a name.
func (b *Bucket) List(ctx context.Context, prefix string, opts objstore.ListOptions, fn func(objstore.Entry) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("local: list %q: %w", prefix, err)
	}
	if err := objstore.ValidatePrefix(prefix); err != nil {
		return fmt.Errorf("local: list: %w", err)
	}
	// Checked up front because a removed root simply lists as empty.
	if err := b.checkRoot(); err != nil {
		return fmt.Errorf("local: list %q: %w", prefix, err)
	}
	dir, name := "", prefix
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		dir, name = prefix[:i+1], prefix[i+1:]
	}
	if dir != "" && checkKey(strings.TrimSuffix(dir, "/")) != nil {
		return nil // no key can lie there
	}
	l := lister{b: b, ctx: ctx, prefix: prefix, delimited: opts.Delimited, fn: fn}
	return l.walk(dir, name)
}

// lister is one List call. Its errors are ready to return: fn's as fn
// returned them, the others wrapped.
type lister struct {
	b         *Bucket
	ctx       context.Context
	prefix    string
	delimited bool
	fn        func(objstore.Entry) error
}

type dirItem struct {
	name  string // the key segment
	order string // name, or name+"/" for a directory
	dir   bool
	de    fs.DirEntry
}

// walk lists the entries of directory dir (a key prefix ending in '/', or
// "" for root) whose names start with name.
func (l *lister) walk(dir, name string) error {
	items, err := l.readDir(dir)
	if err != nil {
		return err
	}
	items = slices.DeleteFunc(items, func(it dirItem) bool { return !strings.HasPrefix(it.name, name) })
	slices.SortFunc(items, func(a, b dirItem) int { return strings.Compare(a.order, b.order) })
	for _, it := range items {
		if err := l.ctx.Err(); err != nil {
			return fmt.Errorf("local: list %q: %w", l.prefix, err)
		}
		key := dir + it.name
		switch {
		case it.dir && !l.delimited:
			err = l.walk(key+"/", "")
		case it.dir:
			// Directories can outlive their objects for a moment (a Put
			// between mkdir and rename, a Delete before its prune), and a
			// prefix without objects does not exist in an object store.
			var ok bool
			if ok, err = l.hasObject(key + "/"); ok {
				err = l.fn(objstore.Entry{Key: key + "/", IsPrefix: true})
			}
		default:
			var (
				e  objstore.Entry
				ok bool
			)
			if e, ok, err = l.entry(key, it.de); ok {
				err = l.fn(e)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// readDir returns the subdirectories and files in dir, unsorted, named by
// key segment. Symbolic links, special files and the backend's own names
// are not part of the store; whether a file is an object, entry decides.
func (l *lister) readDir(dir string) ([]dirItem, error) {
	ents, err := l.b.readDir(nativeDir(dir))
	if err != nil {
		if isMissing(err) {
			return nil, nil // nothing under this prefix
		}
		return nil, fmt.Errorf("local: list %q: %w", l.prefix, err)
	}
	items := make([]dirItem, 0, len(ents))
	for _, e := range ents {
		n := e.Name()
		if isReserved(n) {
			continue
		}
		switch t := e.Type(); {
		case t.IsDir():
			items = append(items, dirItem{name: n, order: n + "/", dir: true})
		case t.IsRegular():
			items = append(items, dirItem{name: n, order: n, de: e})
		}
	}
	return items, nil
}

// hasObject reports whether any object lies under dir.
func (l *lister) hasObject(dir string) (bool, error) {
	items, err := l.readDir(dir)
	if err != nil {
		return false, err
	}
	// Files first: they settle it without descending.
	slices.SortFunc(items, func(a, b dirItem) int {
		switch {
		case a.dir == b.dir:
			return 0
		case b.dir:
			return -1
		}
		return 1
	})
	for _, it := range items {
		if err := l.ctx.Err(); err != nil {
			return false, fmt.Errorf("local: list %q: %w", l.prefix, err)
		}
		var ok bool
		if it.dir {
			ok, err = l.hasObject(dir + it.name + "/")
		} else {
			_, ok, err = l.entry(dir+it.name, it.de)
		}
		if ok || err != nil {
			return ok, err
		}
	}
	return false, nil
}

// entry describes the object at key, whose directory entry is de. It
// reports ok == false for a file that is gone by now or that is not an
// object (it has no sidecar). A damaged object is listed: reading it
// reports the damage.
func (l *lister) entry(key string, de fs.DirEntry) (e objstore.Entry, ok bool, err error) {
	fi, err := de.Info()
	if err != nil {
		if isMissing(err) {
			return objstore.Entry{}, false, nil
		}
		return objstore.Entry{}, false, fmt.Errorf("local: list %q: %w", l.prefix, err)
	}
	if !fi.Mode().IsRegular() {
		return objstore.Entry{}, false, nil
	}
	id, haveID := statID(fi)
	ok, err = l.b.hasSidecar(key, id, haveID)
	if err != nil || !ok {
		if err != nil {
			err = fmt.Errorf("local: list %q: %s: %w", l.prefix, key, err)
		}
		return objstore.Entry{}, false, err
	}
	return objstore.Entry{Key: key, Size: fi.Size(), LastModified: fi.ModTime().UTC()}, true, nil
}
