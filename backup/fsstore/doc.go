// Package fsstore is a [backup.Store] on a local or mounted filesystem, such
// as a PersistentVolume mounted into the operator or a backup Job.
//
// Put writes to a hidden temporary file in the destination directory, fsyncs
// it, renames it over the final name and fsyncs the directory, so an object is
// either absent or complete and durable, also across a crash or power loss.
// A killed writer leaves only a hidden temporary file, which List never shows
// and [Store.CleanIncomplete] (called by [backup.Prune]) removes after the
// grace period.
//
// On Linux, Put writes with O_DIRECT from two aligned 4 MiB buffers (one
// written while the other is filled), so a backup goes straight to the
// device: faster than a buffered write plus fsync, and without evicting the
// page cache of a database on the same node. Filesystems that refuse
// O_DIRECT get buffered writes instead; see [WithDirectIO].
//
// The package has no dependencies outside the standard library and package
// backup.
//
// Footguns: the filesystem must support rename within a directory atomically
// (local filesystems and NFSv4 do; some FUSE object-store mounts do not), and
// objects are created with mode 0600 because backups usually contain secrets.
package fsstore
