package harness

// EtcdRevisionBump is how far the etcd operator's physical restore moves
// the revision past the backup's (its seedrestore.RevisionBump, which e2e
// cannot import): a restored or rebuilt cluster answers at the backup's
// revision plus this.
const EtcdRevisionBump = 1_000_000_000
