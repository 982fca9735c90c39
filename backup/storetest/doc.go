// Package storetest is the conformance suite of backup.Store: run it from
// the tests of your own Store, as opkit's fsstore and s3 stores do, to check
// what backup.Backup, List and Prune rely on (round trips of empty and
// multi-part objects, overwrite, ErrNotFound, prefix listing, idempotent
// Delete, nothing left by a failed or cancelled Put, ErrInvalidKey).
//
// Footgun: newStore must return an empty store each call; a shared bucket
// needs a fresh prefix per call (backup.Sub).
package storetest
