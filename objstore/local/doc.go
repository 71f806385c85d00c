// Package local implements objstore.Bucket over a folder on disk. It is
// rollstore's embedded default and what developers run against locally.
//
// # Layout
//
// The object with key "a/b/c" is the file <root>/a/b/c, and the file holds
// exactly the object's bytes: an Arrow file rollstore wrote opens in any
// Arrow reader straight from the folder, and a payload is the file itself.
// What an object store keeps beside the bytes — ETag, content type,
// metadata — is in a small JSON sidecar in a directory beside the file:
//
//	<root>/a/b/.rollstore-meta/c.<id>.json
//	{"etag":"\"…\"","size":5,"content_type":"text/plain","metadata":{"k":"v"}}
//
// where <id> names the file the sidecar describes: its inode number in hex
// (see Consistency). The size is the file's, recorded so that a file
// changed outside the store is caught rather than served with another
// version's attributes.
//
// Names starting with ".rollstore" belong to the backend, at every depth: a
// key with such a segment is refused with objstore.ErrInvalidKey, and List
// never shows them. So no sidecar name can collide with a key, and no key
// can reach the backend's files. The top-level directory .rollstore holds
// writes in flight (tmp) and leases (leases). Open removes temporary files
// that a crashed process left once they have not been written for an hour.
//
// A file cannot also be a directory, so one key cannot be both an object
// and the directory of others: a Put of "a/b/c" while "a/b" is stored, or
// of "a/b" while keys below "a/b/" are, fails with objstore.ErrKeyConflict
// and changes nothing (a create-if-absent too: it is not ErrPrecondition,
// which would tell a committer someone else won). rollstore's own layout never makes such keys: every key
// ends in a file name, below directories that hold nothing but keys.
// Delete removes the directories it leaves empty, so that reclaimed
// generations leave no trail for List to walk and a key freed of
// everything below it can be stored again.
//
// On a case-insensitive file system, keys that differ only in case name the
// same object. A key's segments are file names, so one longer than the file
// system allows (255 bytes on most) is refused with objstore.ErrInvalidKey;
// the sidecar's name adds up to 22 bytes to the last one.
//
// Keys are resolved with os.Root: a symbolic link planted under root is
// followed only while it stays inside root, and List does not report links.
// A file the store did not write (it has no sidecar) is not an object: List
// passes over it, and Get and Head report an error, never a missing object.
//
// A folder in the RSO1 format, which this package does not read (objects
// as "<key>.rso" files behind an RSO1 header, and a top-level
// .rollstore-tmp), is refused by Open with ErrOldFormat rather than read as
// an empty store; nothing converts it.
//
// # Why a sidecar
//
// Extended attributes would keep bytes and attributes in one inode, but
// not every file system has them (tmpfs before Linux 6.6, some network and
// FUSE mounts, Windows), and cp, rsync and tar drop them unless told not
// to, which would leave a copied folder without a single readable object.
// A sidecar works wherever files do, is copied along with the folder by
// any tool, and can be read with cat. It costs a second file per object
// and two more syncs per Put, and needs the ordering below to stay
// consistent with the bytes.
//
// # Consistency
//
// Put writes the bytes to a temporary file and syncs it; writes the sidecar
// for that file (named by its id) and syncs it and its directory; then
// publishes the file under the key, with rename(2) or, for IfNotExists,
// link(2), which refuses an existing name, so that of racing creators
// exactly one wins, across processes too; and after syncing the key's
// directory, removes the sidecar of the file it replaced. Delete unlinks
// the file first and its sidecar after.
//
// So a file under a key always has its sidecar, wherever a crash stops a
// Put or a Delete: before the publish, the old object is whole (the new
// sidecar names a file that no key shows); after it, the new one is (the
// old sidecar names a file that is gone). Get and Head open the file and
// then read the sidecar named by the opened file's id, so the bytes served
// and the attributes reported are of one and the same Put, even while the
// key is replaced; a sidecar missing for the opened file means it was
// replaced or deleted after the open, and the read opens the key again. A
// body returned by Get keeps reading the object it opened even if the
// object is deleted or replaced meanwhile. An acknowledged Put survives a
// crash.
//
// IfMatch compares ETags and replaces under a lock held by this process,
// so it is atomic among the Buckets of one process but only best-effort
// between processes sharing a folder; rollstore commits with IfNotExists.
// ETags are random per Put, so they change on every replacement whatever
// the file system's timestamp resolution.
//
// Leftovers: a crash between the steps above, or processes replacing one
// key at the same moment, can leave a sidecar that describes no file. It
// is a few bytes, harmless, and not removed (it keeps its directory from
// being pruned).
//
// Copying the folder (cp, rsync, restoring a backup) gives every file a new
// id. A file whose id names no sidecar is then matched to the key's only
// sidecar that records the file's size; if there is none, or more than one
// (a copy of a folder that a crash left mid-write), reading the key is an
// error rather than a guess.
//
// # Leases
//
// Bucket implements objstore.Leaser across the processes of one machine
// that share the folder. The lease on a key is a small JSON file in
// .rollstore/leases, named by a hash of the key, holding the owner's random
// lease id and the expiry time; every change to it is made under flock(2)
// on a lock file beside it, which serialises the goroutines of one process
// as well as processes. Expiry is read from the Bucket's clock (WithClock),
// so all processes sharing a folder must share a clock: the machine's, or
// in tests one fake clock. Lease files are not synced: they only coordinate
// processes on this machine, and a crash of the machine ends every holder.
// A damaged lease file, which only such a crash can leave, counts as no
// lease.
//
// As on Azure, a leased object cannot be written or deleted
// (objstore.ErrLeased), and writing or deleting one whose lease expired
// ends the lease. Put and Delete check under the same lock once a key has
// ever been leased, so the check is atomic with lease changes except
// against the very first AcquireLease of a key. On systems without flock(2)
// (Windows), leases are only exclusive among the Buckets of one process.
package local
